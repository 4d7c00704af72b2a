#pragma once
// The resolver of a sandbox whose egress policy names domains
// (lib/options/network.hpp). It is a thread of the sandbox's supervisor (the
// shim, lib/runtime/shim.hpp), so it lives exactly as long as the sandbox's
// processes: nothing of it outlives a sandbox that ends, crashes or whose
// create is killed, and a dead shim takes name resolution with it (the guest
// then resolves nothing: fail closed).
//
// It listens on UDP port 53 of the host end of the sandbox's veth, the only
// nameserver in the guest's /etc/resolv.conf. For each query (the guest is
// hostile: one datagram of at most max_query_bytes, parsed by libldns, one
// question of class IN):
//
//   - not A or AAAA: REFUSED;
//   - a name no allow entry names, or one a deny entry names: NXDOMAIN;
//   - an allowed name: asked of the host's nameservers (recorded at create
//     from /etc/resolv.conf) with a fresh random id from a fresh socket; the
//     A and AAAA records of the answer are added to the nftables sets of
//     every allow entry naming it, each for its TTL clamped to
//     [min_name_ttl, max_name_ttl], before the answer goes back with its TTLs
//     capped at that bound; if the sets cannot be updated the guest gets
//     SERVFAIL. The answer carries the question and answer sections only.
//
// The same questions are served over TCP on port 53 too (RFC 7766: each
// message after its two-byte length, several on one connection), asked of
// the upstreams over TCP, and answered whole: an answer too large for the
// guest's datagram comes back truncated over UDP, and the guest's retry over
// TCP gets it. One TCP connection is served at a time, each question within
// tcp_deadline, so a guest that holds one open only delays its own names.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lib/options/network.hpp"

namespace sandweave {

class StateStore;

inline constexpr std::size_t max_query_bytes = 1232;
inline constexpr std::chrono::milliseconds tcp_deadline{2000};
inline constexpr std::chrono::seconds min_name_ttl{60};
inline constexpr std::chrono::seconds max_name_ttl{3600};

struct ResolvedAddress {
    int family = 4;  // 4 or 6
    std::array<std::uint8_t, 16> addr{};
    std::string str() const;
    bool operator==(const ResolvedAddress&) const = default;
};

// ---- pure (unit-tested) ----------------------------------------------------------
// The `nameserver` addresses of a resolv.conf, in order, at most three (as
// glibc), leaving out sandweave's own range (a sandbox's resolver is never
// another's upstream).
std::vector<std::string> nameservers_from_resolv_conf(const std::string& text);

// Whether `qname` (lowercase, no final dot) may be resolved, and which allow
// entries name it: indices counted over the allow list's name entries only
// (the k of name_set_name, lib/sandbox/network.hpp).
struct NameVerdict {
    bool allowed = false;
    std::vector<int> entries;
};
NameVerdict judge_name(const EgressPolicy& policy, const std::string& qname);

// How long an answer with `ttl` opens its addresses.
std::chrono::seconds set_timeout_for(std::uint32_t ttl);

// Asks the upstream nameservers: the reply datagram, or nullopt when none
// answered.
using AskUpstream = std::function<std::optional<std::string>(const std::string& query)>;
// Opens `addresses` to the guest through the name entries `entries` for
// `timeout`; false when it could not.
using OpenAddresses = std::function<bool(const std::vector<int>& entries,
                                         const std::vector<ResolvedAddress>& addresses,
                                         std::chrono::seconds timeout)>;
// How the guest asked: a reply over UDP fits its datagram (512 bytes, or
// its EDNS size up to max_query_bytes) or is truncated; over TCP it is whole.
enum class DnsTransport { udp, tcp };
// The reply to one message from the guest, or nullopt to drop it (not a
// query, or not parseable). `ask` is to go over the same transport: an
// upstream reply that is truncated is answered truncated over UDP (the guest
// asks again over TCP) and SERVFAIL over TCP.
std::optional<std::string> answer_query(const std::string& message, const EgressPolicy& policy,
                                        const AskUpstream& ask, const OpenAddresses& open,
                                        DnsTransport over = DnsTransport::udp);
// ---------------------------------------------------------------------------------

// The host's nameservers for a new sandbox's resolver: those of
// $SANDWEAVE_RESOLV_CONF when set (tests point it at a nameserver of their
// own), else of /etc/resolv.conf. Throws when there is none.
std::vector<std::string> host_nameservers();

// The shim's resolver for sandbox `id` (a companion, lib/runtime/shim.hpp): binds
// its socket now (throws when it cannot: the create then fails), and returns
// the body that serves until stop_fd becomes readable.
std::function<void(int stop_fd)> start_resolver(const StateStore& store, const std::string& id);

}  // namespace sandweave
