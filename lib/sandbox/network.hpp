#pragma once
// A sandbox's network, when its spec has an egress policy (lib/options/network.hpp).
//
// Shape. Per sandbox, sandweave makes a network namespace `sandweave-ID` and a
// veth pair: `eth0` inside it, `swvHEX` (the id's hex) in the host's own
// namespace. Each pair gets one /30 of 10.213.0.0/16 (sandweave's range:
// 16384 sandboxes), the host end .1, the guest .2, and the guest's default
// route leads to the host end. runsc (`--network=sandbox`) runs in that
// namespace (the OCI spec's network namespace path) with its own network stack:
// guest root can change the guest's routes and send raw packets, but every
// packet leaves through the veth and arrives at the host end.
//
// The policy lives on the host end, out of the guest's reach: one nftables
// table `inet sandweave` (through libnftables, JSON only) whose input and
// forward hooks send each packet arriving from a `swv*` interface to its
// sandbox's chain through a verdict map keyed by interface; a `swv*` packet
// without an entry (a sandbox being torn down) is dropped. A sandbox's chain:
// replies of established connections pass; a deny entry refuses (TCP reset,
// else ICMP administratively prohibited); an allow entry accepts; everything
// else is refused. So a deny wins over an allow, and the policy covers this
// host's own addresses (input) as much as others (forward).
//
// Domain names: a policy that names domains gets a resolver
// (lib/sandbox/resolver.hpp) on port 53 of the host end, the guest's only
// nameserver (its /etc/resolv.conf, bound read-only from the sandbox's
// directory). The chain then accepts DNS to that address first, and each
// allow entry naming a domain (the k-th such entry) becomes a rule matching
// two nftables sets with timeouts, `sandbox-ID-k-v4` and `sandbox-ID-k-v6`,
// on the entry's ports: the resolver adds the addresses it answered for the
// entry's names. They come after the deny rules, so a deny still wins.
//
// NAT and forwarding: the table masquerades sandweave's range behind the
// host's address on every other interface, but sandweave never switches on
// IP forwarding: whether sandboxes reach beyond this host is the operator's
// choice (`sysctl net.ipv4.ip_forward=1`); with it off they reach only this
// host's addresses that the policy allows. IPv6: the same slot's /126 of
// network_range6, without NAT.
//
// Refusals in the audit: with audit on, every refusing rule also logs the
// packet to the sandbox's own NFLOG group (egress_log_group_base + its slot,
// unique while the slot is), which the sandbox's audit writer holds
// (lib/audit/egress_log.hpp): a refused UDP datagram leaves no trace in the
// guest, so the host records it.
//
// Teardown (chain, map entry, namespace, and with it the veth) runs when the
// runtime is stopped: rm, terminate, a failed create, a dead create settled.
// What a killed sandweave left (a namespace no process holds) is found by
// network_leftovers and removed by prune.

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/options/network.hpp"
#include "lib/sandbox/context.hpp"

namespace sandweave {

inline constexpr const char* network_range = "10.213.0.0/16";
// The IPv6 twin of network_range: slot n's /126 mirrors its IPv4 /30.
inline constexpr const char* network_range6 = "fd77:7776:6176::/112";
inline constexpr const char* nft_table_name = "sandweave";
// Slot n's refusals go to NFLOG group base + n (the slots stay below 16384).
inline constexpr int egress_log_group_base = 24576;

// Where a sandbox's network is on the host, saved in its record.
struct NetworkLink {
    std::string netns;           // "sandweave-sw-3f2a..."
    std::string host_interface;  // "swv3f2a..."
    int slot = 0;                // its /30's index in network_range
    std::string host_address;    // "10.213.0.5": the guest's gateway
    std::string guest_address;   // "10.213.0.6"
    int prefix = 30;
    // Empty where the host disables IPv6 (the sandbox is then IPv4 only).
    std::string host_address6;   // "fd77:7776:6176::5": the guest's IPv6 gateway
    std::string guest_address6;  // "fd77:7776:6176::6", prefix 126
    // With domain names: the host's nameservers the resolver asks (it
    // listens on host_address).
    std::vector<std::string> upstreams;
    // The NFLOG group its refusals are logged to; unset when not logged.
    std::optional<int> log_group;
};
nlohmann::json to_json(const NetworkLink& l);

std::string netns_name(const std::string& id);
std::string netns_path(const std::string& id);  // /run/netns/NAME, the OCI spec's path
std::string host_interface_name(const std::string& id);
std::string policy_chain_name(const std::string& id);
// The set of the k-th allow entry naming a domain, for IPv`family` addresses.
std::string name_set_name(const std::string& id, int k, int family);
// The guest's /etc/resolv.conf, in the sandbox's directory.
inline constexpr const char* guest_resolv_conf = "resolv.conf";

// ---- pure: the nftables JSON commands (unit-tested) ----------------------------
// The table, its verdict map, its base chains and the shared refusal chain:
// made once, by the first sandbox with a network.
nlohmann::json nft_table_commands();
// One sandbox's chain from its policy, its name sets, and its entry in the
// map. `resolver`: the address DNS is accepted to (a policy with names);
// `log_group`: each refusal is logged to that NFLOG group first.
nlohmann::json nft_sandbox_commands(const std::string& id, const EgressPolicy& policy,
                                    const std::string& resolver = "",
                                    std::optional<int> log_group = std::nullopt);
// `address` in `set` for `timeout`: added, or (refresh) deleted and added again.
nlohmann::json nft_add_element_commands(const std::string& set, const std::string& address,
                                        std::chrono::seconds timeout);
nlohmann::json nft_refresh_element_commands(const std::string& set, const std::string& address,
                                            std::chrono::seconds timeout);
// The /30 of slot `n` (0..16383): {host .1, guest .2}.
std::pair<std::string, std::string> slot_addresses(int n);
// Its IPv6 /126 in network_range6, the same offsets: {host ::4n+1, guest ::4n+2}.
std::pair<std::string, std::string> slot_addresses6(int n);
// ---------------------------------------------------------------------------------

// Makes the namespace, the veth and the rules (and, for a policy with names,
// writes the guest's resolv.conf into `sandbox_dir`); on failure removes what
// it made and throws. `log_refusals`: the rules log what they refuse (the
// link's log_group), for the sandbox's audit.
NetworkLink setup_network(Context& ctx, const std::string& id, const EgressPolicy& policy,
                          const std::filesystem::path& sandbox_dir, bool log_refusals);
// The NFLOG group in a record's network (to_json of a NetworkLink), if any.
std::optional<int> network_log_group(const nlohmann::json& network);

// Removes the chain, the map entry, the name sets and the namespace (the
// veth goes with it).
// Idempotent; cheap when the sandbox never had a network.
void teardown_network(Context& ctx, const std::string& id);

// Ids whose namespace, host interface or chain remain although no sandbox of
// this store has them: the namespace held by no process and older than
// stale_cgroup_age (a create of another state directory may be making one).
std::vector<std::string> network_leftovers(Context& ctx);
// Removes them; returns how many ids went. prune calls it.
int sweep_network_leftovers(Context& ctx);

// doctor: whether networks can be made here, and whether forwarding is on.
struct NetworkStatus {
    bool ok = false;
    std::string detail;
};
NetworkStatus network_status();

}  // namespace sandweave
