#pragma once
// Minimal JSON emission for the writer's hot path. nlohmann builds a DOM per
// value, which costs more than the whole decode at 500k records/s, so records
// are appended straight into one growing buffer. Strings from the sentry are
// hostile: every byte is escaped or validated. A byte that is not part of
// valid UTF-8 is kept, escaped reversibly as Python's surrogateescape does:
// byte 0xNN (0x80..0xff) becomes the escape \udcNN, a lone low surrogate
// that valid UTF-8 can never produce, so json.loads(line) then
// s.encode("utf-8", "surrogateescape") gives back the exact bytes.

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

namespace sandweave::audit {

// The buffer is our own rather than a std::string: a record is some thirty
// small appends, and std::string's append (a capacity check, an out-of-line
// memcpy and a terminator each) was a tenth of the writer's CPU. Here an
// append is a capacity check and a copy; the buffer only grows.
class JsonOut {
  public:
    JsonOut() : data_(new char[kInitial]), cap_(kInitial) {}

    std::string_view buf() const { return {data_.get(), size_}; }
    char* data() { return data_.get(); }
    void clear() { size_ = 0; }
    std::size_t size() const { return size_; }
    // Drops everything after the first n bytes (n <= size()).
    void truncate(std::size_t n) { size_ = n; }
    // Room for n more bytes at the end; advance() past what was written.
    char* room(std::size_t n) {
        if (cap_ - size_ < n) grow(n);
        return data_.get() + size_;
    }
    void advance(std::size_t n) { size_ += n; }
    std::size_t capacity() const { return cap_; }
    // When empty and grown past `max`: back to the initial size, so a burst's
    // memory goes back to the heap.
    void release(std::size_t max) {
        if (size_ != 0 || cap_ <= max) return;
        data_.reset(new char[kInitial]);
        cap_ = kInitial;
    }

    void raw(std::string_view s) {
        std::memcpy(room(s.size()), s.data(), s.size());
        size_ += s.size();
    }
    void ch(char c) {
        *room(1) = c;
        ++size_;
    }
    void u64(std::uint64_t v);
    void i64(std::int64_t v);
    // Numbers only where a double holds them exactly (|v| <= 2^53), else a
    // quoted decimal string, so that jq and JavaScript never round a value.
    void exact_u64(std::uint64_t v);
    void exact_i64(std::int64_t v);
    // A quoted lowercase hex string: "0x0", "0xffffffffffffffff".
    void hex64(std::uint64_t v);
    // Appends a quoted, escaped JSON string. Returns false if the input was
    // not valid UTF-8 (its invalid bytes are then escaped as \udcNN).
    bool str(std::string_view s);
    void base64(std::string_view bytes);

  private:
    static constexpr std::size_t kInitial = 4096;
    void grow(std::size_t n);
    std::unique_ptr<char[]> data_;
    std::size_t size_ = 0, cap_;
};

std::string base64_encode(std::string_view bytes);

}  // namespace sandweave::audit
