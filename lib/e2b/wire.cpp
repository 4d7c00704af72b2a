#include "lib/e2b/wire.hpp"

#include "lib/core/error.hpp"
#include "lib/rpc/jsonrpc.hpp"

namespace sandweave::e2b {

using nlohmann::json;

namespace {

std::optional<json> parse_object(std::string_view text, std::string& why) {
    json j = json::parse(text.begin(), text.end(), nullptr, false);
    if (j.is_discarded()) {
        why = "the body is not JSON";
        return std::nullopt;
    }
    if (!j.is_object()) {
        why = "the body is not a JSON object";
        return std::nullopt;
    }
    return j;
}

}  // namespace

std::optional<json> decode_stream_request(std::string_view body, std::size_t max,
                                          std::string& why) {
    if (body.size() < 5) {
        why = "the request is not a Connect envelope (under 5 bytes)";
        return std::nullopt;
    }
    auto flags = static_cast<std::uint8_t>(body[0]);
    std::uint32_t len = (std::uint32_t(std::uint8_t(body[1])) << 24) |
                        (std::uint32_t(std::uint8_t(body[2])) << 16) |
                        (std::uint32_t(std::uint8_t(body[3])) << 8) | std::uint8_t(body[4]);
    if (flags != 0) {
        why = "the request envelope has flags " + std::to_string(flags) +
              " (compression is not supported)";
        return std::nullopt;
    }
    if (len > max || len != body.size() - 5) {
        why = "the request envelope's length " + std::to_string(len) + " does not match its " +
              std::to_string(body.size() - 5) + " bytes";
        return std::nullopt;
    }
    return parse_object(body.substr(5), why);
}

std::optional<json> decode_json_object(std::string_view body, std::size_t max, std::string& why) {
    if (body.size() > max) {
        why = "the body is over " + std::to_string(max) + " bytes";
        return std::nullopt;
    }
    if (body.find_first_not_of(" \t\r\n") == std::string_view::npos) return json::object();
    return parse_object(body, why);
}

std::string envelope(const json& message, std::uint8_t flags) {
    std::string payload = message.dump(-1, ' ', false, json::error_handler_t::replace);
    std::string out;
    out.reserve(payload.size() + 5);
    out += static_cast<char>(flags);
    auto n = static_cast<std::uint32_t>(payload.size());
    out += static_cast<char>((n >> 24) & 0xff);
    out += static_cast<char>((n >> 16) & 0xff);
    out += static_cast<char>((n >> 8) & 0xff);
    out += static_cast<char>(n & 0xff);
    return out + payload;
}

std::string end_stream(const std::string& code, const std::string& message) {
    json j = json::object();
    if (!code.empty()) j["error"] = {{"code", code}, {"message", message}};
    return envelope(j, end_stream_flag);
}

int connect_http_status(const std::string& code) {
    if (code == "invalid_argument" || code == "out_of_range" || code == "failed_precondition")
        return 400;
    if (code == "unauthenticated") return 401;
    if (code == "permission_denied") return 403;
    if (code == "not_found") return 404;
    if (code == "already_exists" || code == "aborted") return 409;
    if (code == "resource_exhausted") return 429;
    if (code == "unimplemented") return 501;
    if (code == "unavailable") return 503;
    if (code == "deadline_exceeded") return 504;
    if (code == "canceled") return 499;
    return 500;
}

std::optional<std::string> basic_user(const std::string& header) {
    if (header.empty()) return std::nullopt;
    const std::string prefix = "Basic ";
    if (header.compare(0, prefix.size(), prefix) != 0)
        throw Error(ErrorCode::usage, "Authorization: expected Basic");
    auto decoded = rpc::base64_decode(std::string_view(header).substr(prefix.size()));
    if (!decoded) throw Error(ErrorCode::usage, "Authorization: not base64");
    auto colon = decoded->find(':');
    std::string user = decoded->substr(0, colon);
    if (user.empty()) return std::nullopt;
    return user;
}

std::string uid_of_user(const std::string& user) {
    if (user == "root") return "0:0";
    if (user == "user") return "1000:1000";
    auto digits = [](std::string_view s) {
        return !s.empty() && s.size() <= 10 &&
               s.find_first_not_of("0123456789") == std::string_view::npos;
    };
    auto colon = user.find(':');
    if (colon == std::string::npos ? digits(user)
                                   : digits(std::string_view(user).substr(0, colon)) &&
                                         digits(std::string_view(user).substr(colon + 1)))
        return user;
    throw Error(ErrorCode::usage, "user '" + user +
                                      "': sandweave's E2B API knows root, user (uid 1000) and "
                                      "numeric UID[:GID]");
}

std::optional<std::string> url_decode(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    auto hexval = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        return -1;
    };
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%') {
            if (i + 2 >= s.size()) return std::nullopt;
            int hi = hexval(s[i + 1]), lo = hexval(s[i + 2]);
            if (hi < 0 || lo < 0) return std::nullopt;
            out += static_cast<char>(hi * 16 + lo);
            i += 2;
        } else if (s[i] == '+') {
            out += ' ';
        } else {
            out += s[i];
        }
    }
    return out;
}

std::optional<std::vector<std::pair<std::string, std::string>>> parse_metadata_query(
    std::string_view q) {
    std::vector<std::pair<std::string, std::string>> out;
    std::size_t pos = 0;
    while (pos < q.size()) {
        auto amp = q.find('&', pos);
        auto part =
            q.substr(pos, amp == std::string_view::npos ? std::string_view::npos : amp - pos);
        pos = amp == std::string_view::npos ? q.size() : amp + 1;
        if (part.empty()) continue;
        auto eq = part.find('=');
        if (eq == std::string_view::npos) return std::nullopt;
        auto k = url_decode(part.substr(0, eq)), v = url_decode(part.substr(eq + 1));
        if (!k || !v || k->empty()) return std::nullopt;
        // The SDK encodes each key and value once more before the pair.
        auto k2 = url_decode(*k), v2 = url_decode(*v);
        if (!k2 || !v2) return std::nullopt;
        out.emplace_back(*k2, *v2);
        if (out.size() > 64) return std::nullopt;
    }
    return out;
}

namespace {
constexpr std::size_t max_watch_name = 4096;
constexpr std::size_t max_entry_path = 8192;
constexpr std::size_t max_entry_header = 160;

bool plain_token(std::string_view t, std::size_t max) {
    return !t.empty() && t.size() <= max &&
           t.find_first_not_of(
               "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") ==
               std::string_view::npos;
}

std::optional<std::int64_t> decimal(std::string_view t, bool may_be_negative) {
    bool neg = may_be_negative && !t.empty() && t[0] == '-';
    auto d = neg ? t.substr(1) : t;
    if (d.empty() || d.size() > 18 || (d.size() > 1 && d[0] == '0') ||
        d.find_first_not_of("0123456789") != std::string_view::npos)
        return std::nullopt;
    std::int64_t v = std::stoll(std::string(d));
    return neg ? -v : v;
}

// "E MODE SIZE MTIME OWNER GROUP LEN PATH\n" (guest/watch.c). Returns the
// bytes taken (0: not all here yet), or nullopt and `why` when malformed.
std::optional<std::size_t> parse_entry(std::string_view rest, WatchEntry& e, std::string& why) {
    // Seven fields before PATH ("E" the first), each ending in a space.
    std::size_t pos = 0, field_start[7], field_end[7];
    for (int f = 0; f < 7; ++f) {
        auto sp = rest.find(' ', pos);
        if (sp == std::string_view::npos || sp > max_entry_header) {
            if (rest.size() > max_entry_header)
                return why = "an entry's header is too long", std::nullopt;
            return 0;
        }
        field_start[f] = pos;
        field_end[f] = sp;
        pos = sp + 1;
    }
    auto field = [&](int f) { return rest.substr(field_start[f], field_end[f] - field_start[f]); };
    // field 0 is "E" itself.
    auto mode = field(1);
    if (mode.empty() || mode.size() > 7 ||
        mode.find_first_not_of("01234567") != std::string_view::npos)
        return why = "an entry's mode is not octal", std::nullopt;
    auto size = decimal(field(2), false), mtime = decimal(field(3), true);
    auto len = decimal(field(6), false);
    if (!size || !mtime) return why = "an entry's size or time is not a number", std::nullopt;
    if (!plain_token(field(4), 32) || !plain_token(field(5), 32))
        return why = "an entry's owner or group is not a plain name", std::nullopt;
    if (!len || *len < 1 || static_cast<std::size_t>(*len) > max_entry_path)
        return why = "an entry's path length is out of range", std::nullopt;
    auto n = static_cast<std::size_t>(*len);
    if (rest.size() < pos + n + 1) return 0;
    auto path = rest.substr(pos, n);
    if (rest[pos + n] != '\n') return why = "an entry without its newline", std::nullopt;
    if (path[0] != '/' || path.find('\0') != std::string_view::npos)
        return why = "an entry's path is not absolute", std::nullopt;
    e.mode = static_cast<unsigned>(std::stoul(std::string(mode), nullptr, 8));
    e.size = *size;
    e.mtime = *mtime;
    e.owner = std::string(field(4));
    e.group = std::string(field(5));
    e.path = std::string(path);
    return pos + n + 1;
}
}  // namespace

bool WatchReader::feed(std::string_view bytes, std::string& why) {
    if (broken_) {
        why = "the guest watcher's output broke off earlier";
        return false;
    }
    buf_.append(bytes);
    std::size_t pos = 0;
    auto broken = [&](const std::string& w) {
        why = "the guest watcher's output is malformed: " + w;
        broken_ = true;
        buf_.clear();
        return false;
    };
    for (;;) {
        std::string_view rest(buf_.data() + pos, buf_.size() - pos);
        if (!ready_) {
            constexpr std::string_view hello = "ready\n";
            if (rest.size() < hello.size()) {
                if (hello.substr(0, rest.size()) != rest) return broken("no ready line");
                break;
            }
            if (rest.substr(0, hello.size()) != hello) return broken("no ready line");
            ready_ = true;
            pos += hello.size();
            continue;
        }
        if (!rest.empty() && rest[0] == 'E') {
            if (rest.size() < 2) break;
            if (rest[1] != ' ') return broken("no space after the type");
            if (entry_) return broken("two entries for one event");
            WatchEntry e;
            std::string bad;
            auto took = parse_entry(rest, e, bad);
            if (!took) return broken(bad);
            if (*took == 0) break;  // the rest has not arrived
            entry_ = std::move(e);
            pos += *took;
            continue;
        }
        // "T LEN NAME\n": the header is at most "T 4096 " (7 bytes).
        auto space = rest.size() > 2 ? rest.find(' ', 2) : std::string_view::npos;
        if (space == std::string_view::npos) {
            if (rest.size() > 7) return broken("a record's header is too long");
            if (!rest.empty() && std::string_view("CWRNM").find(rest[0]) == std::string_view::npos)
                return broken("unknown record type");
            if (rest.size() > 1 && rest[1] != ' ') return broken("no space after the type");
            break;
        }
        char type = rest[0];
        if (std::string_view("CWRNM").find(type) == std::string_view::npos)
            return broken("unknown record type");
        if (rest[1] != ' ') return broken("no space after the type");
        auto digits = rest.substr(2, space - 2);
        if (digits.empty() || digits.size() > 4 || digits[0] == '0' ||
            digits.find_first_not_of("0123456789") != std::string_view::npos)
            return broken("a bad length");
        std::size_t len = std::stoul(std::string(digits));
        if (len > max_watch_name) return broken("a name over 4096 bytes");
        if (rest.size() < space + 1 + len + 1) break;  // the rest has not arrived
        auto name = rest.substr(space + 1, len);
        if (rest[space + 1 + len] != '\n') return broken("a record without its newline");
        if (name.find('\0') != std::string_view::npos) return broken("a NUL in a name");
        if (entry_ && std::string_view("CWM").find(type) == std::string_view::npos)
            return broken("an entry for a removal");
        records_.push_back({type, std::string(name), std::move(entry_)});
        entry_.reset();
        pos += space + 1 + len + 1;
    }
    buf_.erase(0, pos);
    return true;
}

std::vector<WatchRecord> WatchReader::take() {
    std::vector<WatchRecord> out;
    out.swap(records_);
    return out;
}

const char* watch_event_type(char type) {
    switch (type) {
        case 'C':
            return "EVENT_TYPE_CREATE";
        case 'W':
            return "EVENT_TYPE_WRITE";
        case 'R':
            return "EVENT_TYPE_REMOVE";
        case 'N':
            return "EVENT_TYPE_RENAME";
        case 'M':
            return "EVENT_TYPE_CHMOD";
        default:
            return "EVENT_TYPE_UNSPECIFIED";
    }
}

}  // namespace sandweave::e2b
