#pragma once
// What the E2B SDK sends, decoded with bounds: Connect RPC envelopes (a flag
// byte, a 4-byte big-endian length, the message), JSON bodies, the Basic
// user of envd, and Connect's error codes. Pure functions over bytes, so the
// fuzz target (tests/fuzz/fuzz_e2b_request.cpp) reaches all of them.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sandweave::e2b {

inline constexpr std::uint8_t end_stream_flag = 0x02;

// The one message of a Connect streaming request body (flag 0, exactly one
// envelope): its JSON object, or nullopt with `why` set.
std::optional<nlohmann::json> decode_stream_request(std::string_view body, std::size_t max,
                                                    std::string& why);
// A JSON object body (unary Connect calls, the control plane's POSTs); an
// empty body is {}. nullopt with `why` for anything else.
std::optional<nlohmann::json> decode_json_object(std::string_view body, std::size_t max,
                                                 std::string& why);

std::string envelope(const nlohmann::json& message, std::uint8_t flags = 0);
// The end-of-stream frame: {} or {"error": {"code", "message"}}.
std::string end_stream(const std::string& code = "", const std::string& message = "");

// Connect's error code for an HTTP status of a unary call, and back.
int connect_http_status(const std::string& code);

// The user of an envd call from "Authorization: Basic base64(user:)":
// nullopt when there is none; throws Error(usage) for a malformed header.
std::optional<std::string> basic_user(const std::string& header);
// An E2B user name as a sandweave UID[:GID]: root -> 0:0, user -> 1000:1000,
// digits (and digits:digits) as they are; throws Error(usage) otherwise.
std::string uid_of_user(const std::string& user);

// A metadata filter of GET /v2/sandboxes ("k=v&k2=v2", URL-encoded pairs).
std::optional<std::vector<std::pair<std::string, std::string>>> parse_metadata_query(
    std::string_view q);

// The guest watcher's output (`/.sandweave/init --watch`, guest/watch.c):
// "ready\n", then records "T LEN NAME\n". From a guest, so untrusted: every
// field is checked, a name is 1 to 4096 bytes without NUL.
// A file's lstat as the guest watcher saw it (its "E" line, with --entry).
struct WatchEntry {
    unsigned mode = 0;
    std::int64_t size = 0, mtime = 0;
    std::string owner, group, path;
};
struct WatchRecord {
    char type = 0;  // C created, W written, R removed, N renamed, M attributes
    std::string name;
    std::optional<WatchEntry> entry;  // with --entry, while the file exists
};
class WatchReader {
  public:
    // Takes more output; false (and `why`) once it breaks the format, after
    // which nothing more is taken.
    bool feed(std::string_view bytes, std::string& why);
    bool ready() const { return ready_; }
    // The records complete so far, in order (taken out).
    std::vector<WatchRecord> take();

  private:
    std::string buf_;
    bool ready_ = false, broken_ = false;
    std::vector<WatchRecord> records_;
    std::optional<WatchEntry> entry_;  // an "E" line, for the record after it
};
// A record's type as envd's EventType name ("EVENT_TYPE_CREATE", ...).
const char* watch_event_type(char type);

// Percent-decoding; nullopt for a bad escape.
std::optional<std::string> url_decode(std::string_view s);

}  // namespace sandweave::e2b
