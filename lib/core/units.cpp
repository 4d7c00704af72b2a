#include "lib/core/units.hpp"

#include <algorithm>
#include <cctype>
#include <limits>

namespace sandweave {
namespace {

std::optional<std::uint64_t> parse_uint(std::string_view s) {
    if (s.empty() || s.size() > 20) return std::nullopt;
    std::uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return std::nullopt;
        std::uint64_t d = static_cast<std::uint64_t>(c - '0');
        if (v > (std::numeric_limits<std::uint64_t>::max() - d) / 10) return std::nullopt;
        v = v * 10 + d;
    }
    return v;
}

std::string lower(std::string_view s) {
    std::string out(s);
    for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
    std::size_t i = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    auto number = parse_uint(text.substr(0, i));
    if (!number || *number == 0) return std::nullopt;
    std::string unit = lower(text.substr(i));
    std::uint64_t mult = 0;
    if (unit.empty() || unit == "b")
        mult = 1;
    else if (unit == "k" || unit == "kib" || unit == "ki")
        mult = 1ull << 10;
    else if (unit == "kb")
        mult = 1000ull;
    else if (unit == "m" || unit == "mib" || unit == "mi")
        mult = 1ull << 20;
    else if (unit == "mb")
        mult = 1000ull * 1000;
    else if (unit == "g" || unit == "gib" || unit == "gi")
        mult = 1ull << 30;
    else if (unit == "gb")
        mult = 1000ull * 1000 * 1000;
    else if (unit == "t" || unit == "tib" || unit == "ti")
        mult = 1ull << 40;
    else if (unit == "tb")
        mult = 1000ull * 1000 * 1000 * 1000;
    else
        return std::nullopt;
    if (*number > std::numeric_limits<std::uint64_t>::max() / mult) return std::nullopt;
    return *number * mult;
}

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
    if (text.empty()) return std::nullopt;
    if (auto plain = parse_uint(text)) {
        if (*plain == 0 || *plain > 1000ull * 1000 * 1000) return std::nullopt;
        return std::chrono::milliseconds(*plain * 1000);
    }
    long double total_ms = 0;
    std::size_t i = 0;
    while (i < text.size()) {
        std::size_t start = i;
        while (i < text.size() &&
               (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
            ++i;
        if (start == i) return std::nullopt;
        std::string num(text.substr(start, i - start));
        if (std::count(num.begin(), num.end(), '.') > 1 || num == ".") return std::nullopt;
        long double value = std::stold(num);
        std::size_t ustart = i;
        while (i < text.size() && std::isalpha(static_cast<unsigned char>(text[i]))) ++i;
        std::string unit = lower(text.substr(ustart, i - ustart));
        long double mult;
        if (unit == "ms")
            mult = 1;
        else if (unit == "s")
            mult = 1000;
        else if (unit == "m")
            mult = 60 * 1000;
        else if (unit == "h")
            mult = 3600 * 1000;
        else
            return std::nullopt;
        total_ms += value * mult;
    }
    if (total_ms <= 0 || total_ms > 1e12L) return std::nullopt;
    return std::chrono::milliseconds(static_cast<long long>(total_ms + 0.5L));
}

std::optional<UserSpec> parse_user(std::string_view text) {
    auto colon = text.find(':');
    std::string_view u = text.substr(0, colon);
    auto uid = parse_uint(u);
    if (!uid || *uid >= 0xffffffffull) return std::nullopt;
    UserSpec spec;
    spec.uid = static_cast<std::uint32_t>(*uid);
    spec.gid = spec.uid;
    if (colon != std::string_view::npos) {
        auto gid = parse_uint(text.substr(colon + 1));
        if (!gid || *gid >= 0xffffffffull) return std::nullopt;
        spec.gid = static_cast<std::uint32_t>(*gid);
    }
    return spec;
}

std::optional<ScreenSize> parse_screen(std::string_view text) {
    auto x = text.find('x');
    if (x == std::string_view::npos) return std::nullopt;
    auto w = parse_uint(text.substr(0, x));
    auto h = parse_uint(text.substr(x + 1));
    auto fits = [](std::optional<std::uint64_t> v) {
        return v && *v >= static_cast<std::uint64_t>(min_screen_side) &&
               *v <= static_cast<std::uint64_t>(max_screen_side);
    };
    if (!fits(w) || !fits(h)) return std::nullopt;
    return ScreenSize{static_cast<int>(*w), static_cast<int>(*h)};
}

std::optional<std::string> suggest(std::string_view word,
                                   const std::vector<std::string>& candidates) {
    std::optional<std::string> best;
    std::size_t best_d = std::numeric_limits<std::size_t>::max();
    for (const auto& c : candidates) {
        std::size_t d = edit_distance(lower(word), lower(c));
        if (d < best_d) {
            best_d = d;
            best = c;
        }
    }
    std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
    if (!best || best_d > limit) return std::nullopt;
    return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
    auto s = suggest(word, candidates);
    return s ? " (did you mean '" + *s + "'?)" : "";
}

}  // namespace sandweave
