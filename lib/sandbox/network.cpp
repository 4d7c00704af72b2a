#include "lib/sandbox/network.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <tuple>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/log.hpp"
#include "lib/core/nftables.hpp"
#include "lib/sandbox/resolver.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int slot_count = 16384;  // /30s in 10.213.0.0/16
constexpr const char* netns_prefix = "sandweave-";
constexpr const char* iface_prefix = "swv";
constexpr const char* chain_prefix = "sandbox-";
// Host-wide, not per state directory: namespaces, interfaces and addresses are.
constexpr const char* network_lock = "/run/sandweave-network.lock";

json table_ref() {
    return {{"family", "inet"}, {"name", nft_table_name}};
}

json with_table(json obj) {
    obj["family"] = "inet";
    obj["table"] = nft_table_name;
    return obj;
}

json match(json left, json right, const char* op = "==") {
    return {{"match", {{"op", op}, {"left", std::move(left)}, {"right", std::move(right)}}}};
}

json iifname() {
    return {{"meta", {{"key", "iifname"}}}};
}

// The statements that match one destination entry.
// (For a name entry, its ports and protocol only: its addresses are a set.)
json destination_match(const Destination& d) {
    json stmts = json::array();
    if (!d.is_name()) {
        char buf[INET6_ADDRSTRLEN] = {};
        ::inet_ntop(d.family == 4 ? AF_INET : AF_INET6, d.addr.data(), buf, sizeof buf);
        const int bits = d.family == 4 ? 32 : 128;
        json addr =
            d.prefix == bits ? json(buf) : json{{"prefix", {{"addr", buf}, {"len", d.prefix}}}};
        stmts.push_back(match(
            {{"payload", {{"protocol", d.family == 4 ? "ip" : "ip6"}, {"field", "daddr"}}}}, addr));
    }
    if (!d.proto.empty())
        stmts.push_back(match({{"meta", {{"key", "l4proto"}}}}, d.proto));
    else if (!d.any_port())
        stmts.push_back(match({{"meta", {{"key", "l4proto"}}}}, {{"set", {"tcp", "udp"}}}));
    if (!d.any_port()) {
        json ports =
            d.port_lo == d.port_hi ? json(d.port_lo) : json{{"range", {d.port_lo, d.port_hi}}};
        stmts.push_back(match({{"payload", {{"protocol", "th"}, {"field", "dport"}}}}, ports));
    }
    return stmts;
}

json add_rule(const std::string& chain, json expr) {
    return {{"add", {{"rule", with_table({{"chain", chain}, {"expr", std::move(expr)}})}}}};
}

std::string ip_program() {
    for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
        if (::access(p, X_OK) == 0) return p;
    throw Error(ErrorCode::runtime, "ip (iproute2) not found: apt-get install iproute2");
}

// One `ip` call (argv only); throws with its error line.
std::string ip(Context& ctx, std::vector<std::string> args) {
    Command c;
    c.argv = {ip_program()};
    c.argv.insert(c.argv.end(), args.begin(), args.end());
    c.timeout = std::chrono::seconds(10);
    CommandResult r = ctx.runner.run(c);
    if (!r.ok()) {
        std::string what;
        for (const auto& a : args) what += " " + a;
        throw Error(ErrorCode::runtime, "ip" + what + ": " + r.describe());
    }
    return r.out;
}

bool path_exists(const fs::path& p) {
    std::error_code ec;
    return fs::exists(p, ec);
}

// Several `ip` commands in one process (`ip [-n NETNS] -batch`), stopping
// at the first that fails: each `ip` process costs the create several ms.
// The lines are sandweave's own (names and addresses it made), never input.
void ip_batch(Context& ctx, const std::string& netns, const std::vector<std::string>& lines) {
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    Pipe pipe = make_pipe();
    if (::write(pipe.write.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
        throw_errno("writing the ip batch");
    pipe.write.reset();
    Command c;
    c.argv = {ip_program()};
    if (!netns.empty()) c.argv.insert(c.argv.end(), {"-n", netns});
    c.argv.insert(c.argv.end(), {"-batch", "/dev/fd/3"});
    c.pass_fds = {{pipe.read.get(), 3}};
    c.timeout = std::chrono::seconds(10);
    CommandResult r = ctx.runner.run(c);
    if (!r.ok()) {
        std::string what;
        for (const auto& l : lines) what += (what.empty() ? "" : "; ") + l;
        throw Error(ErrorCode::runtime, "ip" + (netns.empty() ? "" : " -n " + netns) + " (" + what +
                                            "): " + r.describe());
    }
}

// Whether this host gives new interfaces IPv6 (the kernel has it and
// neither `all` nor `default` disables it); without, a sandbox gets IPv4
// only.
bool ipv6_available() {
    for (const char* which : {"all", "default"}) {
        std::string v;
        try {
            v = read_file(std::string("/proc/sys/net/ipv6/conf/") + which + "/disable_ipv6", 16);
        } catch (const Error&) {
            return false;
        }
        if (v.empty() || v[0] != '0') return false;
    }
    return true;
}

// Slots whose host address is on some interface of this namespace.
std::set<int> used_slots() {
    std::set<int> used;
    ifaddrs* all = nullptr;
    if (::getifaddrs(&all) != 0) throw_errno("listing this host's addresses");
    for (ifaddrs* a = all; a; a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
        std::uint32_t v = ntohl(reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr);
        if ((v >> 16) == ((10u << 8) | 213u)) used.insert(static_cast<int>((v & 0xffff) / 4));
    }
    ::freeifaddrs(all);
    return used;
}

int pick_slot(const std::string& id, const std::set<int>& used) {
    int start = static_cast<int>(std::hash<std::string>{}(id) % slot_count);
    for (int i = 0; i < slot_count; ++i) {
        int n = (start + i) % slot_count;
        if (!used.count(n)) return n;
    }
    throw Error(ErrorCode::runtime, std::string("no free address left in ") + network_range + " (" +
                                        std::to_string(slot_count) + " sandboxes with a network)");
}

bool nft_table_exists() {
    return nft_try(json::array({{{"list", {{"table", table_ref()}}}}}));
}

// The namespace's inode, or 0.
ino_t netns_inode(const std::string& id) {
    struct stat st {};
    if (::stat(netns_path(id).c_str(), &st) != 0) return 0;
    return st.st_ino;
}

bool netns_in_use(ino_t ino) {
    std::error_code ec;
    const std::string want = "net:[" + std::to_string(ino) + "]";
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
        std::string pid = e.path().filename().string();
        if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
        std::error_code lec;
        auto target = fs::read_symlink(e.path() / "ns/net", lec);
        if (!lec && target.string() == want) return true;
    }
    return false;
}

std::vector<std::string> names_with_prefix(const fs::path& dir, const std::string& prefix) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        std::string n = e.path().filename().string();
        if (n.rfind(prefix, 0) == 0) out.push_back(n.substr(prefix.size()));
    }
    return out;
}

std::vector<std::string> policy_chain_ids() {
    std::vector<std::string> out;
    if (!nft_table_exists()) return out;
    json r;
    try {
        r = nft_run(json::array({{{"list", {{"chains", {{"family", "inet"}}}}}}}));
    } catch (const Error&) {
        return out;
    }
    for (const auto& item : r.value("nftables", json::array())) {
        if (!item.contains("chain")) continue;
        const json& c = item["chain"];
        std::string name = c.value("name", std::string());
        if (c.value("table", std::string()) == nft_table_name && name.rfind(chain_prefix, 0) == 0)
            out.push_back(name.substr(std::string(chain_prefix).size()));
    }
    return out;
}

}  // namespace

json to_json(const NetworkLink& l) {
    json j{{"netns", l.netns},
           {"host_interface", l.host_interface},
           {"host_address", l.host_address},
           {"guest_address", l.guest_address},
           {"prefix", l.prefix}};
    if (!l.guest_address6.empty()) {
        j["host_address6"] = l.host_address6;
        j["guest_address6"] = l.guest_address6;
        j["prefix6"] = 126;
    }
    if (!l.upstreams.empty())
        j["resolver"] = {{"address", l.host_address}, {"upstreams", l.upstreams}};
    if (l.log_group) j["log_group"] = *l.log_group;
    return j;
}

std::optional<int> network_log_group(const json& network) {
    auto it = network.find("log_group");
    if (it == network.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int>();
}

std::string netns_name(const std::string& id) {
    return netns_prefix + id;
}
std::string netns_path(const std::string& id) {
    return "/run/netns/" + netns_name(id);
}
// "sw-" + 12 hex digits: "swv" + the hex is 15 characters, the kernel's limit.
std::string host_interface_name(const std::string& id) {
    return iface_prefix + (id.rfind("sw-", 0) == 0 ? id.substr(3) : id).substr(0, 12);
}
std::string policy_chain_name(const std::string& id) {
    return chain_prefix + id;
}
std::string name_set_name(const std::string& id, int k, int family) {
    return chain_prefix + id + "-" + std::to_string(k) + "-v" + std::to_string(family);
}

std::pair<std::string, std::string> slot_addresses(int n) {
    auto addr = [](std::uint32_t v) {
        in_addr in{htonl(v)};
        char buf[INET_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET, &in, buf, sizeof buf);
        return std::string(buf);
    };
    std::uint32_t base = (10u << 24) | (213u << 16) | static_cast<std::uint32_t>(n) * 4;
    return {addr(base + 1), addr(base + 2)};
}

std::pair<std::string, std::string> slot_addresses6(int n) {
    auto addr = [](std::uint32_t low) {
        in6_addr in{};
        const std::uint8_t prefix[6] = {0xfd, 0x77, 0x77, 0x76, 0x61, 0x76};
        std::copy(prefix, prefix + 6, in.s6_addr);
        in.s6_addr[14] = static_cast<std::uint8_t>(low >> 8);
        in.s6_addr[15] = static_cast<std::uint8_t>(low & 0xff);
        char buf[INET6_ADDRSTRLEN] = {};
        ::inet_ntop(AF_INET6, &in, buf, sizeof buf);
        return std::string(buf);
    };
    std::uint32_t base = static_cast<std::uint32_t>(n) * 4;
    return {addr(base + 1), addr(base + 2)};
}

json nft_table_commands() {
    json cmds = json::array();
    cmds.push_back({{"add", {{"table", table_ref()}}}});
    cmds.push_back(
        {{"add",
          {{"map", with_table({{"name", "sandboxes"}, {"type", "ifname"}, {"map", "verdict"}})}}}});
    // Refusals: a TCP reset for TCP (the guest sees "connection refused" at
    // once), ICMP administratively prohibited for the rest.
    cmds.push_back({{"add", {{"chain", with_table({{"name", "refuse"}})}}}});
    cmds.push_back(add_rule("refuse", {match({{"meta", {{"key", "l4proto"}}}}, "tcp"),
                                       {{"reject", {{"type", "tcp reset"}}}}}));
    cmds.push_back(
        add_rule("refuse", {{{"reject", {{"type", "icmpx"}, {"expr", "admin-prohibited"}}}}}));
    for (const char* hook : {"input", "forward"}) {
        cmds.push_back({{"add",
                         {{"chain", with_table({{"name", hook},
                                                {"type", "filter"},
                                                {"hook", hook},
                                                {"prio", 0},
                                                {"policy", "accept"}})}}}});
        cmds.push_back(add_rule(hook, {{{"vmap", {{"key", iifname()}, {"data", "@sandboxes"}}}}}));
        // Fail closed: a sandbox interface with no entry reaches nothing.
        cmds.push_back(add_rule(
            hook, {match(iifname(), std::string(iface_prefix) + "*"), {{"drop", nullptr}}}));
    }
    cmds.push_back({{"add",
                     {{"chain", with_table({{"name", "postrouting"},
                                            {"type", "nat"},
                                            {"hook", "postrouting"},
                                            {"prio", 100},
                                            {"policy", "accept"}})}}}});
    cmds.push_back(
        add_rule("postrouting",
                 {match({{"payload", {{"protocol", "ip"}, {"field", "saddr"}}}},
                        {{"prefix", {{"addr", "10.213.0.0"}, {"len", 16}}}}),
                  match({{"meta", {{"key", "oifname"}}}}, std::string(iface_prefix) + "*", "!="),
                  {{"masquerade", nullptr}}}));
    return cmds;
}

json nft_sandbox_commands(const std::string& id, const EgressPolicy& policy,
                          const std::string& resolver, std::optional<int> log_group) {
    const std::string chain = policy_chain_name(id);
    json cmds = json::array();
    // A refusal: the packet logged for the audit (its headers: snaplen), then
    // the shared chain's reject.
    auto refuse = [&](json e) {
        if (log_group) e.push_back({{"log", {{"group", *log_group}, {"snaplen", 128}}}});
        e.push_back({{"goto", {{"target", "refuse"}}}});
        return add_rule(chain, std::move(e));
    };
    cmds.push_back({{"add", {{"chain", with_table({{"name", chain}})}}}});
    cmds.push_back(add_rule(
        chain, {match({{"ct", {{"key", "state"}}}}, json::array({"established", "related"}), "in"),
                {{"accept", nullptr}}}));
    // IPv6 neighbour discovery with the host end (IPv4's ARP is not IP, so
    // it never meets these rules): without it the guest reaches no IPv6
    // address at all.
    cmds.push_back(
        add_rule(chain, {match({{"payload", {{"protocol", "icmpv6"}, {"field", "type"}}}},
                               {{"set", {"nd-neighbor-solicit", "nd-neighbor-advert"}}}),
                         {{"accept", nullptr}}}));
    if (!resolver.empty())
        cmds.push_back(add_rule(
            chain, {match({{"payload", {{"protocol", "ip"}, {"field", "daddr"}}}}, resolver),
                    match({{"meta", {{"key", "l4proto"}}}}, {{"set", {"tcp", "udp"}}}),
                    match({{"payload", {{"protocol", "th"}, {"field", "dport"}}}}, 53),
                    {{"accept", nullptr}}}));
    for (const auto& d : policy.deny) {
        if (d.is_name()) continue;  // the resolver refuses it
        cmds.push_back(refuse(destination_match(d)));
    }
    int k = 0;
    for (const auto& d : policy.allow) {
        if (!d.is_name()) {
            json e = destination_match(d);
            e.push_back({{"accept", nullptr}});
            cmds.push_back(add_rule(chain, e));
            continue;
        }
        for (int family : {4, 6}) {
            const std::string set = name_set_name(id, k, family);
            cmds.push_back({{"add",
                             {{"set", with_table({{"name", set},
                                                  {"type", family == 4 ? "ipv4_addr" : "ipv6_addr"},
                                                  {"flags", json::array({"timeout"})},
                                                  {"size", 4096}})}}}});
            json e = destination_match(d);  // the ports and protocol
            e.insert(
                e.begin(),
                match({{"payload", {{"protocol", family == 4 ? "ip" : "ip6"}, {"field", "daddr"}}}},
                      "@" + set));
            e.push_back({{"accept", nullptr}});
            cmds.push_back(add_rule(chain, e));
        }
        ++k;
    }
    cmds.push_back(refuse(json::array()));
    cmds.push_back(
        {{"add",
          {{"element", with_table({{"name", "sandboxes"},
                                   {"elem", json::array({json::array(
                                                {host_interface_name(id),
                                                 {{"jump", {{"target", chain}}}}})})}})}}}});
    return cmds;
}

json nft_add_element_commands(const std::string& set, const std::string& address,
                              std::chrono::seconds timeout) {
    return json::array(
        {{{"add",
           {{"element",
             with_table({{"name", set},
                         {"elem", json::array({{{"elem",
                                                 {{"val", address},
                                                  {"timeout", timeout.count()}}}}})}})}}}}});
}

json nft_refresh_element_commands(const std::string& set, const std::string& address,
                                  std::chrono::seconds timeout) {
    json cmds = json::array(
        {{{"delete",
           {{"element", with_table({{"name", set}, {"elem", json::array({address})}})}}}}});
    cmds.push_back(nft_add_element_commands(set, address, timeout)[0]);
    return cmds;
}

namespace {

// Under the host-wide lock: a free /30, the namespace, the veth into it,
// the host end's address.
NetworkLink make_namespace_and_veth(Context& ctx, const std::string& id) {
    NetworkLink l;
    l.netns = netns_name(id);
    l.host_interface = host_interface_name(id);
    with_context("making network namespace " + l.netns + " and the veth " + l.host_interface, [&] {
        FileLock lock(network_lock);
        int slot = pick_slot(id, used_slots());
        l.slot = slot;
        std::tie(l.host_address, l.guest_address) = slot_addresses(slot);
        std::vector<std::string> lines = {
            "netns add " + l.netns,
            "link add " + l.host_interface + " type veth peer name eth0 netns " + l.netns,
            "addr add " + l.host_address + "/30 dev " + l.host_interface};
        if (ipv6_available()) {
            std::tie(l.host_address6, l.guest_address6) = slot_addresses6(slot);
            lines.push_back("addr add " + l.host_address6 + "/126 dev " + l.host_interface +
                            " nodad");
        }
        lines.push_back("link set " + l.host_interface + " up");
        ip_batch(ctx, "", lines);
    });
    return l;
}

void configure_guest_end(Context& ctx, const NetworkLink& l) {
    with_context("configuring the guest end in " + l.netns, [&] {
        std::vector<std::string> lines = {"addr add " + l.guest_address + "/30 dev eth0"};
        if (!l.guest_address6.empty())
            lines.push_back("addr add " + l.guest_address6 + "/126 dev eth0 nodad");
        lines.insert(lines.end(), {"link set eth0 up", "link set lo up",
                                   "route add default via " + l.host_address});
        if (!l.host_address6.empty()) lines.push_back("route add ::/0 via " + l.host_address6);
        ip_batch(ctx, l.netns, lines);
    });
}

void install_policy(const std::string& id, const EgressPolicy& policy, const std::string& resolver,
                    std::optional<int> log_group) {
    with_context("installing the egress policy", [&] {
        {
            FileLock lock(network_lock);
            if (!nft_table_exists()) nft_run(nft_table_commands());
        }
        nft_run(nft_sandbox_commands(id, policy, resolver, log_group));
    });
}

// The guest asks the sandbox's resolver, and nothing else, for names.
void write_guest_resolv_conf(const fs::path& sandbox_dir, const NetworkLink& l) {
    write_file_atomic(sandbox_dir / guest_resolv_conf,
                      "# sandweave: the sandbox's resolver answers only the names its policy "
                      "allows\nnameserver " +
                          l.host_address + "\noptions attempts:3 timeout:2\n",
                      0644, Durability::live);
}

// The name sets of sandbox `id` (k = 0, 1, ... until one is missing).
void delete_name_sets(const std::string& id) {
    for (int k = 0;; ++k) {
        bool any = false;
        for (int family : {4, 6})
            any |= nft_try(json::array(
                {{{"delete", {{"set", with_table({{"name", name_set_name(id, k, family)}})}}}}}));
        if (!any) return;
    }
}

}  // namespace

NetworkLink setup_network(Context& ctx, const std::string& id, const EgressPolicy& policy,
                          const fs::path& sandbox_dir, bool log_refusals) {
    std::vector<std::string> upstreams;
    if (policy.has_names()) upstreams = host_nameservers();
    try {
        NetworkLink l = make_namespace_and_veth(ctx, id);
        l.upstreams = upstreams;
        configure_guest_end(ctx, l);
        if (log_refusals) l.log_group = egress_log_group_base + l.slot;
        install_policy(id, policy, l.upstreams.empty() ? "" : l.host_address, l.log_group);
        if (!l.upstreams.empty()) write_guest_resolv_conf(sandbox_dir, l);
        return l;
    } catch (...) {
        try {
            teardown_network(ctx, id);
        } catch (const std::exception& e) {
            log().warn("removing the half-made network of " + id + ": " + e.what());
        }
        throw;
    }
}

void teardown_network(Context& ctx, const std::string& id) {
    const std::string iface = host_interface_name(id);
    const bool has_netns = path_exists(netns_path(id));
    const bool has_iface = path_exists("/sys/class/net/" + iface);
    // The chain is made after the namespace and removed before it: without
    // either, there is no chain (and libnftables need not be loaded).
    if (has_netns || has_iface) {
        nft_try(json::array({{{"delete",
                               {{"element", with_table({{"name", "sandboxes"},
                                                        {"elem", json::array({iface})}})}}}}}));
        const std::string chain = policy_chain_name(id);
        nft_try(json::array({{{"flush", {{"chain", with_table({{"name", chain}})}}}},
                             {{"delete", {{"chain", with_table({{"name", chain}})}}}}}));
        // After the chain, whose rules refer to them.
        delete_name_sets(id);
    }
    if (has_netns) ip(ctx, {"netns", "delete", netns_name(id)});
    // Gone with the namespace unless a process still holds it (then with that).
    if (path_exists("/sys/class/net/" + iface)) {
        try {
            ip(ctx, {"link", "delete", iface});
        } catch (const Error& e) {
            if (path_exists("/sys/class/net/" + iface)) throw;
        }
    }
}

std::vector<std::string> network_leftovers(Context& ctx) {
    std::set<std::string> ids;
    for (auto& id : names_with_prefix("/run/netns", netns_prefix)) ids.insert(id);
    for (auto& hex : names_with_prefix("/sys/class/net", iface_prefix)) ids.insert("sw-" + hex);
    for (auto& id : policy_chain_ids()) ids.insert(id);
    std::vector<std::string> out;
    const auto now = std::chrono::system_clock::now();
    for (const auto& id : ids) {
        if (!is_sandbox_id(id) || path_exists(ctx.store.sandbox_dir(id))) continue;
        if (ino_t ino = netns_inode(id)) {
            if (netns_in_use(ino)) continue;
            std::error_code ec;
            auto t = fs::last_write_time(netns_path(id), ec);
            if (!ec) {
                auto made = std::chrono::file_clock::to_sys(t);
                if (now - made < stale_cgroup_age) continue;
            }
        }
        out.push_back(id);
    }
    return out;
}

int sweep_network_leftovers(Context& ctx) {
    int n = 0;
    for (const auto& id : network_leftovers(ctx)) {
        try {
            teardown_network(ctx, id);
            ++n;
        } catch (const Error& e) {
            log().warn("removing the network leftovers of " + id + ": " + e.what());
        }
    }
    return n;
}

NetworkStatus network_status() {
    NetworkStatus s;
    try {
        ip_program();
        nft_run(json::array({{{"list", {{"tables", {{"family", "inet"}}}}}}}));
    } catch (const Error& e) {
        s.detail = std::string(e.what()) + ": sandboxes with a network cannot be made";
        return s;
    }
    s.ok = true;
    std::ifstream f("/proc/sys/net/ipv4/ip_forward");
    std::string fwd;
    std::getline(f, fwd);
    s.detail = std::string("namespaces, veths and nftables work; ") + network_range +
               " is sandweave's; IP forwarding is " +
               (fwd == "1" ? "on (sandboxes reach what their policy allows beyond this host)"
                           : "off (sandboxes reach only this host's allowed addresses)");
    return s;
}

}  // namespace sandweave
