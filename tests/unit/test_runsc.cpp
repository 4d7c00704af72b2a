// lib/runsc: the argv sandweave hands gVisor's runtime, checked with a fake
// CommandRunner (no runsc, no root). Every call for a sandbox carries the same
// global flags; JSON output (state, list) is parsed, never scraped; runsc's own
// errors (read from --log-fd) become exit 127/126 and clear messages.
#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "fixtures.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/runtime/runsc.hpp"

using namespace sandweave;
using sandweave::test::FakeRunner;
using sandweave::test::TempDir;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::vector<std::string> global = {"--root=/state/runsc", "--platform=ptrace",
                                         "--network=none"};

// The global flags appear, in order and contiguous, before the subcommand.
bool carries_globals(const std::vector<std::string>& argv, const std::string& subcommand) {
    auto sub = std::find(argv.begin() + 1, argv.end(), subcommand);
    if (sub == argv.end()) return false;
    auto it = std::search(argv.begin() + 1, sub, global.begin(), global.end());
    return it != sub;
}

// The arguments after the subcommand.
std::vector<std::string> after(const std::vector<std::string>& argv,
                               const std::string& subcommand) {
    auto sub = std::find(argv.begin() + 1, argv.end(), subcommand);
    REQUIRE(sub != argv.end());
    return std::vector<std::string>(sub + 1, argv.end());
}

// One line of runsc's --log-fd output, keys in runsc's order.
std::string log_line(const std::string& msg, const std::string& level = "error") {
    return "{\"msg\":" + json(msg).dump() + ",\"level\":\"" + level +
           "\",\"time\":\"2024-01-01T00:00:00.123Z\"}\n";
}

}  // namespace

TEST_SUITE("runsc") {
    TEST_CASE("flags_for: root, platform, network, and the pod init config only when given") {
        CHECK(Runsc::flags_for("/state/runsc", "ptrace", "none", std::nullopt) == global);
        auto with_audit = Runsc::flags_for("/state/runsc", "systrap", "none",
                                           fs::path("/state/sb/audit/pod-init.json"));
        CHECK(with_audit == std::vector<std::string>{
                                "--root=/state/runsc", "--platform=systrap", "--network=none",
                                "--pod-init-config=/state/sb/audit/pod-init.json"});
    }

    TEST_CASE("every call carries the same global flags after the binary") {
        FakeRunner fake;
        TempDir t("runsc");
        Runsc runsc(fake, "/opt/runsc", global);
        fake.reply(0);                                     // run
        fake.reply(0, R"({"type":"stats","id":"sw-1"})");  // events --stats
        fake.reply(0, "[]");                               // list
        fake.reply(0);                                     // kill
        fake.reply(0);                                     // delete
        fake.reply(0);                                     // exec
        runsc.run_detached("sw-1", t.path / "bundle", t.path / "console.log");
        runsc.stats("sw-1");
        runsc.list();
        runsc.kill("sw-1", SIGTERM);
        runsc.remove("sw-1", true);
        runsc.exec_attached("sw-1", ExecRequest{{"true"}, {}, "/", {}}, t.path, AttachOptions{});

        REQUIRE(fake.calls.size() == 6u);
        const char* subs[] = {"run", "events", "list", "kill", "delete", "exec"};
        for (std::size_t i = 0; i < fake.calls.size(); ++i) {
            const auto& argv = fake.calls[i].argv;
            CAPTURE(subs[i]);
            CHECK(argv.at(0) == "/opt/runsc");
            CHECK(carries_globals(argv, subs[i]));
        }
    }

    TEST_CASE(
        "run --detach: bundle and id, runsc output to the console log, errors from --log-fd") {
        FakeRunner fake;
        TempDir t("runsc");
        Runsc runsc(fake, "/opt/runsc", global);
        runsc.run_detached("sw-abc", t.path / "bundle", t.path / "console.log");
        REQUIRE(fake.calls.size() == 1u);
        const Command& c = fake.calls[0];
        CHECK(after(c.argv, "run") == std::vector<std::string>{"--detach", "--bundle",
                                                               (t.path / "bundle").string(),
                                                               "sw-abc"});
        // Launched detached (under the shim), runsc's and the sandbox's output to the
        // console log, runsc's own errors on fd 3; bounded in time.
        REQUIRE(fake.console_logs.size() == 1u);
        CHECK(fake.console_logs[0] == t.path / "console.log");
        CHECK(std::count(c.argv.begin(), c.argv.end(), "--log-fd=3") == 1);
        CHECK(c.timeout.has_value());

        fake.reply(1, "", log_line("starting container: creating sandbox: boom"));
        try {
            runsc.run_detached("sw-abc", t.path / "bundle", t.path / "console.log");
            FAIL("a failed runsc run did not throw");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::runtime);
            CHECK(std::string(e.what()).find("boom") != std::string::npos);
        }
    }

    TEST_CASE("state: read from runsc's state file, no runsc process; a dead sandbox is stopped") {
        TempDir t("runsc-state");
        FakeRunner fake;
        Runsc runsc(fake, "/opt/runsc", {"--root=" + t.path.string(), "--network=none"});
        CHECK_FALSE(runsc.state("sw-1").has_value());  // no file: no container

        fs::path file = t.path / "sw-1_sandbox:sw-1.state";
        auto write_state = [&](const std::string& status, pid_t pid) {
            write_file_atomic(file, json{{"id", "sw-1"},
                                         {"status", status},
                                         {"goferPid", 77},
                                         {"sandbox", {{"id", "sw-1"}, {"pid", pid}}}}
                                        .dump());
        };
        write_state("running", ::getpid());
        auto st = runsc.state("sw-1");
        REQUIRE(st);
        CHECK(st->status == "running");
        CHECK(st->pid == ::getpid());
        auto files = runsc.container_files("sw-1");
        REQUIRE(files);
        CHECK(files->gofer_pid == 77);
        CHECK(files->lock_file == t.path / "sw-1_sandbox:sw-1.lock");
        CHECK(fake.calls.empty());

        // A sandbox process that is gone (a reaped child's pid): stopped, as runsc says.
        pid_t child = ::fork();
        if (child == 0) ::_exit(0);
        REQUIRE(child > 0);
        ::waitpid(child, nullptr, 0);
        write_state("running", child);
        CHECK(runsc.state("sw-1")->status == "stopped");
        write_state("paused", ::getpid());
        CHECK(runsc.state("sw-1")->status == "paused");
        CHECK(fake.calls.empty());
    }

    TEST_CASE("state: a state file runsc is writing is left to runsc state") {
        TempDir t("runsc-state");
        FakeRunner fake;
        Runsc runsc(fake, "/opt/runsc", {"--root=" + t.path.string(), "--network=none"});
        write_file_atomic(t.path / "sw-1_sandbox:sw-1.state", R"({"id":"sw-1","stat)");
        CHECK_THROWS_AS(runsc.container_files("sw-1"), Error);
        fake.reply(
            0, R"({"ociVersion":"1.0.2-dev","id":"sw-1","status":"running","pid":4565,"bundle":"/b",
                      "rootfs":"/r","created":"2024-01-01T00:00:00Z","owner":""})");
        auto st = runsc.state("sw-1");
        REQUIRE(st);
        CHECK(st->status == "running");
        CHECK(st->pid == 4565);
        REQUIRE(fake.calls.size() == 1u);
        CHECK(after(fake.calls[0].argv, "state") == std::vector<std::string>{"sw-1"});

        CHECK_FALSE(runsc.state("sw-gone").has_value());  // no file: no runsc either
        CHECK(fake.calls.size() == 1u);
        fake.reply(0, "container is running, pid 12");
        CHECK_THROWS_AS(runsc.state("sw-1"), Error);
    }

    TEST_CASE("control_call: no sandbox listening is no answer") {
        FakeRunner fake;
        Runsc runsc(fake, "/opt/runsc", global);
        CHECK_FALSE(runsc
                        .control_call("sw-nosuchsandbox" + random_hex(8),
                                      "containerManager.ListTraceSessions")
                        .has_value());
        CHECK(fake.calls.empty());
    }

    TEST_CASE("list: --format=json parsed into id -> state; null and empty mean none") {
        FakeRunner fake;
        Runsc runsc(fake, "/opt/runsc", global);
        fake.reply(
            0,
            R"([{"id":"sw-a","status":"running","pid":10},{"id":"sw-b","status":"stopped","pid":0}])");
        auto l = runsc.list();
        CHECK(after(fake.calls[0].argv, "list") == std::vector<std::string>{"--format=json"});
        REQUIRE(l.size() == 2u);
        CHECK(l.at("sw-a").status == "running");
        CHECK(l.at("sw-a").pid == 10);
        CHECK(l.at("sw-b").status == "stopped");

        fake.reply(0, "null");
        CHECK(runsc.list().empty());
        fake.reply(0, "");
        CHECK(runsc.list().empty());
        fake.reply(0, "ID PID STATUS\nsw-a 10 running\n");
        CHECK_THROWS_AS(runsc.list(), Error);
        fake.reply(2, "");
        CHECK_THROWS_AS(runsc.list(), Error);
    }

    TEST_CASE("kill and delete arguments") {
        FakeRunner fake;
        Runsc runsc(fake, "/opt/runsc", global);
        runsc.kill("sw-1", SIGKILL, 42);
        runsc.kill("sw-1", SIGTERM);
        runsc.remove("sw-1", true);
        runsc.remove("sw-1", false);
        REQUIRE(fake.calls.size() == 4u);
        CHECK(after(fake.calls[0].argv, "kill") ==
              std::vector<std::string>{"--pid=42", "sw-1", "9"});
        CHECK(after(fake.calls[1].argv, "kill") == std::vector<std::string>{"sw-1", "15"});
        CHECK(after(fake.calls[2].argv, "delete") == std::vector<std::string>{"--force", "sw-1"});
        CHECK(after(fake.calls[3].argv, "delete") == std::vector<std::string>{"sw-1"});

        fake.reply(1);
        CHECK_THROWS_AS(runsc.kill("sw-1", SIGTERM), Error);
        fake.reply(1);
        CHECK_THROWS_AS(runsc.remove("sw-1", true), Error);
    }

    TEST_CASE("exec: a process spec with the user, cwd, env and argv; attached; cleaned up after") {
        FakeRunner fake;
        TempDir t("runsc");
        Runsc runsc(fake, "/opt/runsc", global);
        json seen;
        FakeRunner::Reply r;
        r.result.exit_status = 7;
        r.inspect = [&](const Command& c) {
            auto args = after(c.argv, "exec");
            auto p = std::find(args.begin(), args.end(), "--process");
            REQUIRE(p != args.end());
            seen = json::parse(read_file(*(p + 1)));
            CHECK(args.back() == "sw-1");
        };
        fake.replies.push_back(r);
        ExecRequest req{
            {"sh", "-c", "echo $A"}, UserSpec{1001, 1002}, "/tmp", {"A=1", "PATH=/bin"}};
        auto res = runsc.exec_attached("sw-1", req, t.path, AttachOptions{});
        CHECK(res.status == 7);
        CHECK_FALSE(res.timed_out);
        CHECK_FALSE(res.runtime_error.has_value());
        REQUIRE(fake.attached.size() == 1u);
        CHECK(fake.attached[0]);

        CHECK(seen.at("args") == json::array({"sh", "-c", "echo $A"}));
        CHECK(seen.at("user").at("uid") == 1001);
        CHECK(seen.at("user").at("gid") == 1002);
        CHECK(seen.at("cwd") == "/tmp");
        CHECK(seen.at("env") == json::array({"A=1", "PATH=/bin"}));
        CHECK(seen.at("terminal") == false);
        // A non-root user gets no capabilities and cannot gain privileges.
        CHECK(seen.at("capabilities").at("effective").empty());
        CHECK(seen.at("capabilities").at("bounding").empty());
        CHECK(seen.at("noNewPrivileges") == true);
        // The process file does not outlive the call.
        CHECK(fs::is_empty(t.path));
    }

    TEST_CASE("exec as root keeps Docker's default capabilities") {
        FakeRunner fake;
        TempDir t("runsc");
        Runsc runsc(fake, "/opt/runsc", global);
        json seen;
        FakeRunner::Reply r;
        r.result.exit_status = 0;
        r.inspect = [&](const Command& c) {
            auto args = after(c.argv, "exec");
            seen = json::parse(read_file(*(std::find(args.begin(), args.end(), "--process") + 1)));
        };
        fake.replies.push_back(r);
        runsc.exec_attached("sw-1", ExecRequest{{"id"}, UserSpec{0, 0}, "/", {}}, t.path,
                            AttachOptions{});
        const json& caps = seen.at("capabilities").at("effective");
        CHECK(std::find(caps.begin(), caps.end(), "CAP_CHOWN") != caps.end());
        CHECK(std::find(caps.begin(), caps.end(), "CAP_SYS_ADMIN") == caps.end());
    }

    TEST_CASE("exec status: runsc's own failures become 127 / 126 / 125, a signal 128+N") {
        FakeRunner fake;
        TempDir t("runsc");
        Runsc runsc(fake, "/opt/runsc", global);
        ExecRequest req{{"nosuch"}, {}, "/", {}};

        fake.reply(
            128, "",
            log_line(
                "executing processes for container: executing command \"nosuch\" in sandbox: "
                "error finding executable \"nosuch\" in PATH [/bin]: no such file or directory"));
        auto missing = runsc.exec_attached("sw-1", req, t.path, AttachOptions{});
        CHECK(missing.status == 127);
        REQUIRE(missing.runtime_error);
        CHECK(missing.runtime_error->find("nosuch") != std::string::npos);

        fake.reply(128, "", log_line("executing command \"/etc/passwd\": permission denied"));
        CHECK(runsc.exec_attached("sw-1", req, t.path, AttachOptions{}).status == 126);

        // The last error wins over earlier log lines.
        fake.reply(128, "", log_line("debug chatter", "debug") + log_line("something else broke"));
        auto other = runsc.exec_attached("sw-1", req, t.path, AttachOptions{});
        CHECK(other.status == 125);
        CHECK(other.runtime_error == std::optional<std::string>("something else broke"));

        // A message with braces in it is still read whole (JSON parsed per line, not scraped).
        fake.reply(128, "",
                   log_line("invalid process spec {\"args\": []}: no such file or directory"));
        auto braces = runsc.exec_attached("sw-1", req, t.path, AttachOptions{});
        CHECK(braces.status == 127);
        CHECK(braces.runtime_error ==
              std::optional<std::string>(
                  "invalid process spec {\"args\": []}: no such file or directory"));

        // The command itself exiting 128 (no runsc error in the log) is passed through.
        fake.reply(128);
        auto own = runsc.exec_attached("sw-1", req, t.path, AttachOptions{});
        CHECK(own.status == 128);
        CHECK_FALSE(own.runtime_error.has_value());

        FakeRunner::Reply sig;
        sig.result.term_signal = SIGKILL;
        fake.replies.push_back(sig);
        CHECK(runsc.exec_attached("sw-1", req, t.path, AttachOptions{}).status == 137);
    }

    TEST_CASE("find_runsc: an explicit runsc that is not executable is a runtime error (exit 5)") {
        try {
            find_runsc(std::string("/nonexistent/runsc"));
            FAIL("find_runsc accepted a missing binary");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::runtime);
            CHECK(std::string(e.what()).find("/nonexistent/runsc") != std::string::npos);
        }
        CHECK_THROWS_AS(find_runsc(std::string("/etc/passwd")), Error);
    }

    TEST_CASE("version is the first line of runsc --version, without global flags") {
        FakeRunner fake;
        Runsc runsc(fake, "/opt/runsc", global);
        fake.reply(0, "runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n");
        CHECK(runsc.version() == "runsc version 0.0~20221219.0");
        CHECK(fake.calls[0].argv == std::vector<std::string>{"/opt/runsc", "--version"});
        fake.reply(1);
        try {
            runsc.version();
            FAIL("a failing --version did not throw");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::runtime);
        }
    }

    TEST_CASE("restore, checkpoint, pause and resume: the snapshot calls, with the globals") {
        FakeRunner fake;
        TempDir t;
        Runsc runsc(fake, "/opt/runsc", global);
        runsc.checkpoint("sw-1", t.path / "image");
        runsc.pause("sw-1");
        runsc.resume("sw-1");
        runsc.restore_detached("sw-1", t.path / "bundle", t.path / "image", t.path / "console.log");
        REQUIRE(fake.calls.size() == 4u);
        CHECK(carries_globals(fake.calls[0].argv, "checkpoint"));
        CHECK(after(fake.calls[0].argv, "checkpoint") ==
              std::vector<std::string>{"--image-path", (t.path / "image").string(), "sw-1"});
        CHECK(after(fake.calls[1].argv, "pause") == std::vector<std::string>{"sw-1"});
        CHECK(after(fake.calls[2].argv, "resume") == std::vector<std::string>{"sw-1"});
        CHECK(carries_globals(fake.calls[3].argv, "restore"));
        CHECK(after(fake.calls[3].argv, "restore") ==
              std::vector<std::string>{"--detach", "--image-path", (t.path / "image").string(),
                                       "--bundle", (t.path / "bundle").string(), "sw-1"});
        REQUIRE(fake.console_logs.size() == 1u);  // detached, like run
        CHECK(std::count(fake.calls[3].argv.begin(), fake.calls[3].argv.end(), "--log-fd=3") == 1);

        // A refusal is a runtime error (exit 5) saying which call failed.
        for (const char* sub : {"checkpoint", "pause", "resume"}) {
            CAPTURE(sub);
            fake.reply(1);
            try {
                if (std::string(sub) == "checkpoint") runsc.checkpoint("sw-1", t.path / "image");
                if (std::string(sub) == "pause") runsc.pause("sw-1");
                if (std::string(sub) == "resume") runsc.resume("sw-1");
                FAIL("a failing runsc call did not throw");
            } catch (const Error& e) {
                CHECK(e.code() == ErrorCode::runtime);
                CHECK(std::string(e.what()).find(std::string("runsc ") + sub) != std::string::npos);
            }
        }
    }

    TEST_CASE("run_to_exit: a foreground run, output to a file, bounded in time") {
        FakeRunner fake;
        TempDir t;
        Runsc runsc(fake, "/opt/runsc", global);
        fake.reply(3);
        auto r = runsc.run_to_exit("swprobe-1", t.path / "bundle", t.path / "probe.log",
                                   std::chrono::seconds(60));
        CHECK(r.exit_status == 3);
        REQUIRE(fake.calls.size() == 1u);
        const Command& c = fake.calls[0];
        CHECK(carries_globals(c.argv, "run"));
        CHECK(after(c.argv, "run") ==
              std::vector<std::string>{"--bundle", (t.path / "bundle").string(), "swprobe-1"});
        CHECK(fake.console_logs.empty());  // not detached: no shim
        CHECK(c.out == Command::Stdio::file);
        CHECK(c.err == Command::Stdio::file);
        CHECK(c.out_file == t.path / "probe.log");
        CHECK(c.err_file == t.path / "probe.log");
        CHECK(c.timeout == std::chrono::milliseconds(60000));
    }

}  // TEST_SUITE
