// lib/core/helper: the one launcher for detached helpers. A helper runs in a
// session of its own, reparented away from us, with its stdio on a log and
// none of our descriptors; the launcher waits for its one readiness report (or
// its exec, or a timeout after which the helper's group is killed), never for
// the helper itself.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/helper.hpp"

using namespace sandweave;
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct HelperScratch {
    fs::path path;
    HelperScratch() {
        std::string tmpl = (fs::temp_directory_path() / "sandweave-helper-test.XXXXXX").string();
        REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
        path = tmpl;
    }
    ~HelperScratch() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

HelperSpec shell(const std::string& script) {
    HelperSpec s;
    s.argv = {"/bin/sh", "-c", script};
    s.timeout = std::chrono::seconds(20);
    return s;
}

pid_t parent_of(pid_t pid) {
    std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
    // "pid (comm) state ppid ..."; comm may contain spaces, the last ')' ends it.
    std::size_t close = stat.rfind(')');
    return static_cast<pid_t>(std::stol(stat.substr(close + 4)));
}

bool group_gone(pid_t group) {
    for (int i = 0; i < 200; ++i) {
        if (::kill(-group, 0) != 0) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
}

}  // namespace

TEST_SUITE("helper") {
    TEST_CASE("ready: the report's detail, a session of its own, reparented, not waited for") {
        auto t0 = Clock::now();
        HelperReport r = launch_helper(shell("echo \"ok $$\" >&3; exec 3>&-; exec sleep 2"));
        CHECK(seconds_since(t0) < 1.5);  // the report, not the helper's exit
        REQUIRE(r.outcome == HelperReport::Outcome::ready);
        CHECK(r.ok());
        pid_t helper = static_cast<pid_t>(std::stol(r.detail));
        CHECK(::getsid(helper) == r.group);
        CHECK(::getpgid(helper) == r.group);
        CHECK(helper != r.group);  // the session leader exited at once
        CHECK(parent_of(helper) != ::getpid());
        ::kill(helper, SIGKILL);
    }

    TEST_CASE("error: the message, lines and all; silent and garbled are told apart") {
        HelperReport failed = launch_helper(shell("printf 'error boom\\nsecond line\\n' >&3"));
        CHECK(failed.outcome == HelperReport::Outcome::failed);
        CHECK(failed.detail == "boom\nsecond line");
        CHECK_FALSE(failed.ok());

        HelperReport silent = launch_helper(shell("exit 3"));
        CHECK(silent.outcome == HelperReport::Outcome::silent);

        HelperReport garbled = launch_helper(shell("echo okay >&3"));
        CHECK(garbled.outcome == HelperReport::Outcome::garbled);
        CHECK(garbled.detail == "okay");

        HelperReport bare = launch_helper(shell("echo ok >&3"));
        CHECK(bare.outcome == HelperReport::Outcome::ready);
        CHECK(bare.detail.empty());
    }

    TEST_CASE("a helper that never reports is killed, with its group, at the timeout") {
        HelperSpec s = shell("sleep 30");  // sleep holds fd 3 open
        s.timeout = std::chrono::milliseconds(300);
        auto t0 = Clock::now();
        HelperReport r = launch_helper(s);
        CHECK(seconds_since(t0) < 5.0);
        CHECK(r.outcome == HelperReport::Outcome::timed_out);
        CHECK(group_gone(r.group));
    }

    TEST_CASE("exec readiness: ready once exec'd; a program that cannot run is an error") {
        HelperSpec s;
        s.argv = {"/bin/sleep", "3"};
        s.readiness = HelperSpec::Readiness::exec;
        auto t0 = Clock::now();
        HelperReport r = launch_helper(s);
        CHECK(seconds_since(t0) < 1.5);
        CHECK(r.outcome == HelperReport::Outcome::ready);
        ::kill(-r.group, SIGKILL);

        s.argv = {"/nonexistent/helper"};
        HelperReport missing = launch_helper(s);
        CHECK(missing.outcome == HelperReport::Outcome::failed);
        CHECK(missing.detail.find("/nonexistent/helper") != std::string::npos);

        s.argv = {"relative/helper"};
        CHECK_THROWS_AS(launch_helper(s), Error);
    }

    TEST_CASE("stdio: stdin empty, stdout and stderr appended to the log; none of our fds") {
        HelperScratch t;
        fs::path log = t.path / "helper.log";
        write_file_atomic(log, "earlier\n");
        // Not close-on-exec, and above 3: a careless spawn would pass them on.
        int p[2];
        REQUIRE(::pipe(p) == 0);
        int leaked[2] = {::fcntl(p[0], F_DUPFD, 50), ::fcntl(p[1], F_DUPFD, 50)};
        ::close(p[0]);
        ::close(p[1]);
        REQUIRE(leaked[0] >= 50);
        REQUIRE(leaked[1] >= 50);
        HelperSpec s = shell(
            "read x && echo \"stdin had $x\"; echo out; echo err >&2; "
            "ls /proc/$$/fd | tr '\\n' ' '; echo; echo ok >&3");
        s.log = log;
        HelperReport r = launch_helper(s);
        ::close(leaked[0]);
        ::close(leaked[1]);
        REQUIRE(r.ok());
        std::string text = read_file(log);
        CHECK(text.rfind("earlier\nout\nerr\n", 0) == 0);
        CHECK(text.find("stdin had") == std::string::npos);
        std::string fds = text.substr(text.find("err\n") + 4);
        CAPTURE(fds);
        CHECK(fds.find(" " + std::to_string(leaked[0]) + " ") == std::string::npos);
        CHECK(fds.find(" " + std::to_string(leaked[1]) + " ") == std::string::npos);
        CHECK(fds.rfind("0 1 2 3 ", 0) == 0);
    }

    TEST_CASE("the helper starts with an empty signal mask, whatever ours is") {
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGTERM);
        REQUIRE(::pthread_sigmask(SIG_BLOCK, &block, &old) == 0);
        HelperReport r =
            launch_helper(shell("echo \"ok $(grep '^SigBlk' /proc/$$/status | cut -f2)\" >&3"));
        ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
        REQUIRE(r.ok());
        CHECK(r.detail == "0000000000000000");
    }

    TEST_CASE("the helper starts with default dispositions: nothing we ignore") {
        // An ignored signal stays ignored across exec: the launcher resets
        // every disposition in the helper (a handler of ours must not run there
        // either, where the helper still shares our memory before its exec).
        struct sigaction ign {
        }, old{};
        ign.sa_handler = SIG_IGN;
        REQUIRE(::sigaction(SIGUSR1, &ign, &old) == 0);
        HelperReport r =
            launch_helper(shell("echo \"ok $(grep '^SigIgn' /proc/$$/status | cut -f2)\" >&3"));
        ::sigaction(SIGUSR1, &old, nullptr);
        REQUIRE(r.ok());
        CHECK((std::stoull(r.detail, nullptr, 16) & (1ull << (SIGUSR1 - 1))) == 0);
    }

    TEST_CASE("many helpers from many threads at once: each its report, no launcher disturbed") {
        // The launcher shares its memory with the helper until the exec, so
        // other threads go on meanwhile; every report must still be its own.
        std::vector<std::thread> threads;
        std::vector<std::string> details(8);
        for (std::size_t t = 0; t < details.size(); ++t)
            threads.emplace_back([&details, t] {
                for (int i = 0; i < 5; ++i) {
                    HelperReport r = launch_helper(shell("echo \"ok " + std::to_string(t) + "-" +
                                                         std::to_string(i) + "\" >&3"));
                    if (!r.ok() || r.detail != std::to_string(t) + "-" + std::to_string(i)) {
                        details[t] = "bad: " + r.detail;
                        return;
                    }
                }
                details[t] = "ok";
            });
        for (auto& th : threads) th.join();
        for (const auto& d : details) CHECK(d == "ok");
    }

    TEST_CASE("ReadinessReporter reports once, and a reporter without a pipe reports nowhere") {
        Pipe p = make_pipe();
        ReadinessReporter rep(std::move(p.write));
        CHECK(rep.active());
        rep.ready("1234");
        rep.error("too late");  // ignored: the first report stands
        CHECK_FALSE(rep.active());
        char buf[64] = {};
        ssize_t n = ::read(p.read.get(), buf, sizeof buf - 1);
        CHECK(std::string(buf, static_cast<std::size_t>(std::max<ssize_t>(n, 0))) == "ok 1234\n");
        CHECK(::read(p.read.get(), buf, sizeof buf) == 0);  // closed after the report

        ReadinessReporter nowhere;
        CHECK_FALSE(nowhere.active());
        CHECK_NOTHROW(nowhere.ready());
    }

    // HeldHelper: the helper starts now and waits on fd 4; it goes on at go()
    // and does nothing when the launcher drops it (a failed or killed create).
    TEST_CASE("held: nothing happens before go(); go() lets it run and reads its report") {
        HelperScratch t;
        fs::path mark = t.path / "went";
        // The byte from go() (nothing at EOF); only then the mark.
        HeldHelper h =
            HeldHelper::start(shell("[ \"$(head -c 1 <&4)\" = g ] || exit 0; exec 4<&-; touch " +
                                    mark.string() + "; echo ok went >&3"));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        CHECK_FALSE(fs::exists(mark));
        HelperReport r = h.go();
        REQUIRE(r.outcome == HelperReport::Outcome::ready);
        CHECK(r.detail == "went");
        CHECK(fs::exists(mark));
        CHECK_THROWS_AS(h.go(), Error);
    }

    TEST_CASE("held: dropped without go(), the helper reads EOF and never runs") {
        HelperScratch t;
        fs::path mark = t.path / "went";
        fs::path eof = t.path / "eof";
        {
            HeldHelper h =
                HeldHelper::start(shell("if [ \"$(head -c 1 <&4)\" = g ]; then touch " +
                                        mark.string() + "; else touch " + eof.string() + "; fi"));
        }
        for (int i = 0; i < 200 && !fs::exists(eof); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        CHECK(fs::exists(eof));
        CHECK_FALSE(fs::exists(mark));
    }

    TEST_CASE("held: go() to a helper that already died is its report, not a SIGPIPE") {
        HeldHelper h = HeldHelper::start(shell("exec 4<&-; echo 'error gave up' >&3"));
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        HelperReport r = h.go();
        CHECK(r.outcome == HelperReport::Outcome::failed);
        CHECK(r.detail == "gave up");
    }
}  // TEST_SUITE
