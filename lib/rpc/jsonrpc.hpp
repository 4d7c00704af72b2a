#pragma once
// JSON-RPC 2.0 framing for `sandweave serve` (docs/protocol.md): one JSON
// object per line, at most 1 MiB. Everything here treats its input as hostile:
// decode_request never throws and never trusts a length or a type; what it
// cannot accept becomes a DecodeError carrying the JSON-RPC code to answer
// with, and the connection goes on.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <nlohmann/json.hpp>

namespace sandweave::rpc {

inline constexpr int protocol_version = 1;
inline constexpr std::size_t max_line_bytes = 1u << 20;
inline constexpr std::size_t max_chunk_bytes = 64u << 10;  // decoded bytes in one data field

// JSON-RPC 2.0 codes, and ours in its server-error range.
namespace code {
inline constexpr int parse_error = -32700;
inline constexpr int invalid_request = -32600;
inline constexpr int method_not_found = -32601;
inline constexpr int invalid_params = -32602;
inline constexpr int internal_error = -32603;
inline constexpr int peer_not_allowed = -32001;
inline constexpr int handshake_required = -32002;
inline constexpr int server_busy = -32003;  // socket only: no room for another connection
inline constexpr int request_cancelled = -32800;
}  // namespace code

struct Request {
    nlohmann::json id;  // string or integer; null for a notification
    std::string method;
    nlohmann::json params = nlohmann::json::object();
    bool is_notification() const { return id.is_null(); }
};

struct DecodeError {
    int code = code::invalid_request;
    std::string message;
    nlohmann::json id;  // the request's id when it could be read, else null
};

// One line (without its newline).
std::variant<Request, DecodeError> decode_request(std::string_view line);

// The lines the server writes (each without a newline).
std::string encode_result(const nlohmann::json& id, const nlohmann::json& result);
std::string encode_error(const nlohmann::json& id, int code, const std::string& message,
                         const nlohmann::json& data = nullptr);
std::string encode_notification(const std::string& method, const nlohmann::json& params);

// Base64 (RFC 4648 with padding) for binary data in JSON strings.
std::string base64_encode(std::string_view bytes);
// nullopt for anything that is not canonical base64.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace sandweave::rpc
