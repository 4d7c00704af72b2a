#include "lib/core/process.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <utility>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"

extern char** environ;

namespace sandweave {
namespace {

using Clock = std::chrono::steady_clock;

// Everything a spawn needs that must outlive posix_spawn: the child's ends.
struct ChildStdio {
    Fd in, out, err;        // child's ends (dup2'ed onto 0/1/2)
    Fd out_read, err_read;  // our ends of capture pipes
};

Fd open_for_child(const Command::Stdio mode, int target, const std::filesystem::path& file) {
    switch (mode) {
        case Command::Stdio::null: {
            int fd = ::open("/dev/null", (target == 0 ? O_RDONLY : O_WRONLY) | O_CLOEXEC);
            if (fd < 0) throw_errno("open /dev/null");
            return Fd(fd);
        }
        case Command::Stdio::file: {
            int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
            if (fd < 0) throw_errno("open " + file.string());
            return Fd(fd);
        }
        default:
            return Fd();
    }
}

ChildStdio prepare_stdio(const Command& cmd) {
    ChildStdio s;
    if (cmd.in == Command::Stdio::capture || cmd.in == Command::Stdio::file)
        throw Error(ErrorCode::general, "internal: stdin can only be inherited or null");
    s.in = open_for_child(cmd.in, 0, {});
    if (cmd.out == Command::Stdio::capture) {
        Pipe p = make_pipe();
        s.out_read = std::move(p.read);
        s.out = std::move(p.write);
    } else {
        s.out = open_for_child(cmd.out, 1, cmd.out_file);
    }
    if (cmd.err == Command::Stdio::capture) {
        Pipe p = make_pipe();
        s.err_read = std::move(p.read);
        s.err = std::move(p.write);
    } else {
        s.err = open_for_child(cmd.err, 2, cmd.err_file);
    }
    return s;
}

// The executable `name` names: itself when it has a slash, else the first
// one on PATH (what posix_spawnp and execvp do), found before a fork.
std::string find_executable(const std::string& name) {
    if (name.find('/') != std::string::npos) return name;
    const char* env = ::getenv("PATH");
    std::string path = env ? env : "/usr/local/bin:/usr/bin:/bin";
    std::size_t start = 0;
    for (;;) {
        std::size_t end = path.find(':', start);
        std::string dir = path.substr(start, end == std::string::npos ? end : end - start);
        std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        if (end == std::string::npos) break;
        start = end + 1;
    }
    throw Error(ErrorCode::general, "run " + name + ": not found on PATH");
}

// posix_spawn cannot change ids, so a command run as another user is a
// fork whose child only makes async-signal-safe calls (raw syscalls for the
// ids: they change this one thread, which is all the child has) and reports
// a failed step on a close-on-exec pipe before it exits.
pid_t spawn_as(const Command& cmd, ChildStdio& stdio, bool new_session) {
    const RunAs& as = *cmd.run_as;
    std::string exe = find_executable(cmd.argv[0]);
    std::vector<char*> argv;
    for (const auto& a : cmd.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    Pipe report = make_pipe();
    pid_t pid = ::fork();
    if (pid < 0) throw_errno("run " + cmd.argv[0] + " as " + as.user + ": fork");
    if (pid == 0) {
        // One write of errno and the step, so the parent cannot read half.
        auto fail = [&](const char* step) {
            int err = errno;
            char msg[64];
            std::size_t len = std::min(std::strlen(step), sizeof msg - sizeof err);
            std::memcpy(msg, &err, sizeof err);
            std::memcpy(msg + sizeof err, step, len);
            (void)!::write(report.write.get(), msg, sizeof err + len);
            ::_exit(127);
        };
        sigset_t empty;
        sigemptyset(&empty);
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
        ::sigprocmask(SIG_SETMASK, &empty, nullptr);
        if (new_session && ::setsid() < 0) fail("setsid");
        if (cmd.own_process_group && !new_session && ::setpgid(0, 0) != 0) fail("setpgid");
        if (stdio.in.valid() && ::dup2(stdio.in.get(), 0) < 0) fail("dup2");
        if (stdio.out.valid() && ::dup2(stdio.out.get(), 1) < 0) fail("dup2");
        if (stdio.err.valid() && ::dup2(stdio.err.get(), 2) < 0) fail("dup2");
        for (const auto& [ours, theirs] : cmd.pass_fds)
            if (::dup2(ours, theirs) < 0) fail("dup2");
        if (::chdir("/") != 0) fail("chdir /");
        if (::syscall(SYS_setgroups, as.groups.size(), as.groups.data()) != 0) fail("setgroups");
        if (::syscall(SYS_setresgid, as.gid, as.gid, as.gid) != 0) fail("setresgid");
        if (::syscall(SYS_setresuid, as.uid, as.uid, as.uid) != 0) fail("setresuid");
        // Changing between two non-zero uids keeps ambient capabilities:
        // the command must not inherit the CAP_SETUID we ran it with.
        if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL)
            fail("clear ambient capabilities");
        ::execve(exe.c_str(), argv.data(), environ);
        fail("exec");
    }
    report.write.reset();
    stdio.in.reset();
    stdio.out.reset();
    stdio.err.reset();
    // Read to end of file: the pipe closes at exec, or after the report.
    char buf[128] = {};
    ssize_t n = 0;
    while (n < static_cast<ssize_t>(sizeof buf - 1)) {
        ssize_t got =
            ::read(report.read.get(), buf + n, sizeof buf - 1 - static_cast<std::size_t>(n));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        n += got;
    }
    if (n >= static_cast<ssize_t>(sizeof(int))) {
        int err = 0;
        std::memcpy(&err, buf, sizeof err);
        ::waitpid(pid, nullptr, 0);
        throw Error(ErrorCode::general,
                    errno_message(
                        "run " + cmd.argv[0] + " as " + as.user + ": " +
                            std::string(buf + sizeof err, static_cast<std::size_t>(n) - sizeof err),
                        err));
    }
    return pid;
}

pid_t spawn(const Command& cmd, ChildStdio& stdio, bool new_session) {
    if (cmd.argv.empty()) throw Error(ErrorCode::general, "internal: empty argv");
    if (cmd.run_as) return spawn_as(cmd, stdio, new_session);
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    if (stdio.in.get() >= 0) posix_spawn_file_actions_adddup2(&fa, stdio.in.get(), 0);
    if (stdio.out.get() >= 0) posix_spawn_file_actions_adddup2(&fa, stdio.out.get(), 1);
    if (stdio.err.get() >= 0) posix_spawn_file_actions_adddup2(&fa, stdio.err.get(), 2);
    for (const auto& [ours, theirs] : cmd.pass_fds)
        posix_spawn_file_actions_adddup2(&fa, ours, theirs);

    // The child starts with default dispositions and an empty mask, whatever we
    // blocked for our signalfd.
    sigset_t empty, all;
    sigemptyset(&empty);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setsigdefault(&attr, &all);
    short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
    if (new_session) flags |= POSIX_SPAWN_SETSID;
    if (cmd.own_process_group && !new_session) {
        flags |= POSIX_SPAWN_SETPGROUP;
        posix_spawnattr_setpgroup(&attr, 0);
    }
    posix_spawnattr_setflags(&attr, flags);

    std::vector<char*> argv;
    argv.reserve(cmd.argv.size() + 1);
    for (const auto& a : cmd.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    pid_t pid = -1;
    int rc = ::posix_spawnp(&pid, argv[0], &fa, &attr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) throw Error(ErrorCode::general, errno_message("run " + cmd.argv[0], rc));
    // Our copies of the child's ends must go so EOF is seen on the pipes.
    stdio.in.reset();
    stdio.out.reset();
    stdio.err.reset();
    return pid;
}

void emit_lines(std::string& pending, const std::function<void(const std::string&)>& cb,
                bool flush) {
    if (!cb) return;
    std::size_t pos;
    while ((pos = pending.find('\n')) != std::string::npos) {
        cb(pending.substr(0, pos));
        pending.erase(0, pos + 1);
    }
    if (flush && !pending.empty()) {
        cb(pending);
        pending.clear();
    }
}

void set_status(CommandResult& r, int status) {
    if (WIFEXITED(status)) {
        r.exit_status = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
        r.term_signal = WTERMSIG(status);
    }
}

// A descriptor that becomes readable when `pid` exits (pidfd_open), so one
// poll() waits for output and exit together, with no sleeping tick.
Fd open_pidfd(pid_t pid) {
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) throw_errno("pidfd_open");
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    return Fd(fd);
}

// Reaps exactly `pid`; its wait status.
int reap(pid_t pid) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) throw_errno("waitpid");
    }
    return status;
}

int remaining_ms(const std::optional<Clock::time_point>& deadline) {
    if (!deadline) return -1;
    auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(ms + 1, 0, 60000));
}

// Waits for the child: reads capture pipes as data arrives, enforces the
// timeout, reaps exactly `pid`. A child that exits while a grandchild still
// holds its pipes open is not waited for beyond what is already buffered.
CommandResult wait_capturing(pid_t pid, ChildStdio& stdio, const Command& cmd) {
    CommandResult r;
    std::string out_pending, err_pending;
    auto deadline = cmd.timeout ? std::optional(Clock::now() + *cmd.timeout) : std::nullopt;
    Fd pidfd = open_pidfd(pid);
    bool exited = false;
    for (;;) {
        pollfd fds[3];
        nfds_t n = 0;
        if (!exited) fds[n++] = {pidfd.get(), POLLIN, 0};
        if (stdio.out_read.get() >= 0) fds[n++] = {stdio.out_read.get(), POLLIN, 0};
        if (stdio.err_read.get() >= 0) fds[n++] = {stdio.err_read.get(), POLLIN, 0};
        if (n == 0) break;
        int timeout_ms = exited ? 0 : remaining_ms(r.timed_out ? std::nullopt : deadline);
        int rc = ::poll(fds, n, timeout_ms);
        if (rc < 0) {
            if (errno == EINTR) continue;
            throw_errno("poll");
        }
        if (rc == 0) {
            if (exited) break;  // only leftover holders of the pipes remain
            // poll waits at most 60 s at a time (remaining_ms): a longer
            // timeout is not over yet.
            if (!r.timed_out && deadline && Clock::now() < *deadline) continue;
            r.timed_out = true;
            ::kill(pid, SIGKILL);
            continue;
        }
        for (nfds_t i = 0; i < n; ++i) {
            if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            if (fds[i].fd == pidfd.get()) {
                exited = true;
                continue;
            }
            bool is_out = fds[i].fd == stdio.out_read.get();
            char buf[65536];
            ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                (is_out ? stdio.out_read : stdio.err_read).reset();
                continue;
            }
            std::string& sink = is_out ? r.out : r.err;
            sink.append(buf, static_cast<std::size_t>(got));
            const auto& cb = is_out ? cmd.on_out_line : cmd.on_err_line;
            if (cb) {
                std::string& pend = is_out ? out_pending : err_pending;
                pend.append(buf, static_cast<std::size_t>(got));
                emit_lines(pend, cb, false);
            }
        }
    }
    int status = reap(pid);
    emit_lines(out_pending, cmd.on_out_line, true);
    emit_lines(err_pending, cmd.on_err_line, true);
    set_status(r, status);
    return r;
}

}  // namespace

namespace {
// All of `data` through `put` (one write(2)-like call), across short writes
// and EINTR.
template <typename Put>
bool put_all(std::string_view data, Put put) {
    while (!data.empty()) {
        ssize_t w = put(data);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        data.remove_prefix(static_cast<std::size_t>(w));
    }
    return true;
}
}  // namespace

bool write_all(int fd, std::string_view data) {
    return put_all(data, [fd](std::string_view d) { return ::write(fd, d.data(), d.size()); });
}

bool send_all(int fd, std::string_view data) {
    return put_all(
        data, [fd](std::string_view d) { return ::send(fd, d.data(), d.size(), MSG_NOSIGNAL); });
}

Pipe make_pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw_errno("pipe");
    return Pipe{Fd(fds[0]), Fd(fds[1])};
}

bool relay_needed(int fd) {
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    int flags = ::fcntl(fd, F_GETFL);
    return flags >= 0 && !(flags & O_APPEND);
}

std::string CommandResult::describe() const {
    std::string s;
    if (timed_out)
        s = "timed out";
    else if (term_signal)
        s = std::string("killed by signal ") + strsignal(term_signal);
    else
        s = "exit status " + std::to_string(exit_status);
    // The last non-empty line of stderr is usually the reason.
    std::string_view e = err;
    while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.remove_suffix(1);
    if (!e.empty()) {
        auto nl = e.rfind('\n');
        s += ": " + std::string(nl == std::string_view::npos ? e : e.substr(nl + 1));
    }
    return s;
}

namespace {

// What a runner without a supervisor of its own prepares: the whole launch, at go().
class DeferredLaunch final : public PreparedLaunch {
  public:
    DeferredLaunch(CommandRunner& runner, Command cmd, std::filesystem::path console_log)
        : runner_(runner), cmd_(std::move(cmd)), console_log_(std::move(console_log)) {}
    LaunchResult go() override { return runner_.launch_detached(cmd_, console_log_); }

  private:
    CommandRunner& runner_;
    Command cmd_;
    std::filesystem::path console_log_;
};

}  // namespace

std::unique_ptr<PreparedLaunch> CommandRunner::prepare_detached(
    const Command& cmd, const std::filesystem::path& console_log) {
    return std::make_unique<DeferredLaunch>(*this, cmd, console_log);
}

RunAs run_as_user(const std::string& name) {
    passwd pw{}, *res = nullptr;
    std::string buf(16384, '\0');
    if (::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &res) != 0 || !res)
        throw Error(ErrorCode::usage, "no Unix user '" + name + "' on this host");
    RunAs as{name, res->pw_uid, res->pw_gid, {}};
    int n = 64;
    for (;;) {
        as.groups.assign(static_cast<std::size_t>(n), 0);
        int got = n;
        if (::getgrouplist(name.c_str(), as.gid, as.groups.data(), &got) >= 0) {
            as.groups.resize(static_cast<std::size_t>(got));
            break;
        }
        if (got <= n) throw Error(ErrorCode::general, "cannot list the groups of user " + name);
        n = got;
    }
    return as;
}

std::optional<RunAs> run_as_other(const std::string& name) {
    if (name.empty()) return std::nullopt;
    RunAs as = run_as_user(name);
    if (as.uid == ::geteuid()) return std::nullopt;
    return as;
}

pid_t start_command(const Command& cmd) {
    if (cmd.in == Command::Stdio::capture || cmd.out == Command::Stdio::capture ||
        cmd.err == Command::Stdio::capture)
        throw Error(ErrorCode::general, "internal: start_command captures nothing");
    ChildStdio stdio = prepare_stdio(cmd);
    return spawn(cmd, stdio, false);
}

CommandResult LocalRunner::run(const Command& cmd) {
    ChildStdio stdio = prepare_stdio(cmd);
    pid_t pid = spawn(cmd, stdio, false);
    return wait_capturing(pid, stdio, cmd);
}

namespace {

// Reads what is there on `from` and hands it to `sink`; closes `from` at EOF.
void pump(Fd& from, const OutputSink& sink, short revents) {
    if (!from.valid() || !(revents & (POLLIN | POLLHUP | POLLERR))) return;
    char buf[65536];
    ssize_t n = ::read(from.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) return;
    if (n <= 0) {
        from.reset();
        return;
    }
    sink.on_data(std::string_view(buf, static_cast<std::size_t>(n)));
}

}  // namespace

struct RunControl::State {
    std::mutex mu;
    std::vector<int> signals;
    std::optional<std::pair<std::uint16_t, std::uint16_t>> window;
    bool cancelled = false;
    Fd efd;
};

RunControl::RunControl() : s_(new State) {
    s_->efd.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!s_->efd.valid()) {
        delete s_;
        throw_errno("eventfd");
    }
}
RunControl::~RunControl() {
    delete s_;
}
void RunControl::signal(int sig) {
    std::lock_guard<std::mutex> g(s_->mu);
    s_->signals.push_back(sig);
    std::uint64_t one = 1;
    (void)!::write(s_->efd.get(), &one, sizeof one);
}
void RunControl::resize(std::uint16_t rows, std::uint16_t cols) {
    std::lock_guard<std::mutex> g(s_->mu);
    s_->window = std::make_pair(rows, cols);
    std::uint64_t one = 1;
    (void)!::write(s_->efd.get(), &one, sizeof one);
}
void RunControl::cancel() {
    std::lock_guard<std::mutex> g(s_->mu);
    s_->cancelled = true;
    std::uint64_t one = 1;
    (void)!::write(s_->efd.get(), &one, sizeof one);
}
bool RunControl::cancelled() const {
    std::lock_guard<std::mutex> g(s_->mu);
    return s_->cancelled;
}
int RunControl::fd() const {
    return s_->efd.get();
}
std::vector<int> RunControl::take_signals() {
    std::lock_guard<std::mutex> g(s_->mu);
    std::uint64_t n;
    (void)!::read(s_->efd.get(), &n, sizeof n);
    return std::exchange(s_->signals, {});
}
std::optional<std::pair<std::uint16_t, std::uint16_t>> RunControl::take_resize() {
    std::lock_guard<std::mutex> g(s_->mu);
    return std::exchange(s_->window, std::nullopt);
}

namespace {

// Our own termination signals, taken through a signalfd while a command runs
// attached: blocked in this thread only (the child starts with an empty
// mask), and unblocked again when it is done.
class OwnSignals {
  public:
    explicit OwnSignals(bool take) : active_(take) {
        if (!take) return;
        sigset_t forward;
        sigemptyset(&forward);
        for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&forward, s);
        if (::pthread_sigmask(SIG_BLOCK, &forward, &old_) != 0) throw_errno("sigprocmask");
        fd_.reset(::signalfd(-1, &forward, SFD_CLOEXEC | SFD_NONBLOCK));
        if (!fd_.valid()) {
            // No destructor runs for a constructor that throws: unblock here.
            int err = errno;
            ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
            throw_errno("signalfd", err);
        }
    }
    ~OwnSignals() {
        if (active_) ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    OwnSignals(const OwnSignals&) = delete;
    OwnSignals& operator=(const OwnSignals&) = delete;

    Fd& fd() { return fd_; }

  private:
    Fd fd_;  // closed after the mask is restored
    bool active_;
    sigset_t old_;
};

// The child's end of one output stream: a pipe to `sink`'s callback, a copy
// of its descriptor, or /dev/null.
void bind_output(const OutputSink& sink, Fd& child_end, Fd& our_end, int target) {
    if (sink.on_data) {
        Pipe p = make_pipe();
        our_end = std::move(p.read);
        child_end = std::move(p.write);
    } else if (sink.fd >= 0) {
        child_end.reset(::fcntl(sink.fd, F_DUPFD_CLOEXEC, 3));
        if (!child_end.valid()) throw_errno("dup output");
    } else {
        child_end = open_for_child(Command::Stdio::null, target, {});
    }
}

ChildStdio attached_stdio(const AttachOptions& opts) {
    ChildStdio stdio;
    if (opts.stdin_fd >= 0) {
        stdio.in.reset(::fcntl(opts.stdin_fd, F_DUPFD_CLOEXEC, 3));
        if (!stdio.in.valid()) throw_errno("dup stdin");
    } else {
        stdio.in = open_for_child(Command::Stdio::null, 0, {});
    }
    bind_output(opts.out, stdio.out, stdio.out_read, 1);
    bind_output(opts.err, stdio.err, stdio.err_read, 2);
    return stdio;
}

// Waits for an attached child in one poll loop: its exit, its output, our own
// signals (forwarded) and the caller's control (signals, cancel), with the
// timeout and the kill after the grace that follows it or a cancel.
class AttachedWait {
  public:
    AttachedWait(pid_t pid, const Command& cmd, const AttachOptions& opts, ChildStdio& stdio,
                 Fd& own_signals)
        : pid_(pid),
          cmd_(cmd),
          opts_(opts),
          stdio_(stdio),
          own_signals_(own_signals),
          deadline_(opts.timeout ? std::optional(Clock::now() + *opts.timeout) : std::nullopt),
          pidfd_(open_pidfd(pid)) {}

    // Returns once the child has exited (not yet reaped).
    CommandResult until_exit() {
        for (;;) {
            enforce_deadlines();
            int wait_ms = remaining_ms(
                kill_at_ ? kill_at_ : ((r_.timed_out || r_.cancelled) ? std::nullopt : deadline_));
            pollfd pfds[5] = {{pidfd_.get(), POLLIN, 0},
                              {own_signals_.get(), POLLIN, 0},
                              {opts_.control ? opts_.control->fd() : -1, POLLIN, 0},
                              {stdio_.out_read.get(), POLLIN, 0},
                              {stdio_.err_read.get(), POLLIN, 0}};
            int rc = ::poll(pfds, 5, wait_ms);
            if (rc < 0 && errno != EINTR) throw_errno("poll");
            if (rc <= 0) continue;
            pump(stdio_.out_read, opts_.out, pfds[3].revents);
            pump(stdio_.err_read, opts_.err, pfds[4].revents);
            if (pfds[0].revents & POLLIN) return std::move(r_);
            forward_own_signals();
            if (opts_.control && (pfds[2].revents & POLLIN)) take_control();
        }
    }

  private:
    void enforce_deadlines() {
        auto now = Clock::now();
        if (deadline_ && now >= *deadline_ && !r_.timed_out && !r_.cancelled) {
            r_.timed_out = true;
            stop();
        }
        if (kill_at_ && Clock::now() >= *kill_at_) {
            ::kill(pid_, SIGKILL);
            kill_at_.reset();
        }
    }

    // The caller's way to stop the command first; SIGKILL after the grace.
    void stop() {
        if (opts_.on_timeout) opts_.on_timeout();
        kill_at_ = Clock::now() + opts_.kill_grace;
    }

    void deliver(int sig) {
        if (opts_.forward_signal)
            opts_.forward_signal(sig);
        else
            ::kill(pid_, sig);
    }

    void forward_own_signals() {
        signalfd_siginfo si;
        while (own_signals_.valid() &&
               ::read(own_signals_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
            // A terminal's Ctrl-C (sent by the kernel) already reached a child in
            // our process group; only forward what it did not get.
            if (si.ssi_code == SI_KERNEL && !cmd_.own_process_group) continue;
            deliver(static_cast<int>(si.ssi_signo));
        }
    }

    void take_control() {
        for (int sig : opts_.control->take_signals()) deliver(sig);
        if (opts_.control->cancelled() && !r_.cancelled) {
            r_.cancelled = true;
            if (!r_.timed_out) stop();
        }
    }

    pid_t pid_;
    const Command& cmd_;
    const AttachOptions& opts_;
    ChildStdio& stdio_;
    Fd& own_signals_;
    CommandResult r_;
    std::optional<Clock::time_point> deadline_;
    std::optional<Clock::time_point> kill_at_;
    Fd pidfd_;
};

// Drains what the child wrote before it exited; a guest process it left
// behind may hold the pipe open, so stops as soon as nothing is pending.
void drain_after_exit(ChildStdio& stdio, const AttachOptions& opts) {
    for (auto [f, sink] : {std::pair{&stdio.out_read, &opts.out}, {&stdio.err_read, &opts.err}}) {
        while (f->valid()) {
            pollfd p{f->get(), POLLIN, 0};
            if (::poll(&p, 1, 20) <= 0) break;
            pump(*f, *sink, p.revents);
        }
    }
}

}  // namespace

CommandResult LocalRunner::run_attached(const Command& cmd_in, const AttachOptions& opts) {
    Command cmd = cmd_in;
    cmd.in = Command::Stdio::inherit;
    cmd.out = Command::Stdio::inherit;
    cmd.err = Command::Stdio::inherit;
    OwnSignals own_signals(opts.forward_own_signals);
    ChildStdio stdio = attached_stdio(opts);
    pid_t pid = spawn(cmd, stdio, false);
    CommandResult r = AttachedWait(pid, cmd, opts, stdio, own_signals.fd()).until_exit();
    drain_after_exit(stdio, opts);
    set_status(r, reap(pid));
    return r;
}

OutputSink relaying_sink(int fd) {
    return OutputSink{-1, [fd](std::string_view chunk) {
                          // Our own output gone: drop, keep draining the command.
                          (void)write_all(fd, chunk);
                      }};
}

std::filesystem::path self_exe() {
    std::error_code ec;
    auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) throw Error(ErrorCode::general, "resolve /proc/self/exe: " + ec.message());
    return p;
}

std::filesystem::path helper_exe() {
    static const std::filesystem::path exe = [] {
        namespace fs = std::filesystem;
        fs::path self = self_exe();
        for (const fs::path& p :
             {self.parent_path() / "sandweave-helper",
              self.parent_path().parent_path() / "libexec" / "sandweave" / "sandweave-helper"})
            if (::access(p.c_str(), X_OK) == 0) return p;
        return self;
    }();
    return exe;
}

std::filesystem::path main_exe() {
    static const std::filesystem::path exe = [] {
        namespace fs = std::filesystem;
        fs::path self = self_exe();
        if (self.filename() != "sandweave-helper") return self;
        fs::path dir = self.parent_path();
        for (const fs::path& p :
             {dir / "sandweave", dir.parent_path().parent_path() / "bin" / "sandweave"})
            if (::access(p.c_str(), X_OK) == 0) return p;
        return self;  // which then says it does not run that entry point
    }();
    return exe;
}

PinnedProcess::PinnedProcess(int fd)
    : fd_(new int(fd), [](int* p) {
          ::close(*p);
          delete p;
      }) {}

std::optional<PinnedProcess> PinnedProcess::open(pid_t pid) {
    if (pid <= 0) return std::nullopt;
    int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd < 0) {
        if (errno == ESRCH) return std::nullopt;
        throw_errno("pidfd_open " + std::to_string(pid));
    }
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    return PinnedProcess(fd);
}

bool PinnedProcess::signal(int sig) {
    if (::syscall(SYS_pidfd_send_signal, *fd_, sig, nullptr, 0) == 0) return true;
    if (errno == ESRCH) return false;
    throw_errno("pidfd_send_signal");
}

bool PinnedProcess::wait_exit(std::chrono::milliseconds patience) {
    auto deadline = std::chrono::steady_clock::now() + patience;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
        pollfd p{*fd_, POLLIN, 0};
        int n = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left)));
        if (n > 0) return true;
        if (n == 0) return false;
        if (errno != EINTR) throw_errno("poll pidfd");
    }
}

}  // namespace sandweave
