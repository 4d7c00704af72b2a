#include "lib/audit/egress_log.hpp"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <time.h>

#include <cerrno>
#include <cstring>

// After <sys/types.h> and friends: the header uses their integer types.
#include <libnetfilter_log/libnetfilter_log.h>
#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"

namespace sandweave::audit {
namespace {

// How much of each refused packet the kernel copies to us: its IP header and
// the start of the transport header are all that is read.
constexpr std::uint32_t kSnapLength = 128;
// The group's socket buffer: about 1600 messages of a snap each, so a burst
// waits for the reader rather than being lost.
constexpr int kSocketBuffer = 1 << 20;

std::uint8_t byte_at(std::string_view p, std::size_t i) {
    return static_cast<std::uint8_t>(p[i]);
}

std::string address_text(int family, const char* bytes) {
    char buf[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(family, bytes, buf, sizeof buf);
    return buf;
}

// The transport fields of protocol `proto` whose header starts at `p`.
void transport_fields(Refusal& r, std::uint8_t proto, std::string_view p) {
    switch (proto) {
        case 6:
        case 17:
            r.protocol = proto == 6 ? "tcp" : "udp";
            if (p.size() >= 4)
                r.port = static_cast<std::uint16_t>(byte_at(p, 2) << 8 | byte_at(p, 3));
            return;
        case 1:
        case 58:
            r.protocol = proto == 1 ? "icmp" : "icmpv6";
            if (!p.empty()) r.icmp_type = byte_at(p, 0);
            return;
        default:
            r.protocol = std::to_string(proto);
    }
}

std::optional<Refusal> parse_ipv4(std::string_view p) {
    if (p.size() < 20) return std::nullopt;
    std::size_t header = (byte_at(p, 0) & 0x0f) * 4u;
    if (header < 20 || header > p.size()) return std::nullopt;
    Refusal r;
    r.source = address_text(AF_INET, p.data() + 12);
    r.destination = address_text(AF_INET, p.data() + 16);
    // A fragment after the first carries no transport header.
    bool later_fragment = ((byte_at(p, 6) & 0x1f) << 8 | byte_at(p, 7)) != 0;
    transport_fields(r, byte_at(p, 9), later_fragment ? std::string_view() : p.substr(header));
    return r;
}

std::optional<Refusal> parse_ipv6(std::string_view p) {
    if (p.size() < 40) return std::nullopt;
    Refusal r;
    r.source = address_text(AF_INET6, p.data() + 8);
    r.destination = address_text(AF_INET6, p.data() + 24);
    std::uint8_t next = byte_at(p, 6);
    std::size_t at = 40;
    // Extension headers: hop-by-hop, routing, destination options (each
    // sized in 8-byte units after its first 8), fragment (8 bytes). At most
    // eight, and never past the copy.
    for (int i = 0; i < 8; ++i) {
        if (next != 0 && next != 43 && next != 60 && next != 44) break;
        if (at + 8 > p.size()) {  // cut off by the copy: the header's kind only
            r.protocol = std::to_string(next);
            return r;
        }
        std::uint8_t following = byte_at(p, at);
        if (next == 44) {
            bool later_fragment = ((byte_at(p, at + 2) << 8 | byte_at(p, at + 3)) & 0xfff8) != 0;
            at += 8;
            next = following;
            if (later_fragment) {
                transport_fields(r, next, std::string_view());
                return r;
            }
            continue;
        }
        at += 8 + byte_at(p, at + 1) * 8u;
        next = following;
    }
    transport_fields(r, next, at <= p.size() ? p.substr(at) : std::string_view());
    return r;
}

int on_packet(nflog_g_handle*, nfgenmsg*, nflog_data* data, void* self) {
    char* payload = nullptr;
    int len = nflog_get_payload(data, &payload);
    std::optional<Refusal> r;
    if (len > 0 && payload) r = parse_refused_packet({payload, static_cast<std::size_t>(len)});
    timeval tv{};
    std::int64_t time_ns;
    if (nflog_get_timestamp(data, &tv) == 0 && tv.tv_sec > 0) {
        time_ns = static_cast<std::int64_t>(tv.tv_sec) * 1000000000 + tv.tv_usec * 1000;
    } else {
        timespec ts{};
        ::clock_gettime(CLOCK_REALTIME, &ts);
        time_ns = static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    }
    std::uint32_t seq = 0;
    bool has_seq = nflog_get_seq(data, &seq) == 0;
    static_cast<EgressLog*>(self)->on_message(seq, has_seq, refusal_fields_json(r, time_ns));
    return 0;
}

}  // namespace

std::optional<Refusal> parse_refused_packet(std::string_view packet) {
    if (packet.empty()) return std::nullopt;
    switch (byte_at(packet, 0) >> 4) {
        case 4:
            return parse_ipv4(packet);
        case 6:
            return parse_ipv6(packet);
        default:
            return std::nullopt;
    }
}

std::string refusal_fields_json(const std::optional<Refusal>& r, std::int64_t time_ns) {
    nlohmann::ordered_json j;
    j["time_ns"] = time_ns;
    if (!r) {
        j["protocol"] = "unparsed";
        return j.dump();
    }
    j["protocol"] = r->protocol;
    j["source"] = r->source;
    j["destination"] = r->destination;
    if (r->port) j["port"] = *r->port;
    if (r->icmp_type) j["icmp_type"] = *r->icmp_type;
    return j.dump();
}

EgressLog::EgressLog(std::uint16_t group) {
    const std::string what =
        "the egress policy's refusal log (NFLOG group " + std::to_string(group) + ")";
    handle_ = nflog_open();
    if (!handle_) throw_errno("opening " + what);
    group_ = nflog_bind_group(handle_, group);
    if (!group_) {
        int e = errno;
        nflog_close(handle_);
        errno = e;
        throw_errno("binding " + what + (e == EBUSY ? " (another process holds it)" : ""));
    }
    // Each packet is sent at once (a queue threshold of 1): the kernel's
    // default holds up to 100 for up to a second, and a barrier would miss them.
    if (nflog_set_mode(group_, NFULNL_COPY_PACKET, kSnapLength) < 0 ||
        nflog_set_flags(group_, NFULNL_CFG_F_SEQ) < 0 || nflog_set_qthresh(group_, 1) < 0) {
        int e = errno;
        nflog_unbind_group(group_);
        nflog_close(handle_);
        errno = e;
        throw_errno("configuring " + what);
    }
    nflog_callback_register(group_, on_packet, this);
    int size = kSocketBuffer;
    if (::setsockopt(fd(), SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) != 0)
        (void)::setsockopt(fd(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
}

EgressLog::~EgressLog() {
    if (group_) nflog_unbind_group(group_);
    if (handle_) nflog_close(handle_);
}

int EgressLog::fd() const {
    return nflog_fd(handle_);
}

void EgressLog::on_message(std::uint32_t seq, bool has_seq, std::string record) {
    if (has_seq) {
        // Messages arrive in their order; a jump is what the kernel dropped.
        batch_->lost += seq - next_seq_;
        next_seq_ = seq + 1;
        overrun_ = false;
    }
    batch_->records.push_back(std::move(record));
}

bool EgressLog::read(Batch& out, int max_messages) {
    alignas(8) char buf[8192];
    batch_ = &out;
    for (int i = 0; i < max_messages; ++i) {
        ssize_t n = ::recv(fd(), buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno ==
                ENOBUFS) {  // the kernel dropped some: the next sequence number says how many
                overrun_ = true;
                continue;
            }
            batch_ = nullptr;
            return true;  // EAGAIN, or an error poll will report again
        }
        nflog_handle_packet(handle_, buf, static_cast<int>(n));
    }
    batch_ = nullptr;
    return false;
}

bool EgressLog::take_unnumbered_loss() {
    bool was = overrun_;
    overrun_ = false;
    return was;
}

}  // namespace sandweave::audit
