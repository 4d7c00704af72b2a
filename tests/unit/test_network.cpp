// lib/options/network and lib/sandbox/network's pure part: what an egress policy
// entry may be, how a template and flags resolve to a policy, and the nftables
// commands a policy becomes.
#include <doctest/doctest.h>

#include <filesystem>

#include "lib/core/error.hpp"
#include "lib/options/network.hpp"
#include "lib/options/options.hpp"
#include "lib/options/template.hpp"
#include "lib/sandbox/network.hpp"
#include "tests/unit/fixtures.hpp"

using namespace sandweave;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using sandweave::test::tmpl;

Destination dest(const std::string& text) {
    auto p = parse_destination(text);
    INFO(text, ": ", p.error);
    REQUIRE(p.dest);
    return *p.dest;
}

std::string reason(const std::string& text) {
    auto p = parse_destination(text);
    CHECK_FALSE(p.dest);
    return p.error;
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

}  // namespace

TEST_SUITE("network") {
    TEST_CASE("destinations parse to their canonical form") {
        CHECK(dest("10.0.0.0/8").str() == "10.0.0.0/8");
        CHECK(dest("192.0.2.7").str() == "192.0.2.7/32");
        CHECK(dest("192.0.2.7:443").str() == "192.0.2.7/32:443");
        CHECK(dest("10.1.0.0/16:8000-8100/tcp").str() == "10.1.0.0/16:8000-8100/tcp");
        CHECK(dest("10.0.0.0/8:*/udp").str() == "10.0.0.0/8:*/udp");
        CHECK(dest("fd00::/8").str() == "fd00::/8");
        CHECK(dest("[fd00::/8]:53/udp").str() == "[fd00::/8]:53/udp");
        CHECK(dest("[2001:db8::1]").str() == "2001:db8::1/128");
        CHECK(dest("0.0.0.0/0").prefix == 0);
        Destination d = dest("10.1.0.0/16:8000-8100/tcp");
        CHECK(d.family == 4);
        CHECK(d.port_lo == 8000);
        CHECK(d.port_hi == 8100);
        CHECK(d.proto == "tcp");
        // The canonical form parses back to itself.
        for (const char* t : {"10.1.0.0/16:8000-8100/tcp", "[fd00::/8]:53/udp", "10.0.0.0/8:*/udp"})
            CHECK(dest(dest(t).str()) == dest(t));
    }

    TEST_CASE("domain names: exact and *.suffix, lowercased, with optional ports") {
        CHECK(dest("example.com").str() == "example.com");
        CHECK(dest("Deb.Debian.ORG.").str() == "deb.debian.org");
        CHECK(dest("*.example.com:443/tcp").str() == "*.example.com:443/tcp");
        CHECK(dest("example.com:80-81").str() == "example.com:80-81");
        CHECK(dest("localhost").is_name());
        CHECK_FALSE(dest("10.0.0.0/8").is_name());
        CHECK_FALSE(dest("fd00::/8").is_name());  // hex letters, but an IPv6 CIDR
        Destination d = dest("*.example.com:443/tcp");
        CHECK(d.name == "*.example.com");
        CHECK(d.port_lo == 443);
        CHECK(d.proto == "tcp");
        CHECK(dest(d.str()) == d);

        CHECK(name_matches("example.com", "example.com"));
        CHECK_FALSE(name_matches("example.com", "a.example.com"));
        CHECK(name_matches("*.example.com", "a.example.com"));
        CHECK(name_matches("*.example.com", "a.b.example.com"));
        CHECK_FALSE(name_matches("*.example.com", "example.com"));
        CHECK_FALSE(name_matches("*.example.com", "badexample.com"));
        CHECK_FALSE(name_matches("*.example.com", "example.com.evil.org"));

        EgressPolicy p = egress_policy_from_json(json{
            {"allow", {"10.0.0.0/8", "*.example.com:443/tcp"}}, {"deny", {"bad.example.com"}}});
        CHECK(p.has_names());
        CHECK(to_json(p)["allow"][1] == "*.example.com:443/tcp");
        CHECK_FALSE(egress_policy_from_json(json{{"allow", {"10.0.0.0/8"}}}).has_names());
        CHECK(contains(test::usage_error([] {
                           egress_policy_from_json(json{{"deny", {"example.com:25"}}});
                       }),
                       "takes no ports"));
    }

    TEST_CASE("each bad entry gets its own reason") {
        CHECK(contains(reason("10.0.0.1/8"), "host bits set (did you mean 10.0.0.0/8?)"));
        CHECK(contains(reason("10.0.0.0/33"), "prefix length must be 0 to 32"));
        CHECK(contains(reason("300.0.0.0/8"), "not an IPv4 address"));
        CHECK(contains(reason("10.0.0.0/8:0"), "ports must be"));
        CHECK(contains(reason("10.0.0.0/8:70000"), "ports must be"));
        CHECK(contains(reason("10.0.0.0/8:90-80"), "ends before it starts"));
        CHECK(contains(reason("10.0.0.0/8:80/icmp"), "protocol must be tcp or udp"));
        CHECK(contains(reason("10.0.0.0/8:*"), "needs a protocol"));
        CHECK(contains(reason("10.0.0.0/8:"), "nothing after the :"));
        CHECK(contains(reason("[10.0.0.0/8]:80"), "only an IPv6 address goes in brackets"));
        CHECK(contains(reason("[fd00::/8"), "no ] after ["));
        CHECK(contains(reason("*"), "a wildcard needs a suffix"));
        CHECK(contains(reason("a.*.example.com"), "* goes only as the whole first label"));
        CHECK(contains(reason("exa mple.com"), "not a domain name"));
        CHECK(contains(reason("-a.example.com"), "neither starts nor ends with -"));
        CHECK(contains(reason("a..example.com"), "empty label"));
        CHECK(contains(reason(std::string(64, 'a') + ".com"), "a label is at most 63"));
        CHECK(contains(reason("example.com:0"), "ports must be"));
        CHECK(contains(reason("example.com:"), "nothing after the :"));
        auto denied = parse_destination("example.com:443", true);
        CHECK_FALSE(denied.dest);
        CHECK(contains(denied.error, "a denied name is never resolved, so it takes no ports"));
        CHECK(parse_destination("*.example.com", true).dest);
        CHECK(contains(reason(""), "empty"));
        CHECK(contains(reason(std::string(200, '1')), "longer than"));
    }

    TEST_CASE("a template's policy is checked entry by entry, with its line") {
        std::string msg = test::usage_error([] {
            tmpl(
                "image: base\nruntime_options:\n  network:\n    allow:\n      - 10.0.0.0/8\n"
                "      - 10.0.0.1/8:443\n");
        });
        CHECK(contains(msg, "runtime_options.network.allow"));
        CHECK(contains(msg, "10.0.0.1/8:443: host bits set"));
        CHECK(contains(msg, "line 6"));
        CHECK(contains(test::usage_error([] {
                           tmpl("image: base\nruntime_options:\n  network:\n    alow: []\n");
                       }),
                       "did you mean 'allow'?"));
        CHECK(contains(
            test::usage_error([] { tmpl("image: base\nruntime_options:\n  network: host\n"); }),
            "expected none or a policy"));
    }

    TEST_CASE("resolution: template policy, flags add to it, --network none clears it") {
        ResolvedTemplate t = tmpl(
            "image: base\nruntime_options:\n  network:\n    allow: [10.0.0.0/8:443/tcp]\n"
            "    deny: [10.9.0.0/16]\n");
        SandboxSpec s = resolve_spec(t, nullptr, "", {});
        REQUIRE(s.runtime.egress);
        CHECK(s.runtime.network == "sandbox");
        CHECK(s.runtime.egress->allow.size() == 1);
        CHECK(s.runtime.egress->deny.size() == 1);
        CHECK(s.origin.at("/runtime_options/network") == "template inline");

        FlagOverrides f;
        f.allow = {dest("192.0.2.0/24:80")};
        s = resolve_spec(t, nullptr, "", f);
        CHECK(s.runtime.egress->allow.size() == 2);
        CHECK(s.origin.at("/runtime_options/network") == "template inline + flag");

        // A template without a network gets a policy from the flags alone.
        s = resolve_spec(tmpl("base"), nullptr, "", f);
        REQUIRE(s.runtime.egress);
        CHECK(s.runtime.egress->allow == std::vector<Destination>{dest("192.0.2.0/24:80")});
        CHECK(s.origin.at("/runtime_options/network") == "flag");

        FlagOverrides none;
        none.network_none = true;
        s = resolve_spec(t, nullptr, "", none);
        CHECK_FALSE(s.runtime.egress);
        CHECK(s.runtime.network == "none");
        CHECK(s.origin.at("/runtime_options/network") == "flag");
        none.allow = f.allow;
        CHECK(contains(test::usage_error([&] { resolve_spec(t, nullptr, "", none); }),
                       "nothing to allow or deny"));

        // The default is unchanged: no network.
        s = resolve_spec(tmpl("base"), nullptr, "", {});
        CHECK_FALSE(s.runtime.egress);
        CHECK(s.runtime.network == "none");
    }

    TEST_CASE("a record keeps the policy: to_json and back") {
        ResolvedTemplate t =
            tmpl("image: base\nruntime_options:\n  network:\n    allow: ['[fd00::/8]:53/udp']\n");
        SandboxSpec s = resolve_spec(t, nullptr, "", {});
        json j = to_json(s);
        CHECK(j["runtime_options"]["network"] ==
              json{{"allow", {"[fd00::/8]:53/udp"}}, {"deny", json::array()}});
        SandboxSpec back = spec_from_json(j);
        CHECK(back.runtime.egress == s.runtime.egress);
        CHECK(back.runtime.network == "sandbox");
        CHECK(to_json(resolve_spec(tmpl("base"), nullptr, "", {}))["runtime_options"]["network"] ==
              "none");
    }

    TEST_CASE("slots are /30s of 10.213.0.0/16") {
        CHECK(slot_addresses(0) == std::pair<std::string, std::string>{"10.213.0.1", "10.213.0.2"});
        CHECK(slot_addresses(1) == std::pair<std::string, std::string>{"10.213.0.5", "10.213.0.6"});
        CHECK(slot_addresses(16383) ==
              std::pair<std::string, std::string>{"10.213.255.253", "10.213.255.254"});
        // Their IPv6 twins: the same offsets in fd77:7776:6176::/112.
        CHECK(slot_addresses6(0) ==
              std::pair<std::string, std::string>{"fd77:7776:6176::1", "fd77:7776:6176::2"});
        CHECK(slot_addresses6(16383) ==
              std::pair<std::string, std::string>{"fd77:7776:6176::fffd", "fd77:7776:6176::fffe"});
        CHECK(host_interface_name("sw-0123456789ab") == "swv0123456789ab");
        CHECK(host_interface_name("sw-0123456789ab").size() <= 15);
    }

    TEST_CASE("a policy becomes one chain: established first, denies, allows, then refuse") {
        EgressPolicy p;
        p.allow = {dest("10.0.0.0/8:443/tcp"), dest("192.0.2.1")};
        p.deny = {dest("10.9.0.0/16:8000-8100")};
        json cmds = nft_sandbox_commands("sw-0123456789ab", p);
        REQUIRE(cmds.is_array());
        CHECK(cmds[0]["add"]["chain"]["name"] == "sandbox-sw-0123456789ab");
        std::vector<json> rules;
        for (const auto& c : cmds)
            if (c["add"].contains("rule")) rules.push_back(c["add"]["rule"]["expr"]);
        REQUIRE(rules.size() == 6);
        CHECK(rules[0][0]["match"]["left"]["ct"]["key"] == "state");
        CHECK(rules[0][0]["match"]["op"] == "in");
        // IPv6 neighbour discovery with the host end, and nothing else of ICMPv6.
        CHECK(rules[1][0]["match"]["left"]["payload"]["protocol"] == "icmpv6");
        CHECK(rules[1][0]["match"]["right"]["set"] ==
              json{"nd-neighbor-solicit", "nd-neighbor-advert"});
        CHECK(rules[1].back().contains("accept"));
        // The deny: both protocols for a port range, then the refusal chain.
        CHECK(rules[2][0]["match"]["right"]["prefix"]["addr"] == "10.9.0.0");
        CHECK(rules[2][1]["match"]["right"]["set"] == json{"tcp", "udp"});
        CHECK(rules[2][2]["match"]["right"]["range"] == json{8000, 8100});
        CHECK(rules[2].back()["goto"]["target"] == "refuse");
        // An allow with a protocol and a port; a host with neither.
        CHECK(rules[3][1]["match"]["right"] == "tcp");
        CHECK(rules[3][2]["match"]["right"] == 443);
        CHECK(rules[3].back().contains("accept"));
        CHECK(rules[4].size() == 2);
        CHECK(rules[4][0]["match"]["right"] == "192.0.2.1");
        CHECK(rules[5] == json::array({{{"goto", {{"target", "refuse"}}}}}));
        // Its interface jumps to it.
        const json& elem = cmds.back()["add"]["element"];
        CHECK(elem["name"] == "sandboxes");
        CHECK(elem["elem"][0][0] == "swv0123456789ab");
        CHECK(elem["elem"][0][1]["jump"]["target"] == "sandbox-sw-0123456789ab");
    }

    TEST_CASE("with a log group, every refusing rule logs the packet before the reject") {
        EgressPolicy p;
        p.allow = {dest("10.0.0.0/8:443/tcp")};
        p.deny = {dest("10.9.0.0/16")};
        json cmds = nft_sandbox_commands("sw-0123456789ab", p, "", egress_log_group_base + 7);
        std::vector<json> rules;
        for (const auto& c : cmds)
            if (c["add"].contains("rule")) rules.push_back(c["add"]["rule"]["expr"]);
        int logged = 0;
        for (const auto& r : rules) {
            bool refuses = r.back().contains("goto");
            bool logs = r.size() >= 2 && r[r.size() - 2].contains("log");
            CHECK(refuses == logs);  // the deny and the final refusal, nothing else
            if (!logs) continue;
            ++logged;
            CHECK(r[r.size() - 2]["log"]["group"] == egress_log_group_base + 7);
            CHECK(r[r.size() - 2]["log"]["snaplen"] == 128);
        }
        CHECK(logged == 2);
        // Without a group, nothing is logged.
        for (const auto& c : nft_sandbox_commands("sw-0123456789ab", p))
            if (c["add"].contains("rule"))
                for (const auto& stmt : c["add"]["rule"]["expr"]) CHECK_FALSE(stmt.contains("log"));
        // The record keeps the group, and finds it again.
        NetworkLink l;
        CHECK_FALSE(network_log_group(to_json(l)));
        l.log_group = egress_log_group_base + 16383;
        CHECK(network_log_group(to_json(l)) == egress_log_group_base + 16383);
        CHECK(egress_log_group_base + 16383 <= 65535);
    }

    TEST_CASE("names become sets with timeouts after the denies, and DNS to the resolver first") {
        EgressPolicy p;
        p.allow = {dest("10.0.0.0/8:443/tcp"), dest("*.example.com:443/tcp"), dest("example.org")};
        p.deny = {dest("10.9.0.0/16"), dest("bad.example.com")};
        const std::string id = "sw-0123456789ab";
        json cmds = nft_sandbox_commands(id, p, "10.213.0.1");
        std::vector<json> rules, sets;
        for (const auto& c : cmds) {
            if (c["add"].contains("rule")) rules.push_back(c["add"]["rule"]["expr"]);
            if (c["add"].contains("set")) sets.push_back(c["add"]["set"]);
        }
        // established, neighbour discovery, DNS, 1 deny (the denied name is
        // the resolver's), 1 + 2 x 2 allows, refuse
        REQUIRE(rules.size() == 10);
        CHECK(rules[2][0]["match"]["right"] == "10.213.0.1");
        CHECK(rules[2][2]["match"]["right"] == 53);
        CHECK(rules[3].back()["goto"]["target"] == "refuse");
        REQUIRE(sets.size() == 4);
        CHECK(sets[0]["name"] == name_set_name(id, 0, 4));
        CHECK(sets[0]["name"] == "sandbox-sw-0123456789ab-0-v4");
        CHECK(sets[0]["type"] == "ipv4_addr");
        CHECK(sets[1]["type"] == "ipv6_addr");
        CHECK(sets[0]["flags"] == json::array({"timeout"}));
        CHECK(sets[2]["name"] == "sandbox-sw-0123456789ab-1-v4");
        // The name entry's rule: its set, then its protocol and port.
        CHECK(rules[5][0]["match"]["right"] == "@sandbox-sw-0123456789ab-0-v4");
        CHECK(rules[5][1]["match"]["right"] == "tcp");
        CHECK(rules[5][2]["match"]["right"] == 443);
        CHECK(rules[6][0]["match"]["left"]["payload"]["protocol"] == "ip6");
        CHECK(rules[7].size() == 2);  // example.org: any port
        // Without names, no DNS rule and no sets.
        p.allow = {dest("10.0.0.0/8")};
        p.deny.clear();
        json plain = nft_sandbox_commands(id, p);
        for (const auto& c : plain) CHECK_FALSE(c["add"].contains("set"));

        json add = nft_add_element_commands("s", "192.0.2.1", std::chrono::seconds(60));
        CHECK(add[0]["add"]["element"]["elem"][0]["elem"]["val"] == "192.0.2.1");
        CHECK(add[0]["add"]["element"]["elem"][0]["elem"]["timeout"] == 60);
        json refresh = nft_refresh_element_commands("s", "192.0.2.1", std::chrono::seconds(60));
        REQUIRE(refresh.size() == 2);
        CHECK(refresh[0]["delete"]["element"]["elem"][0] == "192.0.2.1");
    }

    TEST_CASE("the table fails closed: a sandbox interface without an entry is dropped") {
        json cmds = nft_table_commands();
        bool drop_rule = false;
        for (const auto& c : cmds) {
            if (!c["add"].contains("rule")) continue;
            const json& e = c["add"]["rule"]["expr"];
            if (e.size() == 2 && e[0].contains("match") && e[0]["match"]["right"] == "swv*" &&
                e[1].contains("drop"))
                drop_rule = true;
        }
        CHECK(drop_rule);
    }
}
