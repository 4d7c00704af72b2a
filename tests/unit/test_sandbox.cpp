// lib/sandbox/sandbox: the lifecycle against a fake runtime (ScriptedRunner)
// and a fake host (FakeHost). A create that fails at any step leaves nothing
// behind: no directory, no name, no mount, no leftover process, no audit
// writer. A create that works mounts, launches and records; rm undoes it all.
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/audit/state.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/sandbox/sandbox.hpp"
#include "tests/unit/fake_context.hpp"
#include "tests/unit/fixtures.hpp"

using namespace sandweave;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string trace_metadata_text() {
    return read_file(fs::path(SANDWEAVE_TEST_DATA) / "audit/runsc_trace_metadata_20221219.txt");
}

// A runtime that answers --version, trace metadata and state (no such
// container unless `running` says otherwise), and deletes what it is asked to.
void fake_runtime(FakeContext& f, std::function<bool(const std::string&)> running = {}) {
    f.runner.respond = [running](const Command& c) {
        std::string sub = ScriptedRunner::subcommand(c);
        if (sub == "--version") return ScriptedRunner::ok("runsc version fake\nspec: 1.0\n");
        if (sub == "trace") return ScriptedRunner::ok(trace_metadata_text());
        if (sub == "state") {
            const std::string& id = c.argv.back();
            if (running && running(id))
                return ScriptedRunner::ok(
                    json{{"id", id}, {"status", "running"}, {"pid", 7}}.dump());
            return ScriptedRunner::fail(1, "container does not exist");
        }
        if (sub == "delete") return ScriptedRunner::ok();
        return ScriptedRunner::fail(1, "unexpected command " + sub);
    };
}

// The value after `flag` in argv.
std::string arg_after(const Command& c, const std::string& flag) {
    for (std::size_t i = 0; i + 1 < c.argv.size(); ++i)
        if (c.argv[i] == flag) return c.argv[i + 1];
    return "";
}

using sandweave::test::code_of;

// Nothing of a create is left: the store, the names, the mounts.
void check_nothing_left(FakeContext& f, const std::string& name) {
    CHECK(fs::is_empty(f.store.objects(sandbox_kind).path()));  // no directory, no graveyard
    CHECK(f.store.list().empty());
    std::error_code ec;
    CHECK_FALSE(fs::is_symlink(fs::symlink_status(f.root / "names" / name, ec)));
    for (const auto& e : fs::directory_iterator(f.root / "names"))  // locks (.*) are no names
        CHECK(e.path().filename().string()[0] == '.');
    CHECK(f.host.mounted.empty());
}

CreateRequest named(const std::string& name, bool audit) {
    CreateRequest req;
    req.name = name;
    req.flags.audit = audit;
    return req;
}

}  // namespace

TEST_SUITE("sandbox") {
    TEST_CASE("create: mounts the overlay, launches runsc, records running; rm undoes it") {
        FakeContext f;
        f.install_image();
        std::string launched;
        fake_runtime(f, [&](const std::string& id) { return id == launched; });
        f.runner.launch = [&](const Command& c, const fs::path&) {
            launched = c.argv.back();
            return LaunchResult{0, ""};
        };

        SandboxRecord r = create_sandbox(f.ctx, named("web", false));
        CHECK(r.state == SandboxState::running);
        CHECK(r.id == launched);
        CHECK(f.store.resolve_id("web") == r.id);
        fs::path dir = f.store.sandbox_dir(r.id);
        REQUIRE(f.host.mount_calls.size() == 1u);
        CHECK(f.host.mount_calls[0].lower == f.store.images_dir() / "base/rootfs");
        CHECK(f.host.mount_calls[0].upper == dir / "upper");
        CHECK(f.host.mount_calls[0].work == dir / "work");
        CHECK(f.host.mounted == std::set<fs::path>{dir / "rootfs"});
        REQUIRE(f.runner.count("run") == 1u);
        CHECK(fs::exists(dir / "bundle/config.json"));
        CHECK(f.store.load(r.id).state == SandboxState::running);
        CHECK(f.host.cgroup_rejoins == 1);  // the cgroup lock warmed once, before runsc

        // A process naming the sandbox's bundle that runsc has no record of
        // (what a launch that failed half-way leaves).
        f.host.processes.push_back({4242, "runsc-gofer --bundle " + (dir / "bundle").string()});
        f.host.processes.push_back({4343, "unrelated"});
        remove_sandbox(f.ctx, "web");
        CHECK(f.runner.count("delete") == 0u);  // runsc has no such container
        CHECK(f.host.kill_calls == std::vector<std::pair<pid_t, int>>{{4242, SIGKILL}});
        CHECK(f.host.processes.size() == 1u);  // the unrelated one lives
        check_nothing_left(f, "web");
        CHECK(code_of([&] { inspect_sandbox(f.ctx, "web"); }) == ErrorCode::not_found);
    }

    TEST_CASE("terminate: runsc's container destroyed without a runsc process; rm adds nothing") {
        FakeContext f;
        f.install_image();
        fake_runtime(f);
        f.runner.launch = [&](const Command&, const fs::path&) { return LaunchResult{0, ""}; };
        SandboxRecord r = create_sandbox(f.ctx, named("job", false));
        // runsc's record of the container and its processes, as runsc leaves them.
        std::string bundle = (f.store.sandbox_dir(r.id) / "bundle").string();
        fs::path state_file = f.store.runsc_root() / (r.id + "_sandbox:" + r.id + ".state");
        fs::path lock_file = f.store.runsc_root() / (r.id + "_sandbox:" + r.id + ".lock");
        make_dirs(f.store.runsc_root(), 0700);
        write_file_atomic(lock_file, "");
        write_file_atomic(state_file, json{{"id", r.id},
                                           {"status", "running"},
                                           {"goferPid", 4141},
                                           {"sandbox", {{"id", r.id}, {"pid", ::getpid()}}}}
                                          .dump());
        f.host.processes.push_back({::getpid(), "runsc-sandbox boot --bundle=" + bundle});
        f.host.processes.push_back({4141, "runsc-gofer gofer --bundle " + bundle});
        f.host.processes.push_back({4343, "unrelated"});
        f.host.cgroups.insert(r.id);

        SandboxRecord stopped = terminate_sandbox(f.ctx, "job");
        CHECK(stopped.state == SandboxState::stopped);
        CHECK(f.store.load(r.id).state == SandboxState::stopped);
        CHECK(f.runner.count("delete") == 0u);
        CHECK(f.runner.count("state") == 0u);
        CHECK(f.host.kill_calls ==
              std::vector<std::pair<pid_t, int>>{{::getpid(), SIGKILL}, {4141, SIGKILL}});
        CHECK(f.host.cgroups.empty());
        CHECK_FALSE(fs::exists(state_file));
        CHECK_FALSE(fs::exists(lock_file));
        CHECK(f.host.mounted.empty());

        remove_sandbox(f.ctx, "job");
        CHECK(f.host.kill_calls.size() == 2u);
        CHECK(f.runner.count("delete") == 0u);
        CHECK(f.host.processes.size() == 1u);  // the unrelated one lives
        check_nothing_left(f, "job");
    }

    TEST_CASE("create rollback: runsc fails after the audit writer started") {
        FakeContext f;
        f.install_image();
        fake_runtime(f);
        pid_t writer = 0;
        std::uint64_t writer_start = 0;
        f.runner.launch = [&](const Command& c, const fs::path&) {
            fs::path bundle = arg_after(c, "--bundle");
            fs::path dir = bundle.parent_path();
            // What got this far: the mount, the bundle, a running writer.
            CHECK(f.host.is_mounted(dir / "rootfs"));
            CHECK(fs::exists(bundle / "config.json"));
            json st = json::parse(read_file(dir / "audit/writer-state.json"));
            writer = st.at("pid").get<pid_t>();
            writer_start = audit::process_start_time(writer);
            // A timed-out `runsc run` leaves its gofer behind, out of runsc's sight.
            f.host.processes.push_back({4242, "runsc-gofer --bundle " + bundle.string()});
            return LaunchResult{
                1, R"({"msg":"creating container: cannot create sandbox: boom","level":"error"})"};
        };

        std::string msg;
        CHECK(code_of([&] { create_sandbox(f.ctx, named("audited", true)); }, &msg) ==
              ErrorCode::runtime);
        CHECK(msg.find("creating sandbox sw-") == 0);
        CHECK(msg.find("boom") != std::string::npos);
        REQUIRE(writer > 0);
        CHECK(writer_start != 0);
        // Stopped by the rollback before create returned (a writer left behind
        // would notice its directory is gone only up to a second later).
        CHECK(audit::process_start_time(writer) != writer_start);
        CHECK(f.host.kill_calls == std::vector<std::pair<pid_t, int>>{{4242, SIGKILL}});
        CHECK(f.host.unmount_calls.size() == 1u);
        check_nothing_left(f, "audited");
        // The name is free again.
        f.runner.launch = [](const Command&, const fs::path&) { return LaunchResult{0, ""}; };
        CHECK(create_sandbox(f.ctx, named("audited", false)).name == "audited");
    }

    TEST_CASE("create rollback: the overlay mount fails") {
        FakeContext f;
        f.install_image();
        fake_runtime(f);
        f.host.fail_mount =
            Error(ErrorCode::general, "mount overlay on x: Operation not permitted");

        std::string msg;
        CHECK(code_of([&] { create_sandbox(f.ctx, named("nomount", true)); }, &msg) ==
              ErrorCode::general);
        CHECK(msg.find("Operation not permitted") != std::string::npos);
        CHECK(f.host.mount_calls.size() == 1u);
        CHECK(f.runner.count("run") == 0u);   // runsc never started
        CHECK(f.host.unmount_calls.empty());  // nothing was mounted
        check_nothing_left(f, "nomount");
    }

    TEST_CASE("create rollback: a missing image is built, and a failed build leaves nothing") {
        FakeContext f;  // no image installed: "base" is built from /bin/busybox first
        fake_runtime(f);
        f.runner.respond = [inner = f.runner.respond](const Command& c) {
            if (fs::path(c.argv[0]).filename() == "busybox")
                return ScriptedRunner::fail(1, "busybox: cannot list applets");
            return inner(c);
        };
        CHECK_THROWS_AS(create_sandbox(f.ctx, named("noimage", false)), Error);
        CHECK(f.host.mount_calls.empty());
        check_nothing_left(f, "noimage");
    }

    TEST_CASE("a taken name is refused before anything is made") {
        FakeContext f;
        f.install_image();
        fake_runtime(f);
        f.runner.launch = [](const Command&, const fs::path&) { return LaunchResult{0, ""}; };
        SandboxRecord first = create_sandbox(f.ctx, named("twin", false));
        CHECK(code_of([&] { create_sandbox(f.ctx, named("twin", false)); }) == ErrorCode::usage);
        CHECK(f.host.mount_calls.size() == 1u);
        CHECK(f.store.list().size() == 1u);
        CHECK(f.store.resolve_id("twin") == first.id);
    }

    TEST_CASE(
        "rm removes the host cgroups and the runtime lock a runsc killed in its create left") {
        FakeContext f;
        f.install_image();
        fake_runtime(f);  // runsc knows no container: it died before its state
        f.runner.launch = [](const Command&, const fs::path&) { return LaunchResult{0, ""}; };
        SandboxRecord r = create_sandbox(f.ctx, named("killed", false));
        fs::path runsc_root = f.store.runsc_root();
        make_dirs(runsc_root);
        fs::path lock = runsc_root / (r.id + "_sandbox:" + r.id + ".lock");
        fs::path other = runsc_root / "sw-0123456789ab_sandbox:sw-0123456789ab.lock";
        write_file_atomic(lock, "");
        write_file_atomic(other, "");
        f.host.cgroups = {r.id, "sw-0123456789ab"};
        // A child runsc started after the first look: found on a later one.
        f.host.processes.push_back(
            {51, "runsc-sandbox boot --bundle=" + (f.store.sandbox_dir(r.id) / "bundle").string()});
        remove_sandbox(f.ctx, "killed");
        CHECK(f.host.cgroup_removals == std::vector<std::string>{r.id});
        CHECK(f.host.cgroups == std::set<std::string>{"sw-0123456789ab"});
        CHECK_FALSE(fs::exists(lock));
        CHECK(fs::exists(other));  // another sandbox's
        CHECK(f.host.kill_calls == std::vector<std::pair<pid_t, int>>{{51, SIGKILL}});
        check_nothing_left(f, "killed");
    }

    TEST_CASE("runtime leftovers: ids known dead at once, unknown ones only when stale") {
        FakeContext f;
        fs::path runsc_root = f.store.runsc_root();
        make_dirs(runsc_root);
        auto lock = [&](const std::string& id) {
            return runsc_root / (id + "_sandbox:" + id + ".lock");
        };
        // Its sandbox is gone from the store: a runsc killed in its create.
        const std::string orphan = "sw-aaaaaaaaaaaa";
        write_file_atomic(lock(orphan), "");
        f.host.cgroups.insert(orphan);  // not stale yet: too young for the age guard
        f.host.processes.push_back(
            {61, "runsc-gofer --bundle " + (f.store.sandbox_dir(orphan) / "bundle").string()});
        // A runtime with its state: runsc's own, not a leftover.
        const std::string live = "sw-bbbbbbbbbbbb";
        write_file_atomic(lock(live), "");
        write_file_atomic(runsc_root / (live + "_sandbox:" + live + ".state"), "{}");
        // A sandbox this store still has (its reservation): rm and prune's.
        const std::string reserved = "sw-cccccccccccc";
        make_dirs(f.store.sandbox_dir(reserved));
        write_file_atomic(lock(reserved), "");
        // Empty and old: of a state directory gone from this host, or not a
        // sandbox's at all.
        f.host.stale = {"sw-dddddddddddd", reserved, "sw-bench-episodes-1", "sw-DDDDDDDDDDDD"};

        auto found = runtime_leftovers(f.ctx);
        std::sort(found.begin(), found.end());
        CHECK(found == std::vector<std::string>{orphan, "sw-dddddddddddd"});

        CHECK(sweep_runtime_leftovers(f.ctx) == 2);
        CHECK_FALSE(fs::exists(lock(orphan)));
        CHECK(fs::exists(lock(live)));
        CHECK(fs::exists(lock(reserved)));
        CHECK(f.host.cgroups.count(orphan) == 0u);
        CHECK(f.host.kill_calls == std::vector<std::pair<pid_t, int>>{{61, SIGKILL}});
        CHECK(f.host.stale ==
              std::set<std::string>{reserved, "sw-bench-episodes-1", "sw-DDDDDDDDDDDD"});
        CHECK(runtime_leftovers(f.ctx).empty());
    }
    TEST_CASE("retention: only Weave's sandboxes stopped longer than the retention are removed") {
        FakeContext f;
        f.install_image();
        fake_runtime(f);
        f.runner.launch = [&](const Command&, const fs::path&) { return LaunchResult{0, ""}; };
        auto make = [&](const std::string& name, bool of_a_job) {
            CreateRequest req = named(name, false);
            if (of_a_job) req.flags.labels["slurm_job"] = "42";
            return create_sandbox(f.ctx, req).id;
        };
        auto stop = [&](const std::string& id, const std::string& at) {
            terminate_sandbox(f.ctx, id);
            SandboxRecord r = f.store.load(id);
            r.stopped_at = at;
            f.store.save(r);
        };
        const std::string old_job = make("old-job", true), young_job = make("young-job", true),
                          old_local = make("old-local", false), live_job = make("live-job", true);
        stop(old_job, "2026-12-01T09:00:00Z");
        stop(young_job, "2026-12-01T10:30:00Z");
        stop(old_local, "2026-12-01T09:00:00Z");
        // 2026-12-01T11:00:00Z: old-job stopped 2 h ago, young-job 30 min ago.
        const auto now = std::chrono::system_clock::from_time_t(1796122800);
        // With a retention longer than anything's age, nothing goes.
        CHECK(remove_retained_job_sandboxes(f.ctx, std::chrono::hours(3), now).empty());
        CHECK(remove_retained_job_sandboxes(f.ctx, std::chrono::hours(1), now) ==
              std::vector<std::string>{old_job});
        CHECK_FALSE(fs::exists(f.store.sandbox_dir(old_job)));
        for (const auto& kept : {young_job, old_local, live_job})
            CHECK(fs::exists(f.store.sandbox_dir(kept)));
    }

    TEST_CASE("runtime leftovers: runsc's state of a sandbox the store does not have") {
        FakeContext f;
        fs::path runsc_root = f.store.runsc_root();
        make_dirs(runsc_root);
        auto file = [&](const std::string& id, const char* ext) {
            return runsc_root / (id + "_sandbox:" + id + ext);
        };
        auto state = [](pid_t pid) {
            return "{\"status\":\"creating\",\"sandbox\":{\"pid\":" + std::to_string(pid) +
                   "},\"goferPid\":0}";
        };
        // A runsc killed after it wrote its state: its sandbox process is gone.
        const std::string dead = "sw-aaaaaaaaaaaa";
        write_file_atomic(file(dead, ".state"), state(0));
        write_file_atomic(file(dead, ".lock"), "");
        // Its sandbox process still there, naming its bundle: an orphan to kill.
        const std::string orphan = "sw-bbbbbbbbbbbb";
        write_file_atomic(file(orphan, ".state"), state(::getpid()));
        f.host.processes.push_back(
            {::getpid(),
             "runsc-sandbox boot --bundle=" + (f.store.sandbox_dir(orphan) / "bundle").string()});
        // A live container that is not one of ours (its process names no
        // bundle of this store): left alone.
        const std::string foreign = "sw-cccccccccccc";
        write_file_atomic(file(foreign, ".state"), state(::getppid()));
        write_file_atomic(file(foreign, ".lock"), "");

        auto found = runtime_leftovers(f.ctx);
        std::sort(found.begin(), found.end());
        CHECK(found == std::vector<std::string>{dead, orphan});
        CHECK(sweep_runtime_leftovers(f.ctx) == 2);
        CHECK_FALSE(fs::exists(file(dead, ".state")));
        CHECK_FALSE(fs::exists(file(dead, ".lock")));
        CHECK_FALSE(fs::exists(file(orphan, ".state")));
        CHECK(f.host.kill_calls == std::vector<std::pair<pid_t, int>>{{::getpid(), SIGKILL}});
        CHECK(fs::exists(file(foreign, ".state")));
        CHECK(fs::exists(file(foreign, ".lock")));
        CHECK(runtime_leftovers(f.ctx).empty());
    }
}  // TEST_SUITE
