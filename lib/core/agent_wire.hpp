#pragma once
// The guest agent's frames on the host side (the numbers live in
// wire/agent_proto.h, shared with the guest; docs/agent.md is the protocol).
// Everything decoded here may come from a hostile guest: every length is
// checked against what arrived and against the protocol's limits, and a
// violation throws AgentProtocolError naming it.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

extern "C" {
#include "wire/agent_proto.h"
}

namespace sandweave::agent {

class ProtocolError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct Frame {
    std::uint8_t type = 0;
    std::uint32_t session = 0;
    std::string payload;
};

std::string encode(std::uint8_t type, std::uint32_t session, std::string_view payload = {});
std::string encode_u32(std::uint8_t type, std::uint32_t session, std::uint32_t v);
std::string encode_signal(std::uint32_t session, std::uint32_t sig, std::uint32_t scope);
std::string encode_resize(std::uint32_t session, std::uint16_t rows, std::uint16_t cols);

// Accumulates bytes from a stream and hands out whole frames.
class FrameReader {
  public:
    explicit FrameReader(std::uint32_t max_payload = SW_AGENT_MAX_PAYLOAD)
        : max_payload_(max_payload) {}
    void feed(std::string_view bytes) { buf_.append(bytes); }
    // The next complete frame, or nullopt until more bytes arrive. Throws
    // ProtocolError on a header that cannot be valid.
    std::optional<Frame> next();
    // Drops everything before the agent's HELLO reply carrying `nonce`; false
    // while it has not arrived (what came before it is kept, up to a limit).
    bool sync_to_hello(std::string_view nonce);
    std::size_t buffered() const { return buf_.size() - pos_; }

  private:
    std::uint32_t max_payload_;
    std::string buf_;
    std::size_t pos_ = 0;
};

struct ExecSpec {
    std::uint32_t uid = 0, gid = 0;
    std::uint32_t flags = 0;  // SW_EXEC_*
    std::uint32_t timeout_ms = 0;
    std::uint16_t rows = 0, cols = 0;
    std::string cwd;
    std::vector<std::string> argv;
    std::vector<std::string> env;
};
std::string encode_exec(const ExecSpec& e);
ExecSpec decode_exec(std::string_view payload);

struct Exit {
    std::uint32_t kind = SW_EXITED;  // sw_exit_kind
    std::int32_t code = 0;
    std::string message;
};
std::string encode_exit(const Exit& e);
Exit decode_exit(std::string_view payload);
// The Docker-style status a person sees for an ended command: its exit code,
// 128+N for signal N, 124 after its timeout, 127 not found, 126 cannot be
// run (not executable, no such working directory), 125 could not start at
// all. Nullopt for SW_LOST: nothing is known of its end.
std::optional<int> exit_status(const Exit& e);

std::string u32_bytes(std::uint32_t v);

struct Hello {
    std::uint32_t protocol = 0;
    std::string nonce;  // 16 bytes
    std::string name;
};
std::string encode_hello(std::string_view nonce);  // the host's
Hello decode_hello(std::string_view payload);

std::uint32_t decode_u32(std::string_view payload);
std::uint32_t get_u32(std::string_view p, std::size_t off);

}  // namespace sandweave::agent
