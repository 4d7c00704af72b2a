#pragma once
// A sandbox's egress policy: `network: none` (the default: no network at all)
// or `network: {allow: [...], deny: [...]}`, where each entry is a destination
// written as
//
//   CIDR[:PORTS[/PROTO]]         10.0.0.0/8   192.0.2.7:443   10.1.0.0/16:8000-8100/tcp
//   [IPV6-CIDR][:PORTS[/PROTO]]  [fd00::/8]:53/udp   (bare fd00::/8 without a port)
//   NAME[:PORTS[/PROTO]]         example.com   *.example.com:443/tcp
//
// PORTS is N, N-M or * (any port, to name a protocol alone: 10.0.0.0/8:*/udp);
// PROTO is tcp or udp, both when left out. An address without a prefix is one
// host. An entry without ports admits every protocol to the addresses (ICMP
// included). Everything not allowed is refused, and a deny wins over an allow.
// The policy is enforced outside the guest (lib/sandbox/network.hpp).
//
// A NAME is a domain name, exact (`example.com`) or every name below a suffix
// (`*.example.com`: a.example.com, a.b.example.com, not example.com itself),
// compared without regard to case. An allowed name is resolved by the
// sandbox's resolver (lib/sandbox/resolver.hpp), which lets the guest reach
// the addresses it answered, on the entry's ports, for the answer's TTL. A
// denied name is never resolved, so it takes no ports.
//
// Parsing is pure: each bad entry gets its own one-line reason.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace sandweave {

struct Destination {
    std::string name;                     // a domain name entry: "example.com", "*.example.com"
    int family = 4;                       // 4 or 6 (an address entry)
    std::array<std::uint8_t, 16> addr{};  // network address (host bits zero)
    int prefix = 32;
    std::uint16_t port_lo = 0, port_hi = 0;  // 0, 0: any port
    std::string proto;                       // "", "tcp" or "udp"

    bool any_port() const { return port_lo == 0; }
    bool is_name() const { return !name.empty(); }
    std::string address_text() const;  // "10.0.0.0/8", "fd00::/8"
    std::string str() const;           // the canonical entry, as parsed back
    bool operator==(const Destination&) const = default;
};

// The entry, or the reason it is not one ("10.0.0.1/8: host bits set (did you
// mean 10.0.0.0/8?)" without the entry's text, which the caller adds).
struct ParsedDestination {
    std::optional<Destination> dest;
    std::string error;
};
// `deny`: the entry is for a deny list (where a name takes no ports).
ParsedDestination parse_destination(const std::string& text, bool deny = false);

// Whether `query` (lowercase, without the final dot) is one the name entry
// `pattern` names: equal to it, or below its suffix for "*.suffix".
bool name_matches(const std::string& pattern, const std::string& query);

struct EgressPolicy {
    std::vector<Destination> allow, deny;
    bool operator==(const EgressPolicy&) const = default;
    // Whether any entry is a domain name (the sandbox then gets a resolver).
    bool has_names() const;
};

// {"allow": ["10.0.0.0/8:443/tcp"], "deny": [...]}: canonical entries.
nlohmann::json to_json(const EgressPolicy& p);
// From to_json's form (a record, a snapshot); throws on a bad entry.
EgressPolicy egress_policy_from_json(const nlohmann::json& j);
// One line for ls-like output: "allow 2, deny 1".
std::string summary(const EgressPolicy& p);

}  // namespace sandweave
