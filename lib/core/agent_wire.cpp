#include "lib/core/agent_wire.hpp"

#include <cerrno>
#include <cstring>

#include "wire/byte_order.h"

namespace sandweave::agent {

namespace {

void put32(std::string& out, std::uint32_t v) {
    unsigned char b[4];
    sw_put32(b, v);
    out.append(reinterpret_cast<const char*>(b), 4);
}
void put16(std::string& out, std::uint16_t v) {
    unsigned char b[2];
    sw_put16(b, v);
    out.append(reinterpret_cast<const char*>(b), 2);
}
void put_string(std::string& out, std::string_view s) {
    put32(out, static_cast<std::uint32_t>(s.size()));
    out.append(s);
}

// Reads fields in order, throwing on anything past the end.
class Cursor {
  public:
    Cursor(std::string_view p, const char* what) : p_(p), what_(what) {}
    std::uint32_t u32() {
        need(4);
        std::uint32_t v = get_u32(p_, off_);
        off_ += 4;
        return v;
    }
    std::uint16_t u16() {
        need(2);
        std::uint16_t v = sw_get16(reinterpret_cast<const unsigned char*>(p_.data() + off_));
        off_ += 2;
        return v;
    }
    std::string bytes(std::size_t n) {
        need(n);
        std::string s(p_.substr(off_, n));
        off_ += n;
        return s;
    }
    std::string string() { return bytes(u32()); }
    std::vector<std::string> list(std::size_t max) {
        std::uint32_t n = u32();
        if (n > max) fail("too many strings");
        std::vector<std::string> v;
        v.reserve(n);
        for (std::uint32_t i = 0; i < n; i++) v.push_back(string());
        return v;
    }
    void end() {
        if (off_ != p_.size()) fail("trailing bytes");
    }
    [[noreturn]] void fail(const std::string& why) {
        throw ProtocolError(std::string("malformed ") + what_ + ": " + why);
    }

  private:
    void need(std::size_t n) {
        if (p_.size() - off_ < n) fail("truncated");
    }
    std::string_view p_;
    const char* what_;
    std::size_t off_ = 0;
};

constexpr std::size_t max_args = 4096;

}  // namespace

std::uint32_t get_u32(std::string_view p, std::size_t off) {
    return sw_get32(reinterpret_cast<const unsigned char*>(p.data() + off));
}

std::string encode(std::uint8_t type, std::uint32_t session, std::string_view payload) {
    std::string out;
    out.reserve(SW_AGENT_HEADER + payload.size());
    put32(out, static_cast<std::uint32_t>(payload.size()));
    out.push_back(static_cast<char>(type));
    out.append(3, '\0');
    put32(out, session);
    out.append(payload);
    return out;
}

std::string encode_u32(std::uint8_t type, std::uint32_t session, std::uint32_t v) {
    std::string p;
    put32(p, v);
    return encode(type, session, p);
}

std::string encode_signal(std::uint32_t session, std::uint32_t sig, std::uint32_t scope) {
    std::string p;
    put32(p, sig);
    put32(p, scope);
    return encode(SW_SIGNAL, session, p);
}

std::string encode_resize(std::uint32_t session, std::uint16_t rows, std::uint16_t cols) {
    std::string p;
    put16(p, rows);
    put16(p, cols);
    return encode(SW_RESIZE, session, p);
}

std::optional<Frame> FrameReader::next() {
    if (buf_.size() - pos_ < SW_AGENT_HEADER) {
        if (pos_ > 0 && pos_ == buf_.size()) buf_.clear(), pos_ = 0;
        return std::nullopt;
    }
    std::string_view h(buf_.data() + pos_, SW_AGENT_HEADER);
    std::uint32_t len = get_u32(h, 0);
    if (len > max_payload_)
        throw ProtocolError("frame of " + std::to_string(len) + " bytes exceeds the limit of " +
                            std::to_string(max_payload_));
    if (h[5] || h[6] || h[7]) throw ProtocolError("frame header with reserved bits set");
    if (buf_.size() - pos_ < SW_AGENT_HEADER + len) return std::nullopt;
    Frame f;
    f.type = static_cast<std::uint8_t>(h[4]);
    f.session = get_u32(h, 8);
    f.payload.assign(buf_, pos_ + SW_AGENT_HEADER, len);
    pos_ += SW_AGENT_HEADER + len;
    if (pos_ > (1u << 16) && pos_ * 2 > buf_.size()) {
        buf_.erase(0, pos_);
        pos_ = 0;
    }
    return f;
}

bool FrameReader::sync_to_hello(std::string_view nonce) {
    std::string_view rest(buf_.data() + pos_, buf_.size() - pos_);
    auto at = rest.find(nonce);
    // header(12) + protocol(4) precede the nonce in the agent's HELLO.
    while (at != std::string_view::npos) {
        if (at >= SW_AGENT_HEADER + 4 && static_cast<std::uint8_t>(rest[at - 16 + 4]) == SW_HELLO) {
            pos_ += at - 16;
            return true;
        }
        at = rest.find(nonce, at + 1);
    }
    // Keep only a tail that could still hold the start of the reply.
    constexpr std::size_t keep = 64;
    if (rest.size() > keep) pos_ = buf_.size() - keep;
    return false;
}

std::string encode_exec(const ExecSpec& e) {
    std::string p;
    put32(p, e.uid);
    put32(p, e.gid);
    put32(p, e.flags);
    put32(p, e.timeout_ms);
    put16(p, e.rows);
    put16(p, e.cols);
    put_string(p, e.cwd);
    put32(p, static_cast<std::uint32_t>(e.argv.size()));
    for (const auto& a : e.argv) put_string(p, a);
    put32(p, static_cast<std::uint32_t>(e.env.size()));
    for (const auto& a : e.env) put_string(p, a);
    return p;
}

ExecSpec decode_exec(std::string_view payload) {
    Cursor c(payload, "EXEC");
    ExecSpec e;
    e.uid = c.u32();
    e.gid = c.u32();
    e.flags = c.u32();
    e.timeout_ms = c.u32();
    e.rows = c.u16();
    e.cols = c.u16();
    e.cwd = c.string();
    e.argv = c.list(max_args);
    e.env = c.list(max_args);
    c.end();
    if (e.argv.empty() || e.argv[0].empty()) c.fail("no command");
    return e;
}

std::string encode_exit(const Exit& e) {
    std::string p;
    put32(p, e.kind);
    put32(p, static_cast<std::uint32_t>(e.code));
    put_string(p, e.message);
    return p;
}

Exit decode_exit(std::string_view payload) {
    Cursor c(payload, "EXIT");
    Exit e;
    e.kind = c.u32();
    e.code = static_cast<std::int32_t>(c.u32());
    e.message = c.string();
    c.end();
    if (e.kind > SW_LOST) c.fail("unknown kind " + std::to_string(e.kind));
    if (e.message.size() > 4096) c.fail("message too long");
    if ((e.kind == SW_EXITED && (e.code < 0 || e.code > 255)) ||
        ((e.kind == SW_SIGNALED || e.kind == SW_TIMED_OUT) && (e.code < 1 || e.code > 64)))
        c.fail("code " + std::to_string(e.code) + " out of range");
    return e;
}

std::optional<int> exit_status(const Exit& e) {
    switch (e.kind) {
        case SW_EXITED:
            return e.code;
        case SW_SIGNALED:
            return 128 + e.code;
        case SW_TIMED_OUT:
            return 124;
        case SW_NOT_STARTED:
            if (e.message.rfind("exec", 0) == 0) return e.code == ENOENT ? 127 : 126;
            if (e.message.rfind("chdir", 0) == 0) return 126;
            return 125;
        default:
            return std::nullopt;
    }
}

std::string u32_bytes(std::uint32_t v) {
    std::string s;
    put32(s, v);
    return s;
}

std::string encode_hello(std::string_view nonce) {
    std::string p;
    put32(p, SW_AGENT_PROTOCOL);
    p.append(nonce);
    return p;
}

Hello decode_hello(std::string_view payload) {
    Cursor c(payload, "HELLO");
    Hello h;
    h.protocol = c.u32();
    h.nonce = c.bytes(16);
    h.name = c.string();
    c.end();
    if (h.name.size() > 256) c.fail("name too long");
    return h;
}

std::uint32_t decode_u32(std::string_view payload) {
    if (payload.size() != 4) throw ProtocolError("malformed frame: expected 4 bytes");
    return get_u32(payload, 0);
}

}  // namespace sandweave::agent
