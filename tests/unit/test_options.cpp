// lib/options: one place resolves every option, flag > snapshot > template >
// default, and remembers where each value came from (`inspect` shows it).
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>

#include "lib/core/error.hpp"
#include "lib/options/options.hpp"
#include "lib/options/template.hpp"
#include "tests/unit/fixtures.hpp"

using namespace sandweave;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using sandweave::test::tmpl;

using test::usage_error;

}  // namespace

TEST_SUITE("options") {
    TEST_CASE("defaults apply when neither template nor flag says anything") {
        auto t = tmpl(R"({"image": "base"})");
        SandboxSpec s = resolve_spec(t, nullptr, "", FlagOverrides{});
        CHECK(s.template_name == "inline");
        CHECK(s.image == "base");
        CHECK(s.runtime.hidepid == 0);
        CHECK(s.runtime.audit == false);
        CHECK(s.runtime.audit_max_bytes == default_audit_max_bytes);
        CHECK(default_audit_max_bytes == 1ull << 30);
        CHECK(s.runtime.platform == "ptrace");
        CHECK(s.runtime.network == "none");
        CHECK(s.user.uid == 0u);
        CHECK(s.cwd == "/");
        CHECK(s.origin.at("/runtime_options/hidepid") == "default");
        CHECK(s.origin.at("/runtime_options/audit") == "default");
        CHECK(s.origin.at("/runtime_options/audit_max_bytes") == "default");
        CHECK(s.origin.at("/user") == "default");
        CHECK(s.origin.at("/image") == "template inline");
    }

    TEST_CASE("template values (after extends) beat defaults and name the template that set them") {
        SandboxSpec s = resolve_spec(tmpl("child"), nullptr, "", FlagOverrides{});
        CHECK(s.template_name == "child");
        CHECK(s.runtime.hidepid == 2);
        CHECK(s.origin.at("/runtime_options/hidepid") == "template child");
        CHECK(s.runtime.audit == true);
        CHECK(s.origin.at("/runtime_options/audit") == "template parent");
        CHECK(s.runtime.audit_max_bytes == 8ull << 30);
        CHECK(s.origin.at("/runtime_options/audit_max_bytes") == "template grandparent");
        CHECK(s.user.uid == 1001u);
        CHECK(s.user.gid == 1001u);
        CHECK(s.origin.at("/user") == "template child");
        CHECK(s.cwd == "/srv");
        CHECK(s.origin.at("/cwd") == "template parent");
        CHECK(s.env.at("A") == "from-grandparent");
        CHECK(s.env.at("C") == "from-child");
        CHECK(s.origin.at("/env/B") == "template parent");
        CHECK(s.labels.at("tier") == "parent");
        CHECK(s.labels.at("owner") == "ci");
        REQUIRE(s.resources.memory);
        CHECK(*s.resources.memory == 2ull << 30);
        REQUIRE(s.resources.cpus);
        CHECK(*s.resources.cpus == 1.0);
        REQUIRE(s.resources.pids);
        CHECK(*s.resources.pids == 100);
        CHECK(s.origin.at("/resources/memory") == "template child");
    }

    TEST_CASE("an explicit flag wins, even hidepid 0 and audit false") {
        FlagOverrides f;
        f.hidepid = 0;
        f.audit = false;
        f.user = UserSpec{0, 0};
        SandboxSpec s = resolve_spec(tmpl("child"), nullptr, "", f);
        CHECK(s.runtime.hidepid == 0);
        CHECK(s.origin.at("/runtime_options/hidepid") == "flag");
        CHECK(s.runtime.audit == false);
        CHECK(s.origin.at("/runtime_options/audit") == "flag");
        CHECK(s.user.uid == 0u);
        CHECK(s.origin.at("/user") == "flag");

        FlagOverrides up;
        up.hidepid = 1;
        up.audit = true;
        SandboxSpec t = resolve_spec(tmpl("base"), nullptr, "", up);
        CHECK(t.runtime.hidepid == 1);
        CHECK(t.runtime.audit == true);
        CHECK(t.origin.at("/runtime_options/hidepid") == "flag");
    }

    // The header's contract: `snapshot_settings` is the snapshot's saved
    // runtime_options object ({"hidepid": 1, "audit": true}).
    TEST_CASE("a filesystem snapshot's settings beat the template, flags beat the snapshot") {
        json snap = {{"hidepid", 1}, {"audit", false}};
        SandboxSpec s = resolve_spec(tmpl("child"), &snap, "snap1", FlagOverrides{});
        CHECK(s.runtime.hidepid == 1);
        CHECK(s.origin.at("/runtime_options/hidepid") == "snapshot snap1");
        CHECK(s.runtime.audit == false);
        CHECK(s.origin.at("/runtime_options/audit") == "snapshot snap1");
        // What the snapshot does not carry still comes from the template.
        CHECK(s.runtime.audit_max_bytes == 8ull << 30);
        CHECK(s.origin.at("/runtime_options/audit_max_bytes") == "template grandparent");

        FlagOverrides f;
        f.hidepid = 0;
        SandboxSpec o = resolve_spec(tmpl("child"), &snap, "snap1", f);
        CHECK(o.runtime.hidepid == 0);
        CHECK(o.origin.at("/runtime_options/hidepid") == "flag");
        CHECK(o.runtime.audit == false);
        CHECK(o.origin.at("/runtime_options/audit") == "snapshot snap1");

        json snap_audit = {{"audit", true}};
        FlagOverrides no_audit;
        no_audit.audit = false;
        SandboxSpec n = resolve_spec(tmpl("base"), &snap_audit, "snap2", no_audit);
        CHECK(n.runtime.audit == false);
        CHECK(n.origin.at("/runtime_options/audit") == "flag");
    }

    TEST_CASE("labels: template labels plus flag labels, the flag wins per key") {
        FlagOverrides f;
        f.labels = {{"tier", "flag"}, {"run", "42"}};
        SandboxSpec s = resolve_spec(tmpl("child"), nullptr, "", f);
        CHECK(s.labels ==
              std::map<std::string, std::string>{{"owner", "ci"}, {"run", "42"}, {"tier", "flag"}});
        CHECK(s.origin.at("/labels/tier") == "flag");
        CHECK(s.origin.at("/labels/owner") == "template grandparent");
    }

    TEST_CASE("to_json / spec_from_json round trip keeps every value and origin") {
        FlagOverrides f;
        f.labels = {{"k", "v"}};
        f.hidepid = 1;
        SandboxSpec s = resolve_spec(tmpl("child"), nullptr, "", f);
        json j = to_json(s);
        CHECK(j.at("template") == "child");
        CHECK(j.at("runtime_options").at("hidepid") == 1);
        CHECK(j.at("origin").at("/runtime_options/hidepid") == "flag");
        CHECK(j.at("user") == "1001:1001");

        SandboxSpec back = spec_from_json(j);
        CHECK(to_json(back) == j);
        CHECK(back.runtime.audit_max_bytes == s.runtime.audit_max_bytes);
        CHECK(back.resources.memory == s.resources.memory);
        CHECK(back.env == s.env);
        CHECK(back.labels == s.labels);
        CHECK(back.origin == s.origin);
    }

    TEST_CASE("command_line: docker run's rule for the sandbox's entrypoint and cmd") {
        using V = std::vector<std::string>;
        SandboxSpec s;
        s.entrypoint = {"/bin/ep", "-x"};
        s.cmd = {"default"};
        const std::optional<V> keep;
        CHECK(command_line(s, {}, keep, "sandbox b") == V{"/bin/ep", "-x", "default"});
        CHECK(command_line(s, {"a", "b"}, keep, "sandbox b") == V{"/bin/ep", "-x", "a", "b"});
        CHECK(command_line(s, {"a"}, V{"/bin/other"}, "sandbox b") == V{"/bin/other", "a"});
        CHECK(command_line(s, {}, V{"/bin/other"}, "sandbox b") == V{"/bin/other"});
        CHECK(command_line(s, {"/bin/id"}, V{}, "sandbox b") == V{"/bin/id"});
        CHECK(usage_error([&] {
                  command_line(s, {}, V{}, "sandbox b");
              }).find("no command given (the entrypoint was cleared") == 0);
        SandboxSpec plain;
        CHECK(command_line(plain, {"/bin/id", "-u"}, keep, "sandbox b") == V{"/bin/id", "-u"});
        CHECK(usage_error([&] { command_line(plain, {}, keep, "sandbox b"); }) ==
              "no command given, and sandbox b has none of its own (its template and image set "
              "no entrypoint or cmd)");
        plain.cmd = {"/bin/true"};
        CHECK(command_line(plain, {}, keep, "sandbox b") == V{"/bin/true"});
        CHECK(usage_error([&] { command_line(plain, {""}, keep, "sandbox b"); }) ==
              "argv[0]: empty program name");
    }

}  // TEST_SUITE
