#include "lib/core/shim.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "lib/core/error.hpp"
#include "lib/core/process.hpp"

namespace sandweave {

namespace {

constexpr int status_fd = 3;

void write_all(int fd, const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
        ssize_t n = ::write(fd, s.data() + off, s.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        off += static_cast<std::size_t>(n);
    }
}

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

}  // namespace

LaunchResult launch_under_shim(const std::vector<std::string>& runsc_argv,
                               const std::filesystem::path& console_log,
                               std::chrono::milliseconds timeout) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe");
    Command c;
    c.argv = {self_exe().string(), shim_verb, console_log.string()};
    c.argv.insert(c.argv.end(), runsc_argv.begin(), runsc_argv.end());
    c.out = Command::Stdio::file;
    c.out_file = console_log;
    c.err = Command::Stdio::file;
    c.err_file = console_log;
    c.pass_fds = {{fds[1], status_fd}};
    pid_t shim = -1;
    try {
        shim = spawn_detached(c);
    } catch (...) {
        ::close(fds[0]);
        ::close(fds[1]);
        throw;
    }
    ::close(fds[1]);
    std::string report;
    bool timed_out = false;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        pollfd pfd{fds[0], POLLIN, 0};
        int rc = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (rc < 0 && errno != EINTR) break;
        if (rc <= 0) continue;
        char buf[4096];
        ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (report.size() < (1u << 20)) report.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fds[0]);
    // The shim detaches (its own session); collect it if it already exited so
    // no zombie outlives a long-running caller.
    ::waitpid(shim, nullptr, WNOHANG);
    if (timed_out) {
        ::kill(-shim, SIGKILL);
        ::waitpid(shim, nullptr, WNOHANG);
        LaunchResult r;
        r.runtime_error = "timed out after " + std::to_string(timeout.count() / 1000) + " s";
        return r;
    }
    LaunchResult r;
    auto nl = report.find('\n');
    if (nl == std::string::npos) {
        r.runtime_error =
            "the sandbox supervisor exited without a report (see " + console_log.string() + ")";
        return r;
    }
    try {
        r.exit_status = std::stoi(report.substr(0, nl));
    } catch (const std::exception&) {
        r.exit_status = -1;
    }
    r.runtime_error = report.substr(nl + 1);
    return r;
}

int shim_main(const std::vector<std::string>& args) {
    if (args.size() < 2) return 2;
    ::fcntl(status_fd, F_SETFD, FD_CLOEXEC);
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
    // Terminal and hangup signals are for the CLI, not for the supervisor.
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    ::signal(SIGPIPE, SIG_IGN);

    int logfd = ::memfd_create("runsc-errors", MFD_CLOEXEC);
    Command c;
    c.argv.assign(args.begin() + 1, args.end());
    c.in = Command::Stdio::null;
    c.out = Command::Stdio::inherit;
    c.err = Command::Stdio::inherit;
    if (logfd >= 0) c.pass_fds = {{logfd, 3}};
    int status = -1;
    try {
        LocalRunner runner;
        status = runner.run(c).shell_status();
    } catch (const std::exception& e) {
        write_all(status_fd, "-1\n" + std::string(e.what()));
        return 1;
    }
    std::string errors;
    if (logfd >= 0) {
        ::lseek(logfd, 0, SEEK_SET);
        errors = read_all(logfd, 1 << 20);
        ::close(logfd);
    }
    write_all(status_fd, std::to_string(status) + "\n" + errors);
    ::close(status_fd);
    if (status != 0) return 1;

    // Adopt and reap the sandbox's processes until none are left.
    for (;;) {
        pid_t pid = ::waitpid(-1, nullptr, 0);
        if (pid < 0 && errno == ECHILD) return 0;
    }
}

LaunchResult LocalRunner::launch_detached(const Command& cmd,
                                          const std::filesystem::path& console_log) {
    return launch_under_shim(cmd.argv, console_log,
                             cmd.timeout.value_or(std::chrono::seconds(120)));
}

}  // namespace sandweave
