#include "lib/core/json_input.hpp"

#include <cstdio>

#include "lib/core/error.hpp"

namespace sandweave {

bool json_depth_within(std::string_view text, std::size_t limit) {
    std::size_t depth = 0;
    bool in_string = false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        char c = text[i];
        if (in_string) {
            if (c == '\\')
                ++i;  // the escaped character, whatever it is
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > limit) return false;
        } else if ((c == ']' || c == '}') && depth > 0) {
            --depth;
        }
    }
    return true;
}

nlohmann::json parse_untrusted_json(std::string_view text) {
    if (!json_depth_within(text, max_json_depth))
        throw nlohmann::json::parse_error::create(101, 0,
                                                  "nested deeper than " +
                                                      std::to_string(max_json_depth) +
                                                      " levels of arrays and objects",
                                                  nullptr);
    return nlohmann::json::parse(text);
}

std::size_t invalid_utf8_at(std::string_view text) {
    const auto* s = reinterpret_cast<const unsigned char*>(text.data());
    const std::size_t n = text.size();
    std::size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        std::size_t len;
        unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            if (c == 0xE0) lo = 0xA0;  // overlong
            if (c == 0xED) hi = 0x9F;  // surrogates
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            if (c == 0xF0) lo = 0x90;  // overlong
            if (c == 0xF4) hi = 0x8F;  // over U+10FFFF
        } else {
            return i;
        }
        if (i + len > n || s[i + 1] < lo || s[i + 1] > hi) return i;
        for (std::size_t k = 2; k < len; ++k)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
        i += len;
    }
    return std::string_view::npos;
}

std::string utf8_problem(std::string_view text) {
    std::size_t at = invalid_utf8_at(text);
    if (at == std::string_view::npos) return "";
    char b[64];
    std::snprintf(b, sizeof b, "not UTF-8 (byte 0x%02X at offset %zu)",
                  static_cast<unsigned>(static_cast<unsigned char>(text[at])), at);
    return b;
}

void require_utf8(std::string_view text, const std::string& what) {
    if (std::string problem = utf8_problem(text); !problem.empty())
        throw Error(ErrorCode::usage, what + ": " + problem);
}

}  // namespace sandweave
