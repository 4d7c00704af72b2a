#pragma once
// The host's own record of what a sandbox's egress policy refused.
//
// A refused TCP connect shows in the sentry's points as a failed `connect`,
// but a refused UDP datagram or ICMP packet leaves no trace in the guest: the
// send succeeds and the packet dies on the host. So the policy's refusing
// rules (lib/sandbox/network.cpp) also log each refused packet to an NFLOG
// group of the sandbox's own, and the audit writer, which owns that group,
// writes one `network/refused` record per packet into the sandbox's log.
// This record is the host's: the guest can neither forge nor suppress it.
//
// The kernel numbers the group's messages (NFULNL_CFG_F_SEQ), so a message
// lost on the way (the socket full under a flood) is counted exactly, as a
// gap with source "egress_log", and the export is then not complete.
//
// The packet is guest-made bytes: parse_refused_packet reads only its IP
// and transport headers, bounds-checked, and takes nothing else from it.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

struct nflog_handle;
struct nflog_g_handle;

namespace sandweave::audit {

// The record point the writer writes for each refused packet.
inline constexpr const char* refused_point = "network/refused";
// The gap source of refusals the kernel could not deliver.
inline constexpr const char* egress_log_gap_source = "egress_log";

struct Refusal {
    // "tcp", "udp", "icmp", "icmpv6", or the protocol's number.
    std::string protocol;
    std::string source, destination;        // addresses as text
    std::optional<std::uint16_t> port;      // TCP, UDP: the destination port
    std::optional<std::uint8_t> icmp_type;  // ICMP, ICMPv6
};

// The headers of an IPv4 or IPv6 packet; nullopt when they do not parse.
std::optional<Refusal> parse_refused_packet(std::string_view packet);

// The record's fields as a JSON object: {"time_ns":..., "protocol":...,
// "source":..., "destination":..., "port"|"icmp_type":...}; a packet whose
// headers did not parse is {"time_ns":..., "protocol":"unparsed"}.
std::string refusal_fields_json(const std::optional<Refusal>&, std::int64_t time_ns);

// One NFLOG group, bound for this process (root, the host's network
// namespace). Each group has one listener: binding a group another process
// holds throws.
class EgressLog {
  public:
    explicit EgressLog(std::uint16_t group);
    ~EgressLog();
    EgressLog(const EgressLog&) = delete;
    EgressLog& operator=(const EgressLog&) = delete;

    int fd() const;

    struct Batch {
        std::vector<std::string> records;  // refusal_fields_json of each packet, in order
        std::uint64_t lost = 0;            // messages the kernel numbered but we never got
    };
    // Takes what is waiting, at most `max_messages`, without blocking.
    // Returns false when more may be waiting.
    bool read(Batch& out, int max_messages);
    // The socket overflowed and no message has come since, so its sequence
    // number cannot say how many were lost: at least one. Clears the mark.
    bool take_unnumbered_loss();

    // Used by the kernel callback.
    void on_message(std::uint32_t seq, bool has_seq, std::string record);

  private:
    nflog_handle* handle_ = nullptr;
    nflog_g_handle* group_ = nullptr;
    std::uint32_t next_seq_ = 0;
    bool overrun_ = false;
    Batch* batch_ = nullptr;
};

}  // namespace sandweave::audit
