#pragma once
// Parsing of the human-written quantities sandweave accepts: sizes ("64KiB",
// "8GiB", "1048576"), durations ("2s", "500ms", "1m30s"), user specs ("1001:1001"),
// and the "did you mean" suggestion used by every unknown-name error.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandweave {

// Positive byte count: a plain integer or a number with B, K/KB/KiB, M/MB/MiB,
// G/GB/GiB, T/TB/TiB (decimal units are powers of 1000, binary of 1024).
// Returns nullopt for anything else, zero, or overflow.
std::optional<std::uint64_t> parse_size(std::string_view text);

// Go/Docker style durations: "2s", "150ms", "1m30s", "1h". A bare number is seconds.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

// "UID[:GID]" with non-negative decimal ids below 2^32-1; GID defaults to UID.
struct UserSpec {
    std::uint32_t uid = 0;
    std::uint32_t gid = 0;
    std::string str() const { return std::to_string(uid) + ":" + std::to_string(gid); }
};
std::optional<UserSpec> parse_user(std::string_view text);

// A screen size "WIDTHxHEIGHT" ("1280x800"), each side 64 to 4096 pixels.
struct ScreenSize {
    int width = 1280;
    int height = 800;
    std::string str() const { return std::to_string(width) + "x" + std::to_string(height); }
};
inline constexpr int min_screen_side = 64;
inline constexpr int max_screen_side = 4096;
std::optional<ScreenSize> parse_screen(std::string_view text);

// The candidate closest to `word` by edit distance, if it is close enough to be a
// plausible typo.
std::optional<std::string> suggest(std::string_view word,
                                   const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace sandweave
