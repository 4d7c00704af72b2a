#pragma once
// Minimal JSON emission for the writer's hot path. nlohmann builds a DOM per
// value, which costs more than the whole decode at 500k records/s, so records
// are appended straight into one growing buffer. Strings from the sentry are
// hostile: every byte is escaped or validated, invalid UTF-8 becomes U+FFFD
// and is reported to the caller (a lossy record is a serialization failure).

#include <cstdint>
#include <string>
#include <string_view>

namespace sandweave::audit {

class JsonOut {
  public:
    std::string& buf() { return buf_; }
    void clear() { buf_.clear(); }
    std::size_t size() const { return buf_.size(); }

    void raw(std::string_view s) { buf_.append(s); }
    void ch(char c) { buf_.push_back(c); }
    void u64(std::uint64_t v);
    void i64(std::int64_t v);
    // Numbers only where a double holds them exactly (|v| <= 2^53), else a
    // quoted decimal string, so that jq and JavaScript never round a value.
    void exact_u64(std::uint64_t v);
    void exact_i64(std::int64_t v);
    // A quoted lowercase hex string: "0x0", "0xffffffffffffffff".
    void hex64(std::uint64_t v);
    // Appends a quoted, escaped JSON string. Returns false if the input was
    // not valid UTF-8 (the output then carries U+FFFD in place of bad bytes).
    bool str(std::string_view s);
    void base64(std::string_view bytes);

  private:
    std::string buf_;
};

std::string base64_encode(std::string_view bytes);

}  // namespace sandweave::audit
