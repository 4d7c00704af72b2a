#include "lib/audit/json_out.hpp"

#include <algorithm>
#include <charconv>

#include "lib/audit/chain.hpp"

namespace sandweave::audit {
namespace {

// 1 where the byte can be copied verbatim inside a JSON string (printable
// ASCII other than '"' and '\\').
struct PlainTable {
    bool v[256]{};
    constexpr PlainTable() {
        for (int c = 0x20; c < 0x7f; ++c) v[c] = c != '"' && c != '\\';
    }
};
constexpr PlainTable kPlain;

// Length of a valid UTF-8 sequence starting at s[i] (2..4), or 0 if invalid.
std::size_t utf8_seq_len(std::string_view s, std::size_t i) {
    auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
    unsigned char c = b(0);
    std::size_t n = s.size() - i;
    auto cont = [&](std::size_t k) { return k < n && (b(k) & 0xC0) == 0x80; };
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (!cont(1) || !cont(2)) return 0;
        if (c == 0xE0 && b(1) < 0xA0) return 0;   // overlong
        if (c == 0xED && b(1) >= 0xA0) return 0;  // surrogates
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (!cont(1) || !cont(2) || !cont(3)) return 0;
        if (c == 0xF0 && b(1) < 0x90) return 0;   // overlong
        if (c == 0xF4 && b(1) >= 0x90) return 0;  // > U+10FFFF
        return 4;
    }
    return 0;
}

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

}  // namespace

void JsonOut::grow(std::size_t n) {
    std::size_t cap = std::max(2 * cap_, size_ + n);
    std::unique_ptr<char[]> data(new char[cap]);
    std::memcpy(data.get(), data_.get(), size_);
    data_ = std::move(data);
    cap_ = cap;
}

void JsonOut::u64(std::uint64_t v) {
    char* p = room(24);
    size_ += static_cast<std::size_t>(std::to_chars(p, p + 24, v).ptr - p);
}

void JsonOut::i64(std::int64_t v) {
    char* p = room(24);
    size_ += static_cast<std::size_t>(std::to_chars(p, p + 24, v).ptr - p);
}

namespace {
constexpr std::uint64_t kExactLimit = 1ull << 53;
}

void JsonOut::exact_u64(std::uint64_t v) {
    if (v <= kExactLimit) return u64(v);
    ch('"');
    u64(v);
    ch('"');
}

void JsonOut::exact_i64(std::int64_t v) {
    if (v <= static_cast<std::int64_t>(kExactLimit) && v >= -static_cast<std::int64_t>(kExactLimit))
        return i64(v);
    ch('"');
    i64(v);
    ch('"');
}

void JsonOut::hex64(std::uint64_t v) {
    char* p = room(24);
    p[0] = '"';
    p[1] = '0';
    p[2] = 'x';
    auto r = std::to_chars(p + 3, p + 23, v, 16);
    *r.ptr = '"';
    size_ += static_cast<std::size_t>(r.ptr + 1 - p);
}

bool JsonOut::str(std::string_view s) {
    // \uXXNN: a control character (XX = 00) or an invalid byte (XX = dc).
    auto u_escape = [this](char x1, char x2, unsigned char c) {
        char esc[6] = {'\\', 'u', x1, x2, hex_digits[c >> 4], hex_digits[c & 15]};
        raw(std::string_view(esc, 6));
    };
    bool valid = true;
    ch('"');
    std::size_t i = 0, run = 0;
    while (i < s.size()) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (kPlain.v[c]) {
            ++i;
            continue;
        }
        raw(s.substr(run, i - run));
        if (c < 0x80) {
            switch (c) {
                case '"':
                    raw("\\\"");
                    break;
                case '\\':
                    raw("\\\\");
                    break;
                case '\n':
                    raw("\\n");
                    break;
                case '\t':
                    raw("\\t");
                    break;
                case '\r':
                    raw("\\r");
                    break;
                default:
                    u_escape('0', '0', c);
            }
            ++i;
        } else if (std::size_t n = utf8_seq_len(s, i); n != 0) {
            raw(s.substr(i, n));
            i += n;
        } else {
            u_escape('d', 'c', c);  // surrogateescape: 0xNN -> \udcNN
            valid = false;
            ++i;
        }
        run = i;
    }
    raw(s.substr(run));
    ch('"');
    return valid;
}

void JsonOut::base64(std::string_view bytes) {
    ch('"');
    const std::size_t n = (bytes.size() + 2) / 3 * 4;
    char* o = room(n);
    size_ += n;
    auto u = [&](std::size_t k) { return static_cast<unsigned char>(bytes[k]); };
    std::size_t i = 0;
    for (; i + 3 <= bytes.size(); i += 3) {
        unsigned v = (u(i) << 16) | (u(i + 1) << 8) | u(i + 2);
        *o++ = kB64[v >> 18];
        *o++ = kB64[(v >> 12) & 63];
        *o++ = kB64[(v >> 6) & 63];
        *o++ = kB64[v & 63];
    }
    if (std::size_t rest = bytes.size() - i; rest != 0) {
        unsigned v = u(i) << 16;
        if (rest == 2) v |= u(i + 1) << 8;
        *o++ = kB64[v >> 18];
        *o++ = kB64[(v >> 12) & 63];
        *o++ = rest == 2 ? kB64[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    ch('"');
}

std::string base64_encode(std::string_view bytes) {
    JsonOut out;
    out.base64(bytes);
    return std::string(out.buf().substr(1, out.size() - 2));
}

}  // namespace sandweave::audit
