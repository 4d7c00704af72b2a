#pragma once
// The record chain (docs/design.md, "Audit record format"): every line of
// audit.jsonl ends with "chain":"<32 hex>", the first 16 bytes of
//   SHA-256(previous line's chain (16 bytes) || this line's bytes up to ,"chain")
// starting from 16 zero bytes. A status (and a sidecar) carries the chain of
// the last line of its prefix, so a copy whose lines were edited, removed,
// reordered or cut off fails `audit verify` at the first bad line.
//
// A line is `{...,"chain":"0123456789abcdef0123456789abcdef"}\n`: the field
// is always last and of fixed length, so a reader finds it without parsing.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "lib/audit/json_out.hpp"

namespace sandweave::audit {

inline constexpr std::size_t kChainBytes = 16;
inline constexpr std::string_view kChainKey = ",\"chain\":\"";
// `,"chain":"` + 32 hex + `"}` (the line's end, without its newline).
inline constexpr std::size_t kChainTail = kChainKey.size() + 2 * kChainBytes + 2;

using ChainValue = std::array<unsigned char, kChainBytes>;

// The lowercase hex digits, by value.
inline constexpr char hex_digits[] = "0123456789abcdef";

// Lowercase hex of n bytes (digests: the chain, sha256 of a log).
std::string hex_bytes(const unsigned char* p, std::size_t n);
std::string chain_hex(const ChainValue&);
// Parses 32 lowercase hex digits; false when `hex` is anything else.
bool chain_parse(std::string_view hex, ChainValue&);
// The chain of an empty log: 32 zeros.
std::string chain_seed_hex();

class Chain {
  public:
    Chain() = default;
    Chain(const Chain&) = delete;
    Chain& operator=(const Chain&) = delete;

    const ChainValue& value() const { return value_; }
    void reset(const ChainValue& v) { value_ = v; }
    // The chain after a line whose bytes before ,"chain" are `body`.
    ChainValue next(std::string_view body) const;
    // Seals the record buf[mark..], which ends with "}\n": inserts the chain
    // field before the closing brace and advances the chain.
    void seal(JsonOut& out, std::size_t mark);
    void seal(std::string& buf, std::size_t mark);

  private:
    ChainValue value_{};
};

// Splits a line (without its newline) into the body the chain covers and the
// chain it carries; false when the line does not end with a chain field.
bool split_chained_line(std::string_view line, std::string_view& body, std::string_view& hex);

}  // namespace sandweave::audit
