// lib/api: every request and result type round-trips through JSON, and params
// from a peer are checked strictly, each problem named.
#include <doctest/doctest.h>

#include "lib/api/local.hpp"
#include "lib/api/methods.hpp"
#include "tests/unit/fixtures.hpp"

using namespace sandweave;
using namespace sandweave::api;
using nlohmann::json;

namespace {

// to_json -> from_json -> to_json gives the same document, and the document
// is not the default one (so a field lost on the way would show).
template <class T>
void round_trips(const T& value) {
    json first = encode_value(value);
    T back{};
    decode_value(first, back, "result");
    json second = encode_value(back);
    CHECK(first == second);
    CHECK(first != encode_value(T{}));
}

using test::usage_error;

SandboxView sample_view() {
    SandboxView v;
    v.record.id = "sw-0123456789ab";
    v.record.name = "web";
    v.record.state = SandboxState::running;
    v.record.created_at = "2026-12-01T00:00:00Z";
    v.record.spec.template_name = "base";
    v.record.spec.image = "base";
    v.record.spec.runtime.hidepid = 2;
    v.record.spec.runtime.audit = true;
    v.record.spec.labels["team"] = "a";
    v.record.runsc = "/usr/local/lib/sandweave/runsc";
    v.record.runsc_flags = {"--root=/x"};
    v.record.pool = "warm";
    v.record.pool_state = "acquired";
    v.record.acquired_audit_seq = 17;
    v.live = SandboxState::failed;
    return v;
}

}  // namespace

TEST_SUITE("api") {
    TEST_CASE("request types round-trip") {
        round_trips(IdParams{"sw-1"});
        round_trips(NameParams{"warm"});
        round_trips(HelloParams{1, "me 1.0", {"log"}});
        CreateParams c;
        c.template_ref = "{\"extends\": \"base\"}";
        c.hidepid = 2;
        c.audit = false;  // explicit false must survive: it overrides a template
        c.user = "1001:1001";
        c.name = "n";
        c.labels = {{"k", "v"}};
        c.template_source = "client:/home/me/t.yaml";
        c.reservation = "42";
        c.slot = 7;
        round_trips(c);
        CHECK(encode_value(c).at("audit") == false);
        round_trips(c);
        RunParams r;
        r.id = "sw-1";
        r.argv = {"/bin/sh", "-c", "echo hi"};
        r.user = "0:0";
        r.cwd = "/tmp";
        r.env = {"A=1"};
        r.timeout_ms = 1500;
        r.stdin = true;
        round_trips(r);
        RunParams detached;
        detached.id = "sw-1";
        detached.argv = {"sleep", "9"};
        detached.detach = true;
        round_trips(detached);
        RunParams attach;
        attach.id = "sw-1";
        attach.attach = 3;
        attach.follow = true;
        round_trips(attach);
        round_trips(KillParams{"sw-1", 3, "INT"});
        round_trips(HandleParams{"sw-1", 3});
        round_trips(AuditExportParams{"sw-1", "/tmp/x.jsonl"});
        round_trips(SnapshotCreateParams{"sw-1", "fs", "snap"});
        round_trips(PoolCreateParams{"warm", 3, c});
        // "name" in pool.create is the pool's: it never becomes a member's name.
        auto pool = from_json<PoolCreateParams>(
            json{{"name", "warm"}, {"size", 2}, {"template", "base"}, {"hidepid", 2}});
        CHECK(pool.name == "warm");
        CHECK_FALSE(pool.options.name.has_value());
        CHECK(pool.options.hidepid == 2);
        CHECK(encode_value(PoolCreateParams{"warm", 3, c}).at("name") == "warm");
        round_trips(PoolResizeParams{"warm", 5});
        round_trips(ReserveParams{1000, 8, 3600000, 2.0, 1u << 30, "0b51e2675bff5dc8"});
        round_trips(Reservation{"42", 1000, 8});
        round_trips(PoolAcquireParams{"warm"});
        round_trips(PoolAcquireParams{"warm", "sw-0123456789ab"});
        CHECK_FALSE(encode_value(PoolAcquireParams{"warm"}).contains("id"));
        // A controller's member: the pool travels with the create, never with pool.create.
        CreateParams member;
        member.pool = "warm";
        round_trips(member);
        CHECK_FALSE(encode_value(PoolCreateParams{"warm", 3, member}).contains("pool"));
        round_trips(TemplateShowParams{"coding"});
        round_trips(TemplateValidateParams{"/tmp/t.yaml"});
        round_trips(ImageBuildParams{"base", true});
        round_trips(StdinParams{json(4), "aGkK", true});
        round_trips(SignalParams{json("r1"), json("TERM")});
        round_trips(RequestRef{json(9)});
    }

    TEST_CASE("result types round-trip") {
        round_trips(HelloResult{1, "sandweave 0.1.0", {"log"}, {"version"}, std::nullopt});
        round_trips(HelloResult{1, "sandweave 0.1.0", {"log"}, {"version"}, create_option_keys()});
        round_trips(VersionResult{"0.1.0", 1, RuntimeInfo{"/r", "runsc version x", {}, {}}, {}});
        round_trips(VersionResult{
            "0.1.0", 1,
            RuntimeInfo{"/r", "runsc version x", std::vector<std::string>{"hidepid", "audit"}, {}},
            "abc"});
        RunResult missing;
        missing.exit_code = 127;
        missing.message = "command not found";
        round_trips(missing);
        RunResult started;
        started.exit_code = 0;
        started.handle = 4;
        started.pid = 17;
        round_trips(started);
        round_trips(ProcessList{{ProcessInfo{4, 17, "1001:1001", "sleep 9", "exited", true,
                                             "2026-12-01T12:00:00Z", 143}}});
        round_trips(KillResult{true});
        round_trips(SandboxList{{sample_view()}});
        round_trips(sample_view());
        round_trips(Removed{"sw-1"});
        round_trips(RemovedList{{"sw-1", "sw-2"}});
        audit::Status st;
        st.complete = true;
        st.events = 10;
        st.last_sequence = 10;
        st.bytes = 999;
        st.sandbox_id = "sw-1";
        st.sha256 = "ab";
        round_trips(st);
        SnapshotRecord snap;
        snap.id = "snap-1";
        snap.kind = SnapshotKind::memory;
        snap.source = "sw-1";
        snap.bytes = 4096;
        snap.spec.runtime.hidepid = 1;
        round_trips(snap);
        round_trips(SnapshotList{{snap}});
        PoolInfo pool;
        pool.name = "warm";
        pool.size = 2;
        pool.warm = 1;
        pool.request = {{"template", "base"}};
        pool.last_error = "boom";
        round_trips(pool);
        round_trips(PoolList{{pool}});
        round_trips(TemplateList{{TemplateEntry{"base", "/t/base.yaml", "busybox", true}}});
        // Through a controller: the workers that lack it; absent from a worker's own answer.
        round_trips(TemplateList{
            {TemplateEntry{"mine", "/t/mine.yaml", "", false, std::vector<std::string>{"w2"}}}});
        CHECK_FALSE(encode_value(TemplateEntry{"base", "/t/base.yaml", "busybox", true})
                        .contains("missing_on"));
        round_trips(
            TemplateShowResult{"x", {"x", "base"}, {{"image", "base"}}, {{"/image", "base"}}});
        round_trips(TemplateValidateResult{true, "/t.yaml", {"t"}});
        round_trips(Image{"base", "/s/images/base/rootfs", 1234, "2026-12-01T00:00:00Z"});
        round_trips(ImageList{{Image{"base", "/r", 1, "t"}}});
        Image imported{"web", "/r", 1, "t", std::string("oci:/x")};
        imported.created = "2024-01-02T03:04:05Z";
        imported.layers = 2;
        imported.config =
            ImageConfigInfo{{"A=b"}, "/work", "agent", "1001:1001", {"/bin/sh"}, {"x"}};
        round_trips(imported);
        round_trips(ImageImportParams{"web", "oci-archive:/x.tar", true});
        round_trips(DoctorResult{true, {Check{"runsc", true, true, "ok"}}});
    }

    TEST_CASE("params are strict and say what is wrong") {
        CHECK(usage_error([] { from_json<IdParams>(json::object()); }) == "params.id: missing");
        CHECK(usage_error([] {
                  from_json<IdParams>({{"id", 3}});
              }) == "params.id: expected a string, got an integer");
        CHECK(usage_error([] {
                  from_json<IdParams>({{"id", "x"}, {"idd", 1}});
              }) == "params: unknown parameter 'idd'");
        CHECK(usage_error([] {
                  from_json<RunParams>({{"id", "x"}, {"argv", "ls"}});
              }) == "params.argv: expected an array, got a string");
        CHECK(usage_error([] {
                  from_json<RunParams>({{"id", "x"}, {"argv", {"ls", 1}}});
              }) == "params.argv[1]: expected a string, got an integer");
        CHECK(usage_error([] {
                  from_json<CreateParams>({{"hidepid", 1.5}});
              }) == "params.hidepid: expected an integer, got a number");
        CHECK(usage_error([] {
                  from_json<CreateParams>({{"hidepid", 1e30}});
              }).find("hidepid") != std::string::npos);
        CHECK(usage_error([] {
                  from_json<CreateParams>({{"hidepid", 4294967296LL}});
              }) == "params.hidepid: expected an integer in range, got an integer");
        CHECK(usage_error([] {
                  from_json<CreateParams>({{"labels", {{"k", 1}}}});
              }) == "params.labels.k: expected a string, got an integer");
        CHECK(usage_error([] { from_json<IdParams>(json::array()); }) ==
              "params: expected an object, got an array");
        // null is the same as absent.
        CHECK(from_json<CreateParams>({{"template", nullptr}}).template_ref == std::nullopt);
    }

    TEST_CASE("results from a newer worker: unknown fields are ignored, known ones still checked") {
        // A worker one version ahead adds fields, also inside nested objects.
        json newer = {{"processes",
                       {{{"handle", 3},
                         {"pid", 9},
                         {"user", "0:0"},
                         {"command", "sleep 1"},
                         {"state", "running"},
                         {"detached", true},
                         {"started_at", "2026-12-01T00:00:00Z"},
                         {"cpu_ms", 12}}}},
                      {"next_page", "x"}};
        ProcessList l;
        decode_value(newer, l, "sandbox.ps result", Unknown::ignore);
        REQUIRE(l.processes.size() == 1);
        CHECK(l.processes[0].handle == 3);
        CHECK(l.processes[0].command == "sleep 1");
        // The same document as params is refused, naming the field.
        CHECK(usage_error([&] { from_json<ProcessList>(newer); }) ==
              "params.processes[0]: unknown parameter 'cpu_ms'");
        // A known field of the wrong type is still an error.
        json wrong = {{"exit_code", "0"}};
        CHECK(usage_error([&] {
                  RunResult r;
                  decode_value(wrong, r, "sandbox.run result", Unknown::ignore);
              }) == "sandbox.run result.exit_code: expected an integer, got a string");
    }

    TEST_CASE("values are checked in the library's words") {
        CreateParams c;
        c.hidepid = 3;
        CHECK(usage_error([&] { to_create_request(c); }) == "hidepid 3: expected 0, 1 or 2");
        c.hidepid = 2;
        c.user = "abc";
        CHECK(usage_error([&] { to_create_request(c); }).find("user 'abc'") == 0);
        c.user = "1001:1002";
        c.template_source = "client:/t.yaml";
        CHECK(usage_error([&] { to_create_request(c); }).find("only for an inline template") !=
              std::string::npos);
        c.template_source.reset();
        c.pool = "no/such";
        CHECK(usage_error([&] { to_create_request(c); }) ==
              "pool 'no/such': not a valid pool name");
        c.pool = "warm";
        CHECK(to_create_request(c).pool == "warm");
        c.name = "n";
        CHECK(usage_error([&] { to_create_request(c); }) == "pool members cannot be given a name");
        c.name.reset();
        c.pool.reset();
        auto req = to_create_request(c);
        CHECK(req.flags.user->uid == 1001);
        CHECK(req.flags.user->gid == 1002);
        CHECK(!req.template_given);
        RunParams r;
        r.id = "x";
        CHECK(to_run_request(r).argv.empty());  // the sandbox's own command (command_line)
        r.attach = 3;
        r.entrypoint = std::vector<std::string>{};
        CHECK(usage_error([&] { to_run_request(r); }).find("attach: takes no argv, entrypoint") ==
              0);
        r.attach.reset();
        r.entrypoint.reset();
        r.argv = {"true"};
        r.cwd = "tmp";
        CHECK(usage_error([&] { to_run_request(r); }).find("must be an absolute path") !=
              std::string::npos);
        r.cwd = "/tmp";
        r.timeout_ms = 0;
        CHECK(usage_error([&] { to_run_request(r); }).find("must be positive") !=
              std::string::npos);
        r.timeout_ms = 250;
        CHECK(to_run_request(r).timeout->count() == 250);
        for (const char* name : {"TERM", "SIGTERM"}) CHECK(parse_signal(json(name)) == 15);
        CHECK(parse_signal(json(9)) == 9);
        CHECK(parse_signal(json("9")) == 9);
        CHECK(usage_error([] { parse_signal(json("NOPE")); }).find("NOPE") != std::string::npos);
        CHECK(usage_error([] { parse_signal(json(0)); }).find("1 to 64") != std::string::npos);
    }

    TEST_CASE("the method table lists every documented method once, sorted") {
        const auto& names = method_names();
        CHECK(std::is_sorted(names.begin(), names.end()));
        CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
        for (const char* m :
             {"hello",          "version",         "sandbox.create",     "sandbox.run",
              "sandbox.ls",     "sandbox.inspect", "sandbox.terminate",  "sandbox.rm",
              "sandbox.prune",  "sandbox.ps",      "sandbox.kill",       "sandbox.wait",
              "run.stdin",      "run.signal",      "run.resize",         "run.cancel",
              "audit.export",   "audit.status",    "snapshot.create",    "snapshot.ls",
              "snapshot.rm",    "pool.create",     "pool.acquire",       "pool.ls",
              "pool.resize",    "pool.rm",         "batch.reserve",      "batch.release",
              "template.ls",    "template.show",   "template.validate",  "image.build",
              "image.ls",       "image.recipes",   "image.rm",           "image.import",
              "image.inspect",  "doctor",          "desktop.screenshot", "desktop.click",
              "desktop.move",   "desktop.type",    "desktop.key",        "sandbox.cp_in",
              "sandbox.cp_out", "sandbox.finish"})
            CHECK_MESSAGE(find_method(m) != nullptr, m);
        CHECK(names.size() == 47);
        try {
            check_params("sandbox.frob", json::object());
            FAIL("no error");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::not_found);
        }
        CHECK_NOTHROW(check_params("sandbox.run", {{"id", "x"}, {"argv", {"true"}}}));
        // No argv: the sandbox's own entrypoint and cmd (an error only when it has none).
        CHECK_NOTHROW(check_params("sandbox.run", {{"id", "x"}, {"argv", json::array()}}));
        CHECK_NOTHROW(check_params("sandbox.run", {{"id", "x"}, {"entrypoint", json::array()}}));
        CHECK_THROWS_AS(check_params("sandbox.run", {{"id", "x"}, {"entrypoint", "/bin/sh"}}),
                        Error);
        CHECK_THROWS_AS(check_params("sandbox.create", {{"hidepid", 7}}), Error);
    }
}
