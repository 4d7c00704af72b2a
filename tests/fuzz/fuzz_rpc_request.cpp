// libFuzzer target: one line from a client through the JSON-RPC request
// decoder (lib/rpc/jsonrpc.hpp) and, when it is a request, through the params
// validator the server runs before dispatch (sandweave::api::check_params).
// Properties (docs/protocol.md, "Framing", "Messages", "Errors"):
//   - nothing crashes; check_params throws nothing but sandweave::Error;
//   - a Request has a string or integer id (or null: a notification) and
//     object params; a line over 1 MiB, or nested deeper than 64 levels, is
//     never a Request (so what the server copies and prints stays shallow);
//   - a DecodeError is -32700 (id null), -32600 or -32602, with a null, string
//     or integer id, and -32600 with id null for a line over 1 MiB;
//   - encode_result / encode_error / encode_notification of what was decoded
//     are one line (no newline) of valid JSON-RPC 2.0;
//   - base64: decode(encode(x)) == x, and whatever decodes is canonical:
//     encode(decode(s)) == s.
// Seeds: tests/data/rpc/corpus (request lines from docs/protocol.md); tokens:
// tests/data/rpc/rpc.dict.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"
#include "lib/core/json_input.hpp"
#include "lib/rpc/jsonrpc.hpp"
#if __has_include("lib/api/api.hpp")
#include "lib/api/api.hpp"
#endif
#if __has_include("lib/api/methods.hpp")
#include "lib/api/methods.hpp"
#endif

namespace sandweave::api {
// Throws sandweave::Error for bad params or an unknown method. (Declared again
// here so this target compiles before the API layer's headers exist.)
void check_params(const std::string& method, const nlohmann::json& params);
}  // namespace sandweave::api

namespace {

namespace rpc = sandweave::rpc;
using nlohmann::json;

void require(bool ok) {
    if (!ok) std::abort();
}

bool valid_id(const json& id) {
    return id.is_null() || id.is_string() || id.is_number_integer();
}

// One line of JSON-RPC 2.0 as the server would write it.
json parsed_line(const std::string& line) {
    require(line.find('\n') == std::string::npos);
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    require(!j.is_discarded() && j.is_object());
    require(j.value("jsonrpc", "") == "2.0");
    return j;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view line(reinterpret_cast<const char*>(data), size);

    auto decoded = rpc::decode_request(line);
    if (auto* req = std::get_if<rpc::Request>(&decoded)) {
        require(size <= rpc::max_line_bytes);
        require(sandweave::json_depth_within(line, sandweave::max_json_depth));
        require(valid_id(req->id));
        require(req->params.is_object());
        json out = parsed_line(rpc::encode_result(req->id, req->params));
        require(out.contains("id") && out["id"] == req->id && out.contains("result"));
        out = parsed_line(rpc::encode_notification(req->method, req->params));
        require(out.value("method", "") == req->method && !out.contains("id"));
        try {
            sandweave::api::check_params(req->method, req->params);
        } catch (const sandweave::Error&) {
            // bad params or an unknown method: the server answers with an error
        }
    } else {
        const auto& err = std::get<rpc::DecodeError>(decoded);
        require(err.code == rpc::code::parse_error || err.code == rpc::code::invalid_request ||
                err.code == rpc::code::invalid_params);
        require(valid_id(err.id));
        if (err.code == rpc::code::parse_error) require(err.id.is_null());
        if (size > rpc::max_line_bytes)
            require(err.code == rpc::code::invalid_request && err.id.is_null());
        // The message may quote the input: the error line must still be valid JSON.
        json out = parsed_line(rpc::encode_error(err.id, err.code, err.message));
        require(out.contains("error") && out["error"].value("code", 0) == err.code);
        require(out.contains("id") && out["id"] == err.id);
    }

    // Base64 both ways on the raw bytes.
    const std::string encoded = rpc::base64_encode(line);
    require(encoded.size() % 4 == 0);
    auto back = rpc::base64_decode(encoded);
    require(back.has_value() && *back == line);
    if (auto raw = rpc::base64_decode(line)) require(rpc::base64_encode(*raw) == line);
    return 0;
}
