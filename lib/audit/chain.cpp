#include "lib/audit/chain.hpp"

#include <cstring>
#include <stdexcept>

#include "lib/core/sha256.hpp"

namespace sandweave::audit {

std::string hex_bytes(const unsigned char* p, std::size_t n) {
    std::string out(2 * n, '0');
    for (std::size_t i = 0; i < n; ++i) {
        out[2 * i] = hex_digits[p[i] >> 4];
        out[2 * i + 1] = hex_digits[p[i] & 15];
    }
    return out;
}

std::string chain_hex(const ChainValue& v) {
    return hex_bytes(v.data(), v.size());
}

bool chain_parse(std::string_view hex, ChainValue& v) {
    if (hex.size() != 2 * kChainBytes) return false;
    auto nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    for (std::size_t i = 0; i < kChainBytes; ++i) {
        int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        v[i] = static_cast<unsigned char>(hi << 4 | lo);
    }
    return true;
}

std::string chain_seed_hex() {
    return chain_hex(ChainValue{});
}

ChainValue Chain::next(std::string_view body) const {
    Sha256 h;
    h.update(value_.data(), value_.size());
    h.update(body);
    Sha256::Digest md = h.digest();
    ChainValue v;
    std::memcpy(v.data(), md.data(), kChainBytes);
    return v;
}

void Chain::seal(std::string& buf, std::size_t mark) {
    JsonOut out;
    out.raw(buf);
    seal(out, mark);
    buf.assign(out.buf());
}

void Chain::seal(JsonOut& out, std::size_t mark) {
    // out[mark..] is "{...}\n": the body is everything before the final "}\n".
    out.truncate(out.size() - 2);
    value_ = next(out.buf().substr(mark));
    char* p = out.room(kChainTail + 1);
    out.advance(kChainTail + 1);
    std::memcpy(p, kChainKey.data(), kChainKey.size());
    p += kChainKey.size();
    for (unsigned char c : value_) {
        *p++ = hex_digits[c >> 4];
        *p++ = hex_digits[c & 15];
    }
    *p++ = '"';
    *p++ = '}';
    *p = '\n';
}

bool split_chained_line(std::string_view line, std::string_view& body, std::string_view& hex) {
    if (line.size() < kChainTail + 1) return false;
    const std::size_t at = line.size() - kChainTail;
    if (line.substr(at, kChainKey.size()) != kChainKey) return false;
    if (line.substr(line.size() - 2) != "\"}") return false;
    body = line.substr(0, at);
    hex = line.substr(at + kChainKey.size(), 2 * kChainBytes);
    return true;
}

}  // namespace sandweave::audit
