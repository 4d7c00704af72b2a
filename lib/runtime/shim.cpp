#include "lib/runtime/shim.hpp"

#include <malloc.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/helper.hpp"
#include "lib/core/process.hpp"
#include "lib/runtime/relay.hpp"

namespace sandweave {

namespace {

std::string read_all(int fd, std::size_t limit) {
    std::string out;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (out.size() < limit) out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
}

// The companions' threads (ShimCompanion): started with every signal
// blocked, so SIGCHLD and the termination signals stay with the shim's main
// thread, and stopped through one eventfd (never read, so it stays readable
// for all of them) once the sandbox is gone.
class CompanionThreads {
  public:
    CompanionThreads() = default;
    CompanionThreads(const CompanionThreads&) = delete;
    CompanionThreads& operator=(const CompanionThreads&) = delete;
    ~CompanionThreads() { stop(); }

    void start(std::vector<std::function<void(int)>> bodies) {
        if (bodies.empty()) return;
        stop_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        if (!stop_) return;  // (the resolver's socket closes: the guest resolves nothing)
        sigset_t all, old;
        sigfillset(&all);
        ::pthread_sigmask(SIG_SETMASK, &all, &old);
        for (auto& body : bodies) {
            if (!body) continue;
            threads_.emplace_back([body = std::move(body), fd = stop_.get()] {
                try {
                    body(fd);
                } catch (const std::exception&) {
                    // The watcher's lock goes with the thread: ls/inspect
                    // start a watcher; the resolver's socket closes.
                }
            });
        }
        ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    }
    void stop() {
        if (threads_.empty()) return;
        std::uint64_t one = 1;
        if (::write(stop_.get(), &one, sizeof one) < 0) {
            // An eventfd takes a write unless its count overflows.
        }
        for (auto& t : threads_) t.join();
        threads_.clear();
    }

  private:
    Fd stop_;
    std::vector<std::thread> threads_;
};

}  // namespace

namespace {

LaunchResult launch_result(const HelperReport& report, const std::filesystem::path& console_log,
                           std::chrono::milliseconds timeout) {
    LaunchResult r;
    switch (report.outcome) {
        case HelperReport::Outcome::ready:
            r.exit_status = 0;
            break;
        case HelperReport::Outcome::failed: {
            // "STATUS\nRUNSC'S ERROR LOG" from the shim; a bare message when the
            // shim itself could not start.
            auto nl = report.detail.find('\n');
            try {
                r.exit_status = std::stoi(report.detail.substr(0, nl));
                r.runtime_error = nl == std::string::npos ? "" : report.detail.substr(nl + 1);
            } catch (const std::exception&) {
                r.exit_status = -1;
                r.runtime_error = report.detail;
            }
            break;
        }
        case HelperReport::Outcome::timed_out:
            r.runtime_error = "timed out after " + std::to_string(timeout.count() / 1000) + " s";
            break;
        case HelperReport::Outcome::silent:
        case HelperReport::Outcome::garbled:
            r.runtime_error =
                "the sandbox supervisor exited without a report (see " + console_log.string() + ")";
            break;
    }
    return r;
}

}  // namespace

HeldShim HeldShim::start(const std::vector<std::string>& runsc_argv,
                         const std::filesystem::path& console_log,
                         std::chrono::milliseconds timeout,
                         const std::filesystem::path& agent_socket,
                         const std::vector<std::string>& companions) {
    HelperSpec spec;
    spec.argv = {helper_exe().string(), shim_verb};
    if (!agent_socket.empty()) {
        spec.argv.push_back("--agent");
        spec.argv.push_back(agent_socket.string());
    }
    spec.argv.push_back("--held");
    if (companions.size() == 2) {
        spec.argv.push_back("--companions");
        spec.argv.insert(spec.argv.end(), companions.begin(), companions.end());
    }
    spec.argv.push_back(console_log.string());
    spec.argv.insert(spec.argv.end(), runsc_argv.begin(), runsc_argv.end());
    spec.log = console_log;
    spec.timeout = timeout;
    HeldShim s;
    s.helper_ = HeldHelper::start(spec);
    s.console_log_ = console_log;
    s.timeout_ = timeout;
    return s;
}

LaunchResult HeldShim::go() {
    return launch_result(helper_.go(), console_log_, timeout_);
}

LaunchResult launch_under_shim(const std::vector<std::string>& runsc_argv,
                               const std::filesystem::path& console_log,
                               std::chrono::milliseconds timeout,
                               const std::filesystem::path& agent_socket,
                               const std::vector<std::string>& companions) {
    return HeldShim::start(runsc_argv, console_log, timeout, agent_socket, companions).go();
}

namespace {

// The shim's command line: [--agent SOCKET] [--held] [--companions STATE ID]
// CONSOLE_LOG RUNSC_ARGV...
struct ShimArgs {
    std::filesystem::path agent_socket;
    bool held = false;
    std::vector<std::string> companion_args;
    std::vector<std::string> runsc_argv;
};

std::optional<ShimArgs> parse_shim_args(std::vector<std::string> args) {
    ShimArgs a;
    if (args.size() >= 2 && args[0] == "--agent") {
        a.agent_socket = args[1];
        args.erase(args.begin(), args.begin() + 2);
    }
    a.held = !args.empty() && args[0] == "--held";
    if (a.held) args.erase(args.begin());
    if (args.size() >= 3 && args[0] == "--companions") {
        a.companion_args.assign(args.begin() + 1, args.begin() + 3);
        args.erase(args.begin(), args.begin() + 3);
    }
    if (args.size() < 2) return std::nullopt;
    a.runsc_argv.assign(args.begin() + 1, args.end());  // args[0]: the console log
    return a;
}

// Adopts the sandbox's orphans; terminal and hangup signals are for the
// CLI, not for the supervisor.
void become_supervisor() {
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    ::signal(SIGPIPE, SIG_IGN);
}

// The agent's channel: the sandbox's init gets one end as its fd 0 (runsc's
// stdin), `agent_end` keeps the other. Reports and returns false on failure.
bool hand_over_agent_channel(ReadinessReporter& report, Fd& agent_end, Command& c) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        report.error("-1\ncannot create the guest agent's channel: " +
                     std::string(std::strerror(errno)));
        return false;
    }
    agent_end.reset(sv[0]);
    Fd guest_end(sv[1]);
    if (::dup2(guest_end.get(), 0) < 0) {
        report.error("-1\ncannot hand over the guest agent's channel");
        return false;
    }
    c.in = Command::Stdio::inherit;
    return true;
}

// runsc (its `run --detach`) to its end; on failure reports its status and
// its own error messages (`errors_fd`, its --log-fd 3) and returns false.
bool run_runsc(ReadinessReporter& report, const Command& c, Fd& errors_fd) {
    int status = -1;
    try {
        LocalRunner runner;
        status = runner.run(c).shell_status();
    } catch (const std::exception& e) {
        report.error("-1\n" + std::string(e.what()));
        return false;
    }
    if (status != 0) {
        std::string errors;
        if (errors_fd) {
            ::lseek(errors_fd.get(), 0, SEEK_SET);
            errors = read_all(errors_fd.get(), 1 << 20);
        }
        report.error(std::to_string(status) + "\n" + errors);
        return false;
    }
    errors_fd.reset();
    return true;
}

// Relays the agent and reaps the sandbox's processes until none are left,
// after reporting ready.
int relay_agent(ReadinessReporter& report, const std::filesystem::path& agent_socket, Fd agent_end,
                CompanionThreads& companions, std::vector<std::function<void(int)>> bodies) {
    // The sandbox holds its own copy of the guest end now.
    Fd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (null) ::dup2(null.get(), 0);
    Fd listener;
    try {
        listener = listen_unix(agent_socket);
    } catch (const std::exception& e) {
        report.error("-1\n" + std::string(e.what()));
        return 1;
    }
    ::malloc_trim(0);  // it idles for the sandbox's life: keep only what it holds
    report.ready();
    companions.start(std::move(bodies));
    run_relay(std::move(agent_end), std::move(listener), agent_socket.parent_path() / "activity",
              agent_ready_file(agent_socket));
    std::error_code ec;
    std::filesystem::remove(agent_socket, ec);
    return 0;
}

// Adopts and reaps the sandbox's processes until none are left.
int reap_until_empty() {
    for (;;) {
        pid_t pid = ::waitpid(-1, nullptr, 0);
        if (pid < 0 && errno == ECHILD) return 0;
    }
}

}  // namespace

int shim_main(const std::vector<std::string>& all_args, const ShimCompanion& companion) {
    // One malloc arena for the process: the companion thread's own arena would
    // keep the pages its loads once touched (glibc trims a thread arena's top
    // only past 128 KiB free), while the main arena's go back on malloc_trim.
    ::mallopt(M_ARENA_MAX, 1);
    std::optional<ShimArgs> a = parse_shim_args(all_args);
    if (!a) return 2;
    ReadinessReporter report = ReadinessReporter::inherited();
    become_supervisor();

    Fd errors_fd(::memfd_create("runsc-errors", MFD_CLOEXEC));
    Command c;
    c.argv = a->runsc_argv;
    c.in = Command::Stdio::null;
    Fd agent_end;
    if (!a->agent_socket.empty() && !hand_over_agent_channel(report, agent_end, c)) return 1;
    c.out = Command::Stdio::inherit;
    c.err = Command::Stdio::inherit;
    if (errors_fd) c.pass_fds = {{errors_fd.get(), 3}};
    // Started ahead (HeldShim): all of the above overlapped the launcher's
    // own work; runsc starts only when the bundle is complete.
    if (a->held && !HeldHelper::wait_for_go()) return 0;
    if (!run_runsc(report, c, errors_fd)) return 1;

    // Declared before the relay's objects: stopped (joined) after they are gone.
    CompanionThreads companions;
    std::vector<std::function<void(int)>> bodies;
    if (!a->companion_args.empty() && companion) {
        try {
            bodies = companion(a->companion_args);
        } catch (const std::exception& e) {
            report.error("-1\n" + std::string(e.what()));
            return 1;
        }
    }
    if (agent_end)
        return relay_agent(report, a->agent_socket, std::move(agent_end), companions,
                           std::move(bodies));
    report.ready();
    companions.start(std::move(bodies));
    return reap_until_empty();
}

namespace {

class ShimLaunch final : public PreparedLaunch {
  public:
    explicit ShimLaunch(HeldShim shim) : shim_(std::move(shim)) {}
    LaunchResult go() override { return shim_.go(); }

  private:
    HeldShim shim_;
};

}  // namespace

std::unique_ptr<PreparedLaunch> LocalRunner::prepare_detached(
    const Command& cmd, const std::filesystem::path& console_log) {
    return std::make_unique<ShimLaunch>(
        HeldShim::start(cmd.argv, console_log, cmd.timeout.value_or(std::chrono::seconds(120)),
                        cmd.agent_socket, cmd.shim_companions));
}

LaunchResult LocalRunner::launch_detached(const Command& cmd,
                                          const std::filesystem::path& console_log) {
    return launch_under_shim(cmd.argv, console_log, cmd.timeout.value_or(std::chrono::seconds(120)),
                             cmd.agent_socket, cmd.shim_companions);
}

}  // namespace sandweave
