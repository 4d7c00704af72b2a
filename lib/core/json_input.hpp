#pragma once
// JSON and strings that come from outside: a peer's request line, a worker's
// reply, a guest agent's frame, a state file, a user's flag or template.
//
// Nesting is checked before nlohmann sees the text: its parser keeps its own
// stack, but copying, dumping and comparing a document recurse once per level,
// so a line of 300 KB nested 150,000 deep would overflow a thread's stack
// wherever it went next. Every parse of untrusted JSON goes through
// parse_untrusted_json, with one depth limit.
//
// Text that goes into a JSON string must be UTF-8 (nlohmann refuses to dump
// anything else): require_utf8 says which input was not, at the boundary
// where a user can still be told which flag or key to fix.

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sandweave {

// Deeper than any document sandweave reads or writes (a request's params are
// four levels at most), far below what a thread's stack can take.
inline constexpr std::size_t max_json_depth = 64;

// True when no array or object in `text` is nested more than `limit` deep
// (brackets inside strings, escaped quotes included, do not count). Does not
// check that `text` is JSON.
bool json_depth_within(std::string_view text, std::size_t limit = max_json_depth);

// json::parse, after json_depth_within: throws nlohmann::json::parse_error
// (what json::parse throws for text that is not JSON, including text that is
// not UTF-8) for a document nested deeper than max_json_depth.
nlohmann::json parse_untrusted_json(std::string_view text);

// The offset of the first byte of `text` that is not part of well-formed
// UTF-8 (RFC 3629: no overlongs, no surrogates, nothing over U+10FFFF), or
// npos when it all is.
std::size_t invalid_utf8_at(std::string_view text);

// "not UTF-8 (byte 0xFF at offset 2)", or "" when `text` is UTF-8.
std::string utf8_problem(std::string_view text);

// Throws Error(usage) "WHAT: not UTF-8 (byte 0xFF at offset 2)" unless
// `text` is UTF-8. `what` names the input as the user gave it: a flag, a
// template file and key, a parameter.
void require_utf8(std::string_view text, const std::string& what);

}  // namespace sandweave
