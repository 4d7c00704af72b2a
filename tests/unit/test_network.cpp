// lib/spec/network and lib/sandbox/network's pure part: what an egress policy
// entry may be, how a template and flags resolve to a policy, and the nftables
// commands a policy becomes.
#include <doctest/doctest.h>

#include <filesystem>

#include "lib/core/error.hpp"
#include "lib/sandbox/network.hpp"
#include "lib/spec/network.hpp"
#include "lib/spec/options.hpp"
#include "lib/spec/template.hpp"
#include "tests/unit/fixtures.hpp"

using namespace sandweave;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path fixtures = fs::path(SANDWEAVE_TEST_DATA) / "templates";
const fs::path builtins = fs::path(SANDWEAVE_SOURCE_DIR) / "templates";

ResolvedTemplate tmpl(const std::string& ref) {
    return TemplateResolver({fixtures / "user"}, {builtins}).resolve(ref);
}

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
        CHECK(contains(reason("example.com"), "domain names are not supported yet"));
        CHECK(contains(reason("*.example.com"), "domain names are not supported yet"));
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
        REQUIRE(rules.size() == 5);
        CHECK(rules[0][0]["match"]["left"]["ct"]["key"] == "state");
        CHECK(rules[0][0]["match"]["op"] == "in");
        // The deny: both protocols for a port range, then the refusal chain.
        CHECK(rules[1][0]["match"]["right"]["prefix"]["addr"] == "10.9.0.0");
        CHECK(rules[1][1]["match"]["right"]["set"] == json{"tcp", "udp"});
        CHECK(rules[1][2]["match"]["right"]["range"] == json{8000, 8100});
        CHECK(rules[1].back()["goto"]["target"] == "refuse");
        // An allow with a protocol and a port; a host with neither.
        CHECK(rules[2][1]["match"]["right"] == "tcp");
        CHECK(rules[2][2]["match"]["right"] == 443);
        CHECK(rules[2].back().contains("accept"));
        CHECK(rules[3].size() == 2);
        CHECK(rules[3][0]["match"]["right"] == "192.0.2.1");
        CHECK(rules[4] == json::array({{{"goto", {{"target", "refuse"}}}}}));
        // Its interface jumps to it.
        const json& elem = cmds.back()["add"]["element"];
        CHECK(elem["name"] == "sandboxes");
        CHECK(elem["elem"][0][0] == "swv0123456789ab");
        CHECK(elem["elem"][0][1]["jump"]["target"] == "sandbox-sw-0123456789ab");
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
