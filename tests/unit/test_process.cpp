// lib/process: the LocalRunner. Output larger than a pipe buffer on both streams
// never deadlocks, exit status and signals are reported Docker-style, timeouts
// kill, argv is never interpreted by a shell, and signals sent to us while a
// command is attached reach the command.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "fixtures.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/process.hpp"

using namespace sandweave;
using sandweave::test::TempDir;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

Command sh(const std::string& script) {
    Command c;
    c.argv = {"/bin/sh", "-c", script};
    c.timeout = 60s;  // a deadlock shows up as a failed check, not a hung test
    return c;
}

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Sends `sig` to this process from another thread after `delay`; the thread
// blocks the signal itself so only run_attached's signalfd can take it.
std::thread signal_later(int sig, std::chrono::milliseconds delay) {
    return std::thread([sig, delay] {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, nullptr);
        std::this_thread::sleep_for(delay);
        ::kill(::getpid(), sig);
    });
}

}  // namespace

TEST_SUITE("process") {
    TEST_CASE("captures more than a pipe buffer on stdout and stderr at once") {
        LocalRunner runner;
        // stderr first: a runner that drained only stdout would deadlock here.
        auto r = runner.run(
            sh("yes 0123456789abcdef | head -c 300000 >&2; yes abcdefghijklmnop | head -c 2097152; "
               "echo; echo last"));
        CHECK_FALSE(r.timed_out);
        CHECK(r.ok());
        CHECK(r.err.size() == 300000u);
        CHECK(r.out.size() == 2097152u + 1 + 5);
        CHECK(r.out.substr(r.out.size() - 5) == "last\n");
        CHECK(r.out.substr(0, 17) == "abcdefghijklmnop\n");
    }

    TEST_CASE("exit status, signal and the Docker-style status") {
        LocalRunner runner;
        auto ok = runner.run(sh("exit 0"));
        CHECK(ok.ok());
        CHECK(ok.shell_status() == 0);

        auto three = runner.run(sh("echo reason >&2; exit 3"));
        CHECK_FALSE(three.ok());
        CHECK(three.exit_status == 3);
        CHECK(three.term_signal == 0);
        CHECK(three.shell_status() == 3);
        CHECK(three.describe() == "exit status 3: reason");

        auto killed = runner.run(sh("kill -9 $$"));
        CHECK_FALSE(killed.ok());
        CHECK(killed.term_signal == SIGKILL);
        CHECK(killed.shell_status() == 137);
        CHECK(killed.describe().find("signal") != std::string::npos);

        auto term = runner.run(sh("kill -TERM $$"));
        CHECK(term.shell_status() == 143);
    }

    TEST_CASE("a timeout kills the command and says so") {
        LocalRunner runner;
        Command c;
        c.argv = {"sleep", "30"};
        c.timeout = 300ms;
        auto t0 = Clock::now();
        auto r = runner.run(c);
        CHECK(seconds_since(t0) < 5.0);
        CHECK(r.timed_out);
        CHECK_FALSE(r.ok());
        CHECK(r.term_signal == SIGKILL);
        CHECK(r.describe().find("timed out") != std::string::npos);
    }

    TEST_CASE("a grandchild that keeps the pipe open does not hold up the caller") {
        LocalRunner runner;
        auto t0 = Clock::now();
        auto r = runner.run(sh("sleep 8 & echo done"));
        CHECK(seconds_since(t0) < 4.0);
        CHECK(r.ok());
        CHECK(r.out == "done\n");
    }

    TEST_CASE("argv is passed as is, never through a shell") {
        LocalRunner runner;
        Command c;
        c.argv = {"/bin/echo", "$HOME; ls *", "`id`", "a  b", "'q'"};
        auto r = runner.run(c);
        CHECK(r.ok());
        CHECK(r.out == "$HOME; ls * `id` a  b 'q'\n");

        Command p;
        p.argv = {"printf", "%s|", "x y", "*"};  // found through PATH
        CHECK(runner.run(p).out == "x y|*|");
    }

    TEST_CASE("a program that does not exist is an Error, not a crash") {
        LocalRunner runner;
        Command c;
        c.argv = {"/nonexistent/program"};
        CHECK_THROWS_AS(runner.run(c), Error);
        Command empty;
        CHECK_THROWS_AS(runner.run(empty), Error);
    }

    TEST_CASE("stdin is /dev/null by default; null and file outputs") {
        LocalRunner runner;
        auto in = runner.run(sh("cat; echo eof"));
        CHECK(in.out == "eof\n");

        TempDir t("process");
        fs::path log = t.path / "log";
        write_file_atomic(log, "first\n");
        Command c = sh("echo second; echo to-err >&2");
        c.out = Command::Stdio::file;
        c.out_file = log;
        c.err = Command::Stdio::null;
        auto r = runner.run(c);
        CHECK(r.ok());
        CHECK(r.out.empty());
        CHECK(r.err.empty());
        CHECK(read_file(log) == "first\nsecond\n");  // appended, never truncated
    }

    TEST_CASE("line callbacks see every line, the last one even without a newline") {
        LocalRunner runner;
        std::vector<std::string> out_lines, err_lines;
        Command c = sh("echo a; echo b >&2; printf 'c\\nd'; printf 'e' >&2");
        c.on_out_line = [&](const std::string& l) { out_lines.push_back(l); };
        c.on_err_line = [&](const std::string& l) { err_lines.push_back(l); };
        auto r = runner.run(c);
        CHECK(r.ok());
        CHECK(out_lines == std::vector<std::string>{"a", "c", "d"});
        CHECK(err_lines == std::vector<std::string>{"b", "e"});
        CHECK(r.out == "a\nc\nd");  // captured output is still complete
    }

    TEST_CASE("the child does not inherit our descriptors") {
        // Descriptors we inherited without close-on-exec (from ctest, a shell) are
        // legitimately passed on; everything the runner opens must not be.
        std::size_t inherited = 0;
        for (int fd = 3; fd < 1024; ++fd) {
            int flags = ::fcntl(fd, F_GETFD);
            if (flags >= 0 && !(flags & FD_CLOEXEC)) ++inherited;
        }
        LocalRunner runner;
        Command c;
        c.argv = {"ls", "/proc/self/fd"};  // ls itself opens the directory it lists
        auto r = runner.run(c);
        CHECK(r.ok());
        std::size_t lines = static_cast<std::size_t>(std::count(r.out.begin(), r.out.end(), '\n'));
        CAPTURE(r.out);
        CHECK(lines == 3 + 1 + inherited);
    }

    TEST_CASE("run_attached: a signal sent to us is forwarded to the command") {
        LocalRunner runner;
        Command c;
        c.argv = {"sleep", "30"};
        auto sender = signal_later(SIGTERM, 300ms);
        auto t0 = Clock::now();
        auto r = runner.run_attached(c, AttachOptions{});
        sender.join();
        CHECK(seconds_since(t0) < 10.0);
        CHECK(r.term_signal == SIGTERM);
        CHECK(r.shell_status() == 143);
    }

    TEST_CASE("run_attached: forward_signal replaces the default forwarding") {
        LocalRunner runner;
        TempDir t("process");
        const fs::path pid_file = t.path / "child.pid";
        Command c;
        c.argv = {"sh", "-c", "echo $$ > " + pid_file.string() + "; exec sleep 30"};
        std::atomic<int> got{0};
        AttachOptions opts;
        opts.forward_signal = [&](int sig) {
            got = sig;
            std::string pid;
            for (int i = 0; i < 100 && (pid.empty() || pid.back() != '\n'); ++i) {
                std::this_thread::sleep_for(20ms);
                std::error_code ec;
                if (fs::exists(pid_file, ec)) pid = read_file(pid_file);
            }
            REQUIRE_FALSE(pid.empty());
            ::kill(std::stoi(pid), SIGKILL);
        };
        auto sender = signal_later(SIGINT, 300ms);
        auto r = runner.run_attached(c, opts);
        sender.join();
        CHECK(got == SIGINT);
        CHECK(r.term_signal == SIGKILL);
    }

    TEST_CASE("run_attached: the timeout calls on_timeout, then kills after the grace period") {
        LocalRunner runner;
        Command c;
        c.argv = {"sleep", "30"};
        int calls = 0;
        AttachOptions opts;
        opts.timeout = 200ms;
        opts.kill_grace = 200ms;
        opts.on_timeout = [&] { ++calls; };
        auto t0 = Clock::now();
        auto r = runner.run_attached(c, opts);
        CHECK(seconds_since(t0) < 5.0);
        CHECK(r.timed_out);
        CHECK(calls == 1);
        CHECK(r.term_signal == SIGKILL);
    }

    TEST_CASE("run_attached returns the command's status and restores our signal mask") {
        LocalRunner runner;
        sigset_t before, after;
        pthread_sigmask(SIG_SETMASK, nullptr, &before);
        Command c;
        c.argv = {"sh", "-c", "exit 5"};
        auto r = runner.run_attached(c, AttachOptions{});
        CHECK(r.exit_status == 5);
        pthread_sigmask(SIG_SETMASK, nullptr, &after);
        for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD}) {
            CAPTURE(s);
            CHECK(sigismember(&before, s) == sigismember(&after, s));
        }
    }

    TEST_CASE("self_exe is this test binary") {
        CHECK(self_exe().filename() == "sandweave_unit_tests");
    }

    TEST_CASE("run_as: the child takes the user's ids, in /, with no capability") {
        RunAs nobody = run_as_user("nobody");
        CHECK(nobody.uid != 0u);
        CHECK(std::find(nobody.groups.begin(), nobody.groups.end(), nobody.gid) !=
              nobody.groups.end());
        CHECK_THROWS_WITH_AS(run_as_user("no-such-user-here"), doctest::Contains("no Unix user"),
                             Error);
        CHECK(!run_as_other(""));
        if (::geteuid() != 0) return;  // only root may become another user
        CHECK(!run_as_other("root"));
        Command c = sh("id -u; id -g; id -G; pwd; grep -E '^Cap(Eff|Prm|Amb):' /proc/self/status");
        c.run_as = run_as_other("nobody");
        REQUIRE(c.run_as);
        LocalRunner r;
        CommandResult res = r.run(c);
        REQUIRE(res.ok());
        std::string want = std::to_string(nobody.uid) + "\n" + std::to_string(nobody.gid) + "\n";
        CHECK(res.out.substr(0, want.size()) == want);
        CHECK(res.out.find("\n/\n") != std::string::npos);
        CHECK(res.out.find("CapPrm:\t0000000000000000") != std::string::npos);
        CHECK(res.out.find("CapEff:\t0000000000000000") != std::string::npos);
        CHECK(res.out.find("CapAmb:\t0000000000000000") != std::string::npos);
        // The supplementary groups are the user's, not ours (root's 0 gone).
        CHECK(res.out.find("\n0\n") == std::string::npos);
    }

    TEST_CASE("run_as: a command that cannot start says why, as whom") {
        if (::geteuid() != 0) return;
        Command c;
        c.argv = {"/nonexistent/program"};
        c.run_as = run_as_other("nobody");
        LocalRunner r;
        CHECK_THROWS_WITH_AS(r.run(c), doctest::Contains("as nobody: exec"), Error);
    }

}  // TEST_SUITE
