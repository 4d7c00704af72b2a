#include "lib/audit/wire.hpp"

#include <algorithm>
#include <cstring>

namespace sandweave::audit {

HeaderError parse_header(std::string_view message, WireHeader& header, std::string_view& payload) {
    if (message.size() < kHeaderMinSize) return HeaderError::too_short;
    auto b = [&](std::size_t i) {
        return static_cast<std::uint32_t>(static_cast<unsigned char>(message[i]));
    };
    header.header_size = static_cast<std::uint16_t>(b(0) | b(1) << 8);
    header.message_type = static_cast<std::uint16_t>(b(2) | b(3) << 8);
    header.dropped_count = b(4) | b(5) << 8 | b(6) << 16 | b(7) << 24;
    if (header.header_size < kHeaderMinSize) return HeaderError::header_size_too_small;
    if (header.header_size > message.size()) return HeaderError::header_size_beyond_message;
    payload = message.substr(header.header_size);
    return HeaderError::none;
}

const char* header_error_name(HeaderError e) {
    switch (e) {
        case HeaderError::none:
            return "none";
        case HeaderError::too_short:
            return "message shorter than the 8-byte header";
        case HeaderError::header_size_too_small:
            return "header_size below 8";
        case HeaderError::header_size_beyond_message:
            return "header_size beyond the message";
    }
    return "unknown";
}

std::string frame_message(std::uint16_t type, std::string_view payload, std::uint32_t dropped,
                          std::uint16_t header_size) {
    std::string m(std::max<std::size_t>(header_size, kHeaderMinSize), '\0');
    auto put = [&](std::size_t i, std::uint32_t v, int n) {
        for (int k = 0; k < n; ++k) m[i + k] = static_cast<char>((v >> (8 * k)) & 0xff);
    };
    put(0, header_size, 2);
    put(2, type, 2);
    put(4, dropped, 4);
    m.append(payload);
    return m;
}

bool next_batch_entry(std::string_view& rest, BatchEntry& entry) {
    if (rest.size() < kBatchEntryHeader) return false;
    auto b = [&](std::size_t i) {
        return static_cast<std::uint32_t>(static_cast<unsigned char>(rest[i]));
    };
    const std::uint32_t size = b(0) | b(1) << 8 | b(2) << 16 | b(3) << 24;
    if (b(6) != 0 || b(7) != 0) return false;
    if (size > rest.size() - kBatchEntryHeader) return false;
    entry.type = static_cast<std::uint16_t>(b(4) | b(5) << 8);
    entry.payload = rest.substr(kBatchEntryHeader, size);
    rest.remove_prefix(kBatchEntryHeader + size);
    return true;
}

std::uint64_t message_event_count(std::string_view message) {
    WireHeader h;
    std::string_view rest;
    if (parse_header(message, h, rest) != HeaderError::none || h.message_type != kBatchMessage)
        return 1;
    std::uint64_t n = 0;
    BatchEntry e;
    while (next_batch_entry(rest, e)) ++n;
    return rest.empty() && n > 0 ? n : n + 1;
}

std::string frame_batch(const std::vector<std::pair<std::uint16_t, std::string>>& entries,
                        std::uint32_t dropped) {
    std::string payload;
    for (const auto& [type, body] : entries) {
        const auto size = static_cast<std::uint32_t>(body.size());
        for (int k = 0; k < 4; ++k) payload.push_back(static_cast<char>((size >> (8 * k)) & 0xff));
        payload.push_back(static_cast<char>(type & 0xff));
        payload.push_back(static_cast<char>(type >> 8));
        payload.append(2, '\0');
        payload.append(body);
    }
    return frame_message(kBatchMessage, payload, dropped);
}

namespace {
std::uint32_t le32(std::string_view b, std::size_t i) {
    auto u = [&](std::size_t k) {
        return static_cast<std::uint32_t>(static_cast<unsigned char>(b[i + k]));
    };
    return u(0) | u(1) << 8 | u(2) << 16 | u(3) << 24;
}
void put_le32(std::string& out, std::uint32_t v) {
    for (int k = 0; k < 4; ++k) out.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
}
// Reads a varint at `pos`; false when it does not end within `b` or 10 bytes.
bool read_varint(std::string_view b, std::size_t& pos, std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 70 && pos < b.size(); shift += 7) {
        const auto byte = static_cast<unsigned char>(b[pos++]);
        v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
        if ((byte & 0x80) == 0) return true;
    }
    return false;
}
}  // namespace

bool parse_fragment(std::string_view payload, Fragment& fragment) {
    if (payload.size() < kFragmentHeader) return false;
    fragment.offset = le32(payload, 0);
    fragment.total = le32(payload, 4);
    fragment.data = payload.substr(kFragmentHeader);
    return fragment.offset <= fragment.total &&
           fragment.data.size() <= fragment.total - fragment.offset;
}

std::vector<std::string> frame_fragments(std::string_view body, std::size_t max_data,
                                         std::uint32_t dropped) {
    std::vector<std::string> out;
    for (std::size_t off = 0; off < body.size(); off += max_data) {
        std::string payload;
        put_le32(payload, static_cast<std::uint32_t>(off));
        put_le32(payload, static_cast<std::uint32_t>(body.size()));
        payload.append(body.substr(off, max_data));
        out.push_back(frame_message(kFragmentMessage, payload, dropped));
    }
    return out;
}

std::size_t whole_fields_prefix(std::string_view m) {
    std::size_t pos = 0, whole = 0;
    while (pos < m.size()) {
        std::uint64_t tag = 0, len = 0;
        if (!read_varint(m, pos, tag)) break;
        switch (tag & 7) {
            case 0:
                if (!read_varint(m, pos, len)) return whole;
                break;
            case 1:
                pos += 8;
                break;
            case 2:
                if (!read_varint(m, pos, len) || len > m.size() - pos) return whole;
                pos += static_cast<std::size_t>(len);
                break;
            case 5:
                pos += 4;
                break;
            default:
                return whole;
        }
        if (pos > m.size()) break;
        whole = pos;
    }
    return whole;
}

std::string encode_handshake(std::uint32_t version) {
    // Field 1, varint.
    std::string out(1, '\x08');
    do {
        unsigned char byte = version & 0x7f;
        version >>= 7;
        if (version != 0) byte |= 0x80;
        out.push_back(static_cast<char>(byte));
    } while (version != 0);
    return out;
}

std::optional<std::uint32_t> decode_handshake(std::string_view bytes) {
    // Strict: only field 1 (varint) may appear; anything else is not a handshake
    // from a runtime speaking this protocol. An empty message means version 0.
    std::uint32_t version = 0;
    std::size_t i = 0;
    bool seen = false;
    while (i < bytes.size()) {
        if (bytes[i] != '\x08') return std::nullopt;
        ++i;
        std::uint64_t v = 0;
        int shift = 0;
        for (;;) {
            if (i >= bytes.size() || shift > 63) return std::nullopt;
            auto c = static_cast<unsigned char>(bytes[i++]);
            v |= static_cast<std::uint64_t>(c & 0x7f) << shift;
            shift += 7;
            if ((c & 0x80) == 0) break;
        }
        version = static_cast<std::uint32_t>(v);
        seen = true;
    }
    if (!seen) return std::nullopt;
    return version;
}

namespace {
#define SW_T(n, msg, fixed, fam) \
    { n, "sandweave.audit.wire." msg, fixed, fam }
constexpr MessageTypeInfo kTypes[] = {
    {0, nullptr, nullptr, nullptr},
    SW_T(1, "ContainerStarted", "container/start", nullptr),
    SW_T(2, "TaskCloned", "sentry/clone", nullptr),
    SW_T(3, "TaskExecved", "sentry/execve", nullptr),
    SW_T(4, "ParentNotified", "sentry/exit_notify_parent", nullptr),
    SW_T(5, "TaskExited", "sentry/task_exit", nullptr),
    SW_T(6, "RawSyscall", nullptr, "sysno"),
    SW_T(7, "OpenCall", nullptr, "open"),
    SW_T(8, "CloseCall", nullptr, "close"),
    SW_T(9, "ReadCall", nullptr, "read"),
    SW_T(10, "ConnectCall", nullptr, "connect"),
    SW_T(11, "ExecveCall", nullptr, "execve"),
    SW_T(12, "SocketCall", nullptr, "socket"),
    SW_T(13, "ChdirCall", nullptr, "chdir"),
    SW_T(14, "SetIdCall", nullptr, "setid"),
    SW_T(15, "SetResIdCall", nullptr, "setresid"),
    SW_T(16, "PrlimitCall", nullptr, "prlimit64"),
    SW_T(17, "PipeCall", nullptr, "pipe"),
    SW_T(18, "FcntlCall", nullptr, "fcntl"),
    SW_T(19, "DupCall", nullptr, "dup"),
    SW_T(20, "SignalfdCall", nullptr, "signalfd"),
    SW_T(21, "ChrootCall", nullptr, "chroot"),
    SW_T(22, "EventfdCall", nullptr, "eventfd"),
    SW_T(23, "CloneCall", nullptr, "clone"),
    SW_T(24, "BindCall", nullptr, "bind"),
    SW_T(25, "AcceptCall", nullptr, "accept"),
    SW_T(26, "TimerfdCreateCall", nullptr, "timerfd_create"),
    SW_T(27, "TimerfdSetTimeCall", nullptr, "timerfd_settime"),
    SW_T(28, "TimerfdGetTimeCall", nullptr, "timerfd_gettime"),
    SW_T(29, "ForkCall", nullptr, "fork"),
    SW_T(30, "InotifyInitCall", nullptr, "inotify_init"),
    SW_T(31, "InotifyAddWatchCall", nullptr, "inotify_add_watch"),
    SW_T(32, "InotifyRmWatchCall", nullptr, "inotify_rm_watch"),
    SW_T(33, "SocketPairCall", nullptr, "socketpair"),
    SW_T(34, "WriteCall", nullptr, "write"),
};
#undef SW_T
}  // namespace

const MessageTypeInfo* message_type_info(std::uint16_t type) {
    if (type == 0 || type > kSyscallLastKnown) return nullptr;
    return &kTypes[type];
}

}  // namespace sandweave::audit
