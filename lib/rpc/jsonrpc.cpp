#include "lib/rpc/jsonrpc.hpp"

#include <array>

#include "lib/core/json_input.hpp"

namespace sandweave::rpc {

using nlohmann::json;

namespace {

bool valid_id(const json& id) {
    return id.is_string() || id.is_number_integer();
}

}  // namespace

std::variant<Request, DecodeError> decode_request(std::string_view line) {
    if (line.size() > max_line_bytes)
        return DecodeError{code::invalid_request,
                           "line of " + std::to_string(line.size()) +
                               " bytes is over the limit of " + std::to_string(max_line_bytes),
                           nullptr};
    // Before parsing: a document nested deep enough to overflow the stack of
    // whatever copies or prints it fits easily in one line.
    if (!json_depth_within(line, max_json_depth))
        return DecodeError{
            code::invalid_request,
            "arrays and objects nested deeper than " + std::to_string(max_json_depth) + " levels",
            nullptr};
    json j;
    try {
        // Invalid UTF-8 is rejected here.
        j = json::parse(line);
    } catch (const json::exception& e) {
        return DecodeError{code::parse_error, std::string("not JSON: ") + e.what(), nullptr};
    }
    if (!j.is_object())
        return DecodeError{code::invalid_request,
                           j.is_array() ? "batches are not supported: send one object per line"
                                        : "a request must be a JSON object",
                           nullptr};
    json id = nullptr;
    if (auto it = j.find("id"); it != j.end()) {
        if (!valid_id(*it))
            return DecodeError{code::invalid_request, "id must be a string or an integer", nullptr};
        id = *it;
    }
    auto ver = j.find("jsonrpc");
    if (ver == j.end() || !ver->is_string() || *ver != "2.0")
        return DecodeError{code::invalid_request, "jsonrpc must be \"2.0\"", id};
    auto method = j.find("method");
    if (method == j.end() || !method->is_string())
        return DecodeError{code::invalid_request, "method must be a string", id};
    Request r;
    r.id = id;
    r.method = method->get<std::string>();
    if (auto p = j.find("params"); p != j.end() && !p->is_null()) {
        if (!p->is_object())
            return DecodeError{code::invalid_params, "params must be an object", id};
        r.params = std::move(*p);
    }
    for (const auto& [k, v] : j.items()) {
        (void)v;
        if (k != "jsonrpc" && k != "id" && k != "method" && k != "params")
            return DecodeError{code::invalid_request,
                               "unknown member '" + k.substr(0, 64) + "' in the request", id};
    }
    if (r.id.is_null() && j.contains("id"))
        return DecodeError{code::invalid_request, "id must be a string or an integer", nullptr};
    return r;
}

std::string encode_result(const json& id, const json& result) {
    return json{{"jsonrpc", "2.0"}, {"id", id}, {"result", result}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
}

std::string encode_error(const json& id, int c, const std::string& message, const json& data) {
    json err{{"code", c}, {"message", message}};
    if (!data.is_null()) err["data"] = data;
    return json{{"jsonrpc", "2.0"}, {"id", id}, {"error", err}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
}

std::string encode_notification(const std::string& method, const json& params) {
    return json{{"jsonrpc", "2.0"}, {"method", method}, {"params", params}}.dump(
        -1, ' ', false, json::error_handler_t::replace);
}

namespace {
constexpr char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
}

std::string base64_encode(std::string_view in) {
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    std::size_t i = 0;
    auto byte = [&](std::size_t k) { return static_cast<unsigned char>(in[k]); };
    for (; i + 3 <= in.size(); i += 3) {
        unsigned v = (byte(i) << 16) | (byte(i + 1) << 8) | byte(i + 2);
        out += b64[(v >> 18) & 63];
        out += b64[(v >> 12) & 63];
        out += b64[(v >> 6) & 63];
        out += b64[v & 63];
    }
    if (i + 1 == in.size()) {
        unsigned v = byte(i) << 16;
        out += b64[(v >> 18) & 63];
        out += b64[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == in.size()) {
        unsigned v = (byte(i) << 16) | (byte(i + 1) << 8);
        out += b64[(v >> 18) & 63];
        out += b64[(v >> 12) & 63];
        out += b64[(v >> 6) & 63];
        out += '=';
    }
    return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
    static const std::array<int, 256> table = [] {
        std::array<int, 256> t{};
        t.fill(-1);
        for (int k = 0; k < 64; ++k) t[static_cast<unsigned char>(b64[k])] = k;
        return t;
    }();
    if (in.size() % 4 != 0) return std::nullopt;
    std::string out;
    out.reserve(in.size() / 4 * 3);
    for (std::size_t i = 0; i < in.size(); i += 4) {
        bool last = i + 4 == in.size();
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; ++k) {
            unsigned char c = static_cast<unsigned char>(in[i + static_cast<std::size_t>(k)]);
            if (c == '=' && last && k >= 2) {
                v[k] = 0;
                ++pad;
                continue;
            }
            if (pad) return std::nullopt;  // data after padding
            v[k] = table[c];
            if (v[k] < 0) return std::nullopt;
        }
        unsigned n = (static_cast<unsigned>(v[0]) << 18) | (static_cast<unsigned>(v[1]) << 12) |
                     (static_cast<unsigned>(v[2]) << 6) | static_cast<unsigned>(v[3]);
        out += static_cast<char>((n >> 16) & 255);
        if (pad < 2) out += static_cast<char>((n >> 8) & 255);
        if (pad < 1) out += static_cast<char>(n & 255);
        // Canonical: the bits a padded group leaves over must be zero.
        if ((pad == 1 && (v[2] & 3)) || (pad == 2 && (v[1] & 15))) return std::nullopt;
    }
    return out;
}

}  // namespace sandweave::rpc
