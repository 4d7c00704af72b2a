// lib/template: resolution of extends chains, merge semantics, origins, and the
// errors a user gets for a bad template (file, line, key, chain, hint, exit code).
// Fixtures: tests/data/templates/ (see its README).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/options/template.hpp"
#include "tests/unit/fixtures.hpp"

using namespace sandweave;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path& fixtures = test::template_fixtures;
const fs::path& builtins = test::builtin_templates;

TemplateResolver fixture_resolver() {
    return TemplateResolver({fixtures / "user"}, {builtins});
}

// The Error thrown by fn(), or a failed check when none is thrown.
template <typename Fn>
Error error_of(Fn&& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e;
    }
    FAIL("expected an sandweave::Error, nothing was thrown");
    return Error(ErrorCode::general, "");
}

bool contains(const std::string& haystack, const std::string& needle) {
    return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_SUITE("template") {
    TEST_CASE("built-in base resolves on its own") {
        auto r = fixture_resolver().resolve("base");
        CHECK(r.name == "base");
        CHECK(r.chain == std::vector<std::string>{"base"});
        CHECK(r.doc.at("image") == "base");
        CHECK(r.doc.at("runtime_options").at("hidepid") == 0);
        CHECK(r.doc.at("runtime_options").at("audit") == false);
        CHECK_FALSE(r.doc.contains("extends"));
        CHECK(r.origin.at("/image") == "base");
    }

    TEST_CASE("built-in coding extends base; template show's origins say which set what") {
        auto r = fixture_resolver().resolve("coding");
        CHECK(r.chain == std::vector<std::string>{"coding", "base"});
        CHECK(r.doc.at("image") == "coding");
        CHECK(r.origin.at("/image") == "coding");
        CHECK(r.origin.at("/env/LANG") == "base");
        CHECK(r.origin.at("/env/PYTHONDONTWRITEBYTECODE") == "coding");
        CHECK(r.origin.at("/runtime_options/hidepid") == "base");
        CHECK(r.doc.at("env").at("LANG") == "C.UTF-8");
        CHECK(r.doc.at("env").at("PYTHONDONTWRITEBYTECODE") == "1");
    }

    TEST_CASE("three-level chain: maps merge key by key, scalars are replaced by the child") {
        auto r = fixture_resolver().resolve("child");
        CHECK(r.name == "child");
        CHECK(r.chain == std::vector<std::string>{"child", "parent", "grandparent"});
        const json& d = r.doc;

        // env merges across all three levels; the nearest definition wins.
        CHECK(d.at("env") == json{{"A", "from-grandparent"},
                                  {"B", "from-parent"},
                                  {"C", "from-child"},
                                  {"D", "from-child"}});
        CHECK(r.origin.at("/env/A") == "grandparent");
        CHECK(r.origin.at("/env/B") == "parent");
        CHECK(r.origin.at("/env/C") == "child");
        CHECK(r.origin.at("/env/D") == "child");

        // Scalars: replaced by the nearest template that sets them.
        CHECK(d.at("user") == "1001:1001");
        CHECK(r.origin.at("/user") == "child");
        CHECK(d.at("cwd") == "/srv");
        CHECK(r.origin.at("/cwd") == "parent");
        CHECK(d.at("image") == "base");
        CHECK(r.origin.at("/image") == "grandparent");
        CHECK(d.at("description") ==
              "middle of the chain");  // child has none, parent's replaces grandparent's

        // Nested maps merge too.
        CHECK(d.at("runtime_options").at("hidepid") == 2);
        CHECK(r.origin.at("/runtime_options/hidepid") == "child");
        CHECK(d.at("runtime_options").at("audit") == true);
        CHECK(r.origin.at("/runtime_options/audit") == "parent");
        CHECK(d.at("runtime_options").at("platform") == "ptrace");
        CHECK(r.origin.at("/runtime_options/platform") == "grandparent");
        CHECK(d.at("runtime_options").at("audit_max_bytes") ==
              8ull << 30);  // "8GiB" normalised to bytes
        CHECK(d.at("resources").at("cpus") == 1.0);
        CHECK(d.at("resources").at("memory") == 2ull << 30);
        CHECK(r.origin.at("/resources/memory") == "child");
        CHECK(d.at("resources").at("pids") == 100);
        CHECK(d.at("labels") == json{{"tier", "parent"}, {"owner", "ci"}});

        // extends is consumed, not reported as a value.
        CHECK_FALSE(d.contains("extends"));
        CHECK(r.origin.count("/extends") == 0);
    }

    TEST_CASE("every leaf of the resolved document has an origin") {
        auto r = fixture_resolver().resolve("child");
        std::function<void(const json&, const std::string&)> walk = [&](const json& j,
                                                                        const std::string& ptr) {
            if (j.is_object() && !j.empty()) {
                for (const auto& [k, v] : j.items()) walk(v, ptr + "/" + k);
            } else {
                CAPTURE(ptr);
                CHECK(r.origin.count(ptr) == 1);
            }
        };
        walk(r.doc, "");
    }

    TEST_CASE("extends by a path relative to the child's file") {
        auto r = fixture_resolver().resolve("by-path");
        REQUIRE(r.chain.size() == 2);
        CHECK(r.chain[0] == "by-path");
        CHECK(contains(r.chain[1], "standalone.yaml"));
        CHECK(r.doc.at("env").at("X") == "from-file");
        CHECK(r.doc.at("env").at("Y") == "from-by-path");
        CHECK(r.doc.at("cwd") == "/work");
    }

    TEST_CASE("a template given as a file path") {
        auto path = (fixtures / "files/standalone.yaml").string();
        auto r = fixture_resolver().resolve(path);
        CHECK(r.doc.at("env").at("X") == "from-file");
        CHECK(r.doc.at("image") == "base");
    }

    TEST_CASE("user directories are searched before the built-ins") {
        TemplateResolver resolver({fixtures / "shadow", fixtures / "user"}, {builtins});
        auto r = resolver.resolve("coding");
        CHECK(r.doc.at("image") == "base");
        CHECK(r.doc.at("env").at("SHADOW") == "yes");

        auto list = resolver.list();
        auto coding = std::find_if(list.begin(), list.end(),
                                   [](const auto& t) { return t.name == "coding"; });
        REQUIRE(coding != list.end());
        CHECK_FALSE(coding->builtin);
        CHECK(std::count_if(list.begin(), list.end(),
                            [](const auto& t) { return t.name == "coding"; }) == 1);
        auto base =
            std::find_if(list.begin(), list.end(), [](const auto& t) { return t.name == "base"; });
        REQUIRE(base != list.end());
        CHECK(base->builtin);
        CHECK_FALSE(base->description.empty());
    }

    TEST_CASE("inline JSON and YAML templates") {
        auto resolver = fixture_resolver();
        CHECK(is_inline_template(R"({"extends": "base"})"));
        CHECK(is_inline_template("  {\"image\": \"base\"}"));
        CHECK(is_inline_template("extends: base\nenv:\n  A: \"1\"\n"));
        CHECK_FALSE(is_inline_template("base"));
        CHECK_FALSE(is_inline_template("templates/mine.yaml"));

        auto j = resolver.resolve(
            R"({"extends": "base", "env": {"A": "1"}, "runtime_options": {"audit_max_bytes": 8589934592}})");
        CHECK(j.name == "inline");
        CHECK(j.chain == std::vector<std::string>{"inline", "base"});
        CHECK(j.doc.at("env").at("A") == "1");
        CHECK(j.doc.at("env").at("LANG") == "C.UTF-8");
        CHECK(j.origin.at("/env/A") == "inline");
        CHECK(j.origin.at("/env/LANG") == "base");
        CHECK(j.doc.at("runtime_options").at("audit_max_bytes") == 8589934592ull);
        CHECK(j.origin.at("/runtime_options/audit_max_bytes") == "inline");

        auto y = resolver.resolve("extends: child\nenv:\n  E: inline\n");
        CHECK(y.chain == std::vector<std::string>{"inline", "child", "parent", "grandparent"});
        CHECK(y.doc.at("env").at("E") == "inline");
        CHECK(y.doc.at("env").at("A") == "from-grandparent");
    }

    TEST_CASE("a cycle is a usage error that prints the chain") {
        auto e = error_of([] { fixture_resolver().resolve("cycle-a"); });
        CHECK(e.code() == ErrorCode::usage);
        CHECK(contains(e.what(), "cycle"));
        CHECK(contains(e.what(), "cycle-a -> cycle-b -> cycle-a"));

        auto self = error_of([] { fixture_resolver().resolve("self-cycle"); });
        CHECK(self.code() == ErrorCode::usage);
        CHECK(contains(self.what(), "self-cycle -> self-cycle"));
    }

    TEST_CASE("an unknown key names the file, line and key, with a did-you-mean") {
        auto e = error_of([] { fixture_resolver().resolve("typo-key"); });
        CHECK(e.code() == ErrorCode::usage);
        std::string msg = e.what();
        CAPTURE(msg);
        CHECK(contains(msg, "typo-key.yaml"));
        CHECK(contains(msg, "line 4"));
        CHECK(contains(msg, "runtime_options.hidepd"));
        CHECK(contains(msg, "unknown key"));
        CHECK(contains(msg, "did you mean 'hidepid'"));

        auto top = error_of(
            [] { fixture_resolver().resolve(R"({"image": "base", "envv": {"A": "1"}})"); });
        CHECK(contains(top.what(), "did you mean 'env'"));
    }

    TEST_CASE("an error in a parent names the chain that led there") {
        auto e = error_of([] { fixture_resolver().resolve("typo-parent"); });
        CHECK(e.code() == ErrorCode::usage);
        std::string msg = e.what();
        CAPTURE(msg);
        CHECK(contains(msg, "typo-key.yaml"));
        CHECK(contains(msg, "hidepd"));
        CHECK(contains(msg, "typo-parent -> typo-key"));
    }

    TEST_CASE("an unknown parent is a bad template (usage error) naming the child and the parent") {
        auto e = error_of([] { fixture_resolver().resolve("missing-parent"); });
        std::string msg = e.what();
        CAPTURE(msg);
        CHECK(contains(msg, "missing-parent"));
        CHECK(contains(msg, "no-such-parent"));
        // A bad template is exit 2; exit 4 is for a template the user named
        // directly that does not exist.
        CHECK(e.code() == ErrorCode::usage);
    }

    TEST_CASE("an unknown template asked for directly is not_found, with a hint") {
        auto e = error_of([] { fixture_resolver().resolve("basee"); });
        CHECK(e.code() == ErrorCode::not_found);
        CHECK(contains(e.what(), "did you mean 'base'"));
        auto file = error_of([] { fixture_resolver().resolve("/nonexistent/dir/t.yaml"); });
        CHECK(file.code() == ErrorCode::not_found);
        CHECK(contains(file.what(), "/nonexistent/dir/t.yaml"));
    }

    TEST_CASE("malformed YAML names the file and the line") {
        auto e = error_of([] { fixture_resolver().resolve("malformed"); });
        CHECK(e.code() == ErrorCode::usage);
        std::string msg = e.what();
        CAPTURE(msg);
        CHECK(contains(msg, "malformed.yaml"));
        CHECK(contains(msg, "line 5"));

        auto inl = error_of(
            [] { fixture_resolver().resolve("{\"image\": \"base\",\n \"env\": {\"A\": [}\n"); });
        CHECK(inl.code() == ErrorCode::usage);
        CHECK(contains(inl.what(), "inline template"));
    }

    TEST_CASE("empty template and a template without an image are usage errors") {
        auto empty = error_of([] { fixture_resolver().resolve("empty"); });
        CHECK(empty.code() == ErrorCode::usage);
        CHECK(contains(empty.what(), "empty"));
        auto no_image = error_of([] { fixture_resolver().resolve("no-image"); });
        CHECK(no_image.code() == ErrorCode::usage);
        CHECK(contains(no_image.what(), "image"));
    }

    TEST_CASE("wrong types are usage errors naming the key and the bad value") {
        struct Case {
            const char* doc;
            const char* key;
            const char* shown;
        };
        const Case cases[] = {
            {R"({"image":"base","runtime_options":{"hidepid":"two"}})", "runtime_options.hidepid",
             "two"},
            {R"({"image":"base","runtime_options":{"hidepid":3}})", "runtime_options.hidepid", "3"},
            {R"({"image":"base","runtime_options":{"hidepid":-1}})", "runtime_options.hidepid",
             "-1"},
            {R"({"image":"base","runtime_options":{"audit":"yes"}})", "runtime_options.audit",
             "yes"},
            {R"({"image":"base","runtime_options":{"audit":1}})", "runtime_options.audit", "1"},
            {R"({"image":"base","runtime_options":{"audit_max_bytes":-1}})",
             "runtime_options.audit_max_bytes", "-1"},
            {R"({"image":"base","runtime_options":{"audit_max_bytes":0}})",
             "runtime_options.audit_max_bytes", "0"},
            {R"({"image":"base","runtime_options":{"audit_max_bytes":"lots"}})",
             "runtime_options.audit_max_bytes", "lots"},
            {R"({"image":"base","runtime_options":{"platform":"qemu"}})",
             "runtime_options.platform", "qemu"},
            {R"({"image":"base","runtime_options":{"network":"host"}})", "runtime_options.network",
             "host"},
            {R"({"image":"base","runtime_options":[1,2]})", "runtime_options", "list"},
            {R"({"image":"base","cwd":"relative/dir"})", "cwd", "relative/dir"},
            {R"({"image":"base","user":"root"})", "user", "root"},
            {R"({"image":"base","user":"1001:"})", "user", "1001:"},
            {R"({"image":"base","env":["A=1"]})", "env", "list"},
            {R"({"image":"base","env":{"A":{"B":"C"}}})", "env.A", "map"},
            {R"({"image":["base"]})", "image", "list"},
            {R"({"image":"base","resources":{"cpus":-1}})", "resources.cpus", "-1"},
            {R"({"image":"base","resources":{"pids":0}})", "resources.pids", "0"},
            {R"({"image":"base","resources":{"memory":"2 lots"}})", "resources.memory", "2 lots"},
            {R"({"image":"base","resources":{"gpus":1}})", "resources.gpus", "unknown key"},
        };
        for (const auto& c : cases) {
            CAPTURE(c.doc);
            auto e = error_of([&] { fixture_resolver().resolve(c.doc); });
            std::string msg = e.what();
            CAPTURE(msg);
            CHECK(e.code() == ErrorCode::usage);
            CHECK(contains(msg, c.key));
            CHECK(contains(msg, c.shown));
        }
    }

    TEST_CASE("valid typed values are normalised") {
        auto r = fixture_resolver().resolve(
            "image: base\nuser: \"1001\"\nruntime_options:\n  hidepid: 2\n  audit: true\n  "
            "audit_max_bytes: 64KiB\n"
            "resources:\n  cpus: 0.5\n  memory: 512MiB\n  pids: 64\n");
        CHECK(r.doc.at("runtime_options").at("hidepid") == 2);
        CHECK(r.doc.at("runtime_options").at("audit") == true);
        CHECK(r.doc.at("runtime_options").at("audit_max_bytes") == 65536u);
        CHECK(r.doc.at("resources").at("cpus") == 0.5);
        CHECK(r.doc.at("resources").at("memory") == 512ull << 20);
        CHECK(r.doc.at("resources").at("pids") == 64);
        CHECK(r.doc.at("user") == "1001");
    }

    TEST_CASE("validate_file checks a file and its chain") {
        auto resolver = fixture_resolver();
        auto ok = resolver.validate_file(fixtures / "user/child.yaml");
        CHECK(ok.chain.size() == 3);
        CHECK(error_of([&] { resolver.validate_file(fixtures / "user/typo-key.yaml"); }).code() ==
              ErrorCode::usage);
        CHECK(error_of([&] { resolver.validate_file(fixtures / "user/cycle-a.yaml"); }).code() ==
              ErrorCode::usage);
        CHECK(error_of([&] { resolver.validate_file(fixtures / "user/malformed.yaml"); }).code() ==
              ErrorCode::usage);
        CHECK(error_of([&] {
                  resolver.validate_file(fixtures / "user/does-not-exist.yaml");
              }).code() == ErrorCode::not_found);
    }

    TEST_CASE("list shows user templates before built-ins, with descriptions") {
        auto list = fixture_resolver().list();
        REQUIRE_FALSE(list.empty());
        auto pos = [&](const std::string& name) {
            return std::find_if(list.begin(), list.end(),
                                [&](const auto& t) { return t.name == name; });
        };
        REQUIRE(pos("child") != list.end());
        REQUIRE(pos("base") != list.end());
        REQUIRE(pos("coding") != list.end());
        CHECK(pos("child") < pos("base"));
        CHECK_FALSE(pos("child")->builtin);
        CHECK(pos("grandparent")->description == "top of a three-level extends chain");
        CHECK(pos("coding")->builtin);
    }

}  // TEST_SUITE

TEST_SUITE("template bad input") {
    // Found by fuzz_template: a key with a newline made a two-line error.
    TEST_CASE("errors quoting user text stay on one line") {
        TemplateResolver r({}, {fs::path(SANDWEAVE_SOURCE_DIR) / "templates"});
        try {
            r.resolve(R"({"ext\nds": "base"})");
            FAIL("resolved");
        } catch (const Error& e) {
            std::string what = e.what();
            CHECK(what.find('\n') == std::string::npos);
            CHECK(what.find("ext\\nds") != std::string::npos);
        }
    }

    TEST_CASE("origins are JSON pointers: '/' and '~' in keys are escaped") {
        TemplateResolver r({}, {fs::path(SANDWEAVE_SOURCE_DIR) / "templates"});
        auto t =
            r.resolve(R"({"extends": "base", "labels": {"app.example/tier": "web", "a~b": "c"}})");
        CHECK(t.origin.at("/labels/app.example~1tier") == "inline");
        CHECK(t.origin.at("/labels/a~0b") == "inline");
        CHECK(t.doc.contains(nlohmann::json::json_pointer("/labels/app.example~1tier")));
    }
}

TEST_SUITE("template hostile input") {
    // Nine levels of nine aliases: 9^9 nodes once expanded, a few hundred bytes.
    std::string alias_bomb(const std::string& indent) {
        const std::string levels = "abcdefghi";
        std::string out = indent +
                          "a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"," +
                          "\"lol\",\"lol\"]\n";
        for (std::size_t i = 1; i < levels.size(); ++i) {
            out += indent + levels[i] + ": &" + levels[i] + " [";
            for (int j = 0; j < 9; ++j) out += std::string(j ? "," : "") + "*" + levels[i - 1];
            out += "]\n";
        }
        return out;
    }

    TEST_CASE("an alias bomb is refused at once, inline or in a file, naming where it is") {
        TemplateResolver r({}, {builtins});
        auto inl = error_of([&] { r.resolve("image: base\nlabels:\n" + alias_bomb("  ")); });
        CHECK(inl.code() == ErrorCode::usage);
        CHECK(contains(inl.what(), "inline template"));
        CHECK(contains(inl.what(), "aliases"));

        test::TempDir dir("template");
        // Under a template key (walked), and as the issue's top-level keys.
        write_file_atomic(dir.path / "under-env.yaml", "extends: base\nenv:\n" + alias_bomb("  "));
        write_file_atomic(dir.path / "top.yaml", "image: base\n" + alias_bomb("x"));
        auto under = error_of([&] { r.resolve((dir.path / "under-env.yaml").string()); });
        CHECK(under.code() == ErrorCode::usage);
        CHECK(contains(under.what(), "under-env.yaml"));
        CHECK(contains(under.what(), "aliases"));
        auto top = error_of([&] { r.resolve((dir.path / "top.yaml").string()); });
        CHECK(top.code() == ErrorCode::usage);
        CHECK(contains(top.what(), "top.yaml"));
        CHECK(contains(top.what(), "line 2"));
    }

    TEST_CASE("an alias inside its own anchor is refused, not followed down the stack") {
        TemplateResolver r({}, {builtins});
        // Found by fuzz_template: `*a` inside `&a`'s own list nests without end.
        auto e = error_of([&] { r.resolve("image: base\nenv:\n  a: &a [\"x\", *a, *a]\n"); });
        CHECK(e.code() == ErrorCode::usage);
        CHECK(contains(e.what(), "inline template"));
        CHECK(contains(e.what(), "levels deep"));
        std::string deep = "image: base\nlabels: ";
        for (int i = 0; i < 100; ++i) deep += "[";
        for (int i = 0; i < 100; ++i) deep += "]";
        auto d = error_of([&] { r.resolve(deep + "\n"); });
        CHECK(contains(d.what(), "nested more than 64 levels deep"));
    }

    TEST_CASE("anchors and aliases of an ordinary size still resolve") {
        TemplateResolver r({}, {builtins});
        auto t = r.resolve("image: base\nenv: &e {A: \"1\", B: \"2\"}\nlabels: *e\n");
        CHECK(t.doc.at("labels") == json({{"A", "1"}, {"B", "2"}}));
        CHECK(t.doc.at("env").at("B") == "2");
    }

    TEST_CASE("a file that is not a template is never quoted in the error") {
        test::TempDir dir("template");
        const std::string secret = "root:$6$s3cretHash$abcdef:20228:0:99999:7:::";
        write_file_atomic(dir.path / "shadow", secret + "\ndaemon:*:20228:0:99999:7:::\n");
        write_file_atomic(dir.path / "conf.yaml", "password: hunter2\nimage: base\n");
        write_file_atomic(dir.path / "list.yaml", "- hunter2\n- image\n");
        write_file_atomic(dir.path / "escape.yaml", "image: \"a\\qhunter2\"\n");
        TemplateResolver r({}, {builtins});
        for (const char* name : {"shadow", "conf.yaml", "list.yaml", "escape.yaml"}) {
            CAPTURE(name);
            auto e = error_of([&] { r.resolve((dir.path / name).string()); });
            std::string msg = e.what();
            CAPTURE(msg);
            CHECK(e.code() == ErrorCode::usage);
            CHECK(contains(msg, (dir.path / name).string()));
            CHECK(contains(msg, "line 1"));
            CHECK_FALSE(contains(msg, "s3cret"));
            CHECK_FALSE(contains(msg, "root:"));
            CHECK_FALSE(contains(msg, "hunter2"));
            CHECK_FALSE(contains(msg, "password"));
        }
        // What was expected instead: a map, or keys a template knows.
        CHECK(contains(error_of([&] { r.resolve((dir.path / "list.yaml").string()); }).what(),
                       "expected a map of template keys"));
        CHECK(contains(error_of([&] { r.resolve((dir.path / "shadow").string()); }).what(),
                       "unknown key (not a template key)"));
        // A client's file, read there and sent as text: named, not quoted.
        auto sent = error_of(
            [&] { r.resolve(secret + "\ndaemon:*:20228:0:99999:7:::\n", "client:/etc/shadow"); });
        CHECK(sent.code() == ErrorCode::usage);
        CHECK(contains(sent.what(), "template 'client:/etc/shadow' line 1"));
        CHECK_FALSE(contains(sent.what(), "s3cret"));
    }

    TEST_CASE("a remote caller's template paths are refused, not read") {
        test::TempDir dir("template");
        write_file_atomic(dir.path / "t.yaml", "image: base\n");
        TemplateResolver r({fixtures / "user"}, {builtins});
        r.refuse_caller_paths();
        for (const std::string& ref : {(dir.path / "t.yaml").string(), std::string("/etc/shadow"),
                                       std::string("../../etc/passwd"), std::string("t.yaml")}) {
            CAPTURE(ref);
            auto e = error_of([&] { r.resolve(ref); });
            CHECK(e.code() == ErrorCode::usage);
            CHECK(contains(e.what(), "not read for a remote client"));
        }
        // Nor through the extends of inline text.
        auto ext = error_of([&] { r.resolve(R"({"extends": "/etc/shadow"})"); });
        CHECK(contains(ext.what(), "not read for a remote client"));
        // Names resolve, and a named template's own extends by path (beside it) too.
        CHECK(r.resolve("base").doc.at("image") == "base");
        CHECK(r.resolve("by-path").chain.size() >= 2);
        CHECK(r.resolve(R"({"extends": "child"})").chain.size() == 4);
    }
}
