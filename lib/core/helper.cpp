#include "lib/core/helper.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "lib/core/error.hpp"

namespace sandweave {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t max_report = 1u << 20;

Fd open_or_throw(const std::filesystem::path& p, int flags) {
    Fd fd(::open(p.c_str(), flags | O_CLOEXEC, 0600));
    if (!fd) throw_errno("open " + p.string());
    return fd;
}

// Each process between the launcher and the helper's exec runs on a stack of
// its own in the launcher's memory (see spawn).
constexpr std::size_t child_stack_size = 64 * 1024;

// Everything the children need, prepared before the first clone: they share
// the launcher's memory, so they only read this, make system calls and write
// to their own stacks (no allocation, no locks another thread may hold).
struct ChildPlan {
    std::vector<char*> argv;
    int null_fd, log_fd, report_fd;
    int go_fd = -1;  // a held helper's go socket, moved to helper_go_fd
    bool report_on_fd3;
    std::string exec_error;
    std::string fork_error;
    char* helper_stack_top = nullptr;
};

void write_text(int fd, const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
        ssize_t n = ::write(fd, s.data() + off, s.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        off += static_cast<std::size_t>(n);
    }
}

// Moves `fd` to a number of at least 10 (close-on-exec), so the dup2 calls
// onto 0-3 below never overwrite a source they still need.
int lift(int fd) {
    return ::fcntl(fd, F_DUPFD_CLOEXEC, 10);
}

// The children run on the stacks spawn gives them, which AddressSanitizer
// does not know as stacks: left uninstrumented, they make it no false report
// when they exec or exit there.
#define SANDWEAVE_CLONE_CHILD __attribute__((no_sanitize("address")))

// The helper, until its exec. It starts with every signal blocked (the
// launcher's mask while it clones): a handler of the launcher's must never run
// here, on memory the launcher owns, so the dispositions go back to their
// defaults before the mask is emptied.
SANDWEAVE_CLONE_CHILD int run_helper(void* arg) {
    const ChildPlan& p = *static_cast<const ChildPlan*>(arg);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s)
        if (s != SIGKILL && s != SIGSTOP) ::sigaction(s, &dfl, nullptr);
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);

    int null_fd = lift(p.null_fd), log_fd = lift(p.log_fd), report_fd = lift(p.report_fd);
    int go_fd = p.go_fd >= 0 ? lift(p.go_fd) : -1;
    if (null_fd < 0 || log_fd < 0 || report_fd < 0 || (p.go_fd >= 0 && go_fd < 0)) {
        write_text(p.report_fd, p.exec_error);
        ::_exit(127);
    }
    ::dup2(null_fd, 0);
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    if (p.report_on_fd3) ::dup2(report_fd, helper_report_fd);  // clears close-on-exec
    if (go_fd >= 0) ::dup2(go_fd, helper_go_fd);
    // What we inherited from the caller stays behind at exec.
    ::close_range(go_fd >= 0        ? helper_go_fd + 1
                  : p.report_on_fd3 ? helper_report_fd + 1
                                    : helper_report_fd,
                  ~0U, CLOSE_RANGE_CLOEXEC);
    ::execv(p.argv[0], p.argv.data());
    write_text(report_fd, p.exec_error);
    ::_exit(127);
}

// The intermediate: a session of its own, the helper, then exit, so that the
// helper is reparented away from the launcher. CLONE_VFORK holds it until the
// helper has exec'd (or exited), as it holds the launcher until this exits.
SANDWEAVE_CLONE_CHILD int run_intermediate(void* arg) {
    const ChildPlan& p = *static_cast<const ChildPlan*>(arg);
    ::setsid();
    pid_t helper = ::clone(run_helper, p.helper_stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, arg);
    if (helper < 0) write_text(p.report_fd, p.fork_error);
    ::_exit(helper < 0 ? 1 : 0);
}

HelperReport parse_report(std::string text, HelperSpec::Readiness readiness) {
    HelperReport r;
    while (!text.empty() && text.back() == '\n') text.pop_back();
    auto word = [&](const std::string& w) {
        return text.rfind(w, 0) == 0 &&
               (text.size() == w.size() || text[w.size()] == ' ' || text[w.size()] == '\n');
    };
    auto rest = [&](const std::string& w) {
        return text.size() > w.size() ? text.substr(w.size() + 1) : std::string();
    };
    if (text.empty()) {
        r.outcome = readiness == HelperSpec::Readiness::exec ? HelperReport::Outcome::ready
                                                             : HelperReport::Outcome::silent;
    } else if (word("ok")) {
        r.outcome = HelperReport::Outcome::ready;
        r.detail = rest("ok");
    } else if (word("error")) {
        r.outcome = HelperReport::Outcome::failed;
        r.detail = rest("error");
    } else {
        r.outcome = HelperReport::Outcome::garbled;
        r.detail = text;
    }
    return r;
}

// Forks the helper (through the intermediate) and returns its report pipe's
// read end and its group; with `go`, the helper's fd 4 is that socket.
std::pair<Fd, pid_t> spawn(const HelperSpec& spec, int go) {
    if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/')
        throw Error(ErrorCode::general, "internal: a helper needs an absolute program path");
    Fd null_fd = open_or_throw("/dev/null", O_RDWR);
    Fd log_fd = spec.log.empty() ? open_or_throw("/dev/null", O_WRONLY)
                                 : open_or_throw(spec.log, O_WRONLY | O_CREAT | O_APPEND);
    Pipe report = make_pipe();

    std::vector<std::string> args = spec.argv;
    ChildPlan plan;
    for (auto& a : args) plan.argv.push_back(a.data());
    plan.argv.push_back(nullptr);
    plan.null_fd = null_fd.get();
    plan.log_fd = log_fd.get();
    plan.report_fd = report.write.get();
    plan.go_fd = go;
    plan.report_on_fd3 = spec.readiness == HelperSpec::Readiness::report;
    plan.exec_error = "error cannot execute " + spec.argv[0] + "\n";
    plan.fork_error = "error cannot fork " + spec.argv[0] + "\n";

    // Two clones sharing our memory, as posix_spawn makes one, instead of two
    // forks: a fork copies the launcher's page tables and makes its pages
    // copy-on-write, which `serve` and a pool's refill paid twice per helper
    // and two helpers per sandbox. Stacks grow down: each child gets the top
    // of its own.
    std::unique_ptr<char[]> stacks(new char[2 * child_stack_size]);
    char* intermediate_stack_top = stacks.get() + child_stack_size;
    plan.helper_stack_top = stacks.get() + 2 * child_stack_size;
    sigset_t all, old;
    sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t child =
        ::clone(run_intermediate, intermediate_stack_top, CLONE_VM | CLONE_VFORK | SIGCHLD, &plan);
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);  // leaves errno as clone set it
    if (child < 0) throw_errno("clone");
    // The intermediate has exited; ECHILD (a caller ignoring SIGCHLD) is fine.
    while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
    return {std::move(report.read), child};
}

// Reads the report to EOF, for `timeout` at most (then kills the group).
HelperReport await_report(const Fd& report, pid_t group, std::chrono::milliseconds timeout,
                          HelperSpec::Readiness readiness) {
    std::string text;
    bool timed_out = false;
    auto deadline = Clock::now() + timeout;
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        pollfd pfd{report.get(), POLLIN, 0};
        int rc = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
        if (rc < 0 && errno != EINTR) throw_errno("poll");
        if (rc <= 0) continue;
        char buf[4096];
        ssize_t n = ::read(report.get(), buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (text.size() < max_report) text.append(buf, static_cast<std::size_t>(n));
    }
    if (timed_out) {
        ::kill(-group, SIGKILL);
        HelperReport r;
        r.outcome = HelperReport::Outcome::timed_out;
        r.group = group;
        return r;
    }
    HelperReport r = parse_report(std::move(text), readiness);
    r.group = group;
    return r;
}

}  // namespace

HelperReport launch_helper(const HelperSpec& spec) {
    auto [report, group] = spawn(spec, -1);
    return await_report(report, group, spec.timeout, spec.readiness);
}

HeldHelper HeldHelper::start(const HelperSpec& spec) {
    // A socket, not a pipe: go() to a helper that died sends with
    // MSG_NOSIGNAL (EPIPE, not a SIGPIPE that would kill the launcher).
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw_errno("socketpair");
    Fd ours(sv[0]), theirs(sv[1]);
    HeldHelper h;
    auto [report, group] = spawn(spec, theirs.get());
    h.report_ = std::move(report);
    h.go_ = std::move(ours);
    h.group_ = group;
    h.timeout_ = spec.timeout;
    h.readiness_ = spec.readiness;
    return h;
}

HelperReport HeldHelper::go() {
    if (!go_) throw Error(ErrorCode::general, "internal: a held helper goes once");
    while (::send(go_.get(), "g", 1, MSG_NOSIGNAL) < 0 && errno == EINTR) {
    }
    go_.reset();  // a helper that is gone already has reported why
    return await_report(report_, group_, timeout_, readiness_);
}

bool HeldHelper::wait_for_go() {
    char c = 0;
    for (;;) {
        ssize_t n = ::read(helper_go_fd, &c, 1);
        if (n < 0 && errno == EINTR) continue;
        ::close(helper_go_fd);
        return n == 1 && c == 'g';
    }
}

ReadinessReporter ReadinessReporter::inherited() {
    struct stat st {};
    if (::fstat(helper_report_fd, &st) != 0 || !S_ISFIFO(st.st_mode)) return ReadinessReporter();
    ::fcntl(helper_report_fd, F_SETFD, FD_CLOEXEC);
    return ReadinessReporter(Fd(helper_report_fd));
}

void ReadinessReporter::ready(const std::string& detail) {
    send(detail.empty() ? "ok\n" : "ok " + detail + "\n");
}

void ReadinessReporter::error(const std::string& message) {
    send("error " + message + "\n");
}

void ReadinessReporter::send(const std::string& text) {
    if (!fd_) return;
    write_text(fd_.get(), text);
    fd_.reset();
}

}  // namespace sandweave
