#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>

#include <optional>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/core/units.hpp"

namespace sandweave::cli {
namespace {

struct RunFlags {
    std::string id;
    CreateFlags create;
    std::string user, cwd, timeout, shell, audit_log;
    std::optional<std::string> entrypoint;  // --entrypoint ('' clears the sandbox's)
    std::vector<std::string> env;
    bool tty = false, interactive = false, detach = false;
};

// The local terminal in raw mode while a -t command runs (keys, Ctrl-C
// included, go to the guest's pty as bytes), restored on every way out.
class RawTerminal {
  public:
    explicit RawTerminal(int fd) : fd_(fd) {
        if (!::isatty(fd) || ::tcgetattr(fd, &saved_) != 0) return;
        termios raw = saved_;
        ::cfmakeraw(&raw);
        active_ = ::tcsetattr(fd, TCSANOW, &raw) == 0;
    }
    ~RawTerminal() {
        if (active_) ::tcsetattr(fd_, TCSANOW, &saved_);
    }
    RawTerminal(const RawTerminal&) = delete;
    RawTerminal& operator=(const RawTerminal&) = delete;

  private:
    int fd_;
    termios saved_{};
    bool active_ = false;
};

api::RunParams to_run_params(const RunFlags& f, std::vector<std::string> command) {
    api::RunParams p;
    if (!f.shell.empty() && !command.empty())
        throw Error(ErrorCode::usage,
                    "run: give either -c 'shell string' or `-- COMMAND`, not both");
    // docker run's rule (RunParams): no command runs the sandbox's entrypoint
    // and cmd; -c is the shell as entrypoint, like `--entrypoint /bin/sh -- -c S`.
    if (!f.shell.empty() && f.entrypoint)
        throw Error(ErrorCode::usage, "run: give either -c or --entrypoint, not both");
    if (!f.shell.empty()) {
        command = {"/bin/sh", "-c", f.shell};
        p.entrypoint = std::vector<std::string>{};
    } else if (f.entrypoint) {
        p.entrypoint = f.entrypoint->empty() ? std::vector<std::string>{}
                                             : std::vector<std::string>{*f.entrypoint};
    }
    p.argv = std::move(command);
    if (!f.user.empty()) {
        check_user_flag("--user", f.user);
        p.user = f.user;
    }
    if (!f.cwd.empty()) {
        if (f.cwd[0] != '/')
            throw Error(ErrorCode::usage, "--cwd '" + f.cwd + "': must be an absolute path");
        p.cwd = f.cwd;
    }
    require_utf8(f.cwd, "--cwd");
    for (const auto& e : f.env) {
        require_utf8(e, "--env");
        auto eq = e.find('=');
        if (eq == std::string::npos || eq == 0)
            throw Error(ErrorCode::usage, "--env '" + e + "': expected KEY=VALUE");
    }
    p.env = f.env;
    if (!f.timeout.empty()) {
        auto d = parse_duration(f.timeout);
        if (!d || d->count() <= 0)
            throw Error(ErrorCode::usage, "--timeout '" + f.timeout +
                                              "': expected a duration such as 30s, 500ms or 2m");
        p.timeout_ms = d->count();
    }
    p.stdin = !f.detach;
    p.tty = f.tty;
    p.detach = f.detach;
    if (f.detach && f.tty) throw Error(ErrorCode::usage, "run: --detach and -t cannot be combined");
    return p;
}

// The command's stdio is ours. A regular file opened without O_APPEND (`cmd >
// log`) is written through a pipe: gVisor writes a donated file at offsets of
// its own, from 0, and would clobber what the shell already wrote there.
// A stdin that can only ever give EOF (/dev/null, or no fd 0 at all) is not
// streamed: the command gets the guest's /dev/null, as a `docker exec` without
// -i does, and the guest makes one pipe and the host one frame fewer.
bool stdin_is_void() {
    struct stat st;
    if (::fstat(0, &st) != 0) return errno == EBADF;
    return S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
}

api::RunIo our_stdio() {
    api::RunIo io;
    io.stdin_fd = stdin_is_void() ? -1 : 0;
    io.out = relay_needed(1) ? relaying_sink(1) : OutputSink{1, {}};
    io.err = relay_needed(2) ? relaying_sink(2) : OutputSink{2, {}};
    io.forward_own_signals = true;
    return io;
}

int finish(const api::RunResult& r) {
    if (r.message) log().error(*r.message);
    return r.exit_code;
}

// One-shot: create, run, export, remove. Termination signals are held back
// (blocked) for the whole call, so cleanup always runs; one that arrives while
// the command runs is forwarded to it.
int one_shot(Session& s, const RunFlags& f, const CLI::App& sub, api::RunParams run) {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, nullptr);

    api::OneShotParams p;
    p.create = to_create_params(f.create, sub);
    if (s.remote()) p.create = api::for_remote_worker(p.create, StateStore::default_root());
    p.run = std::move(run);
    if (!f.audit_log.empty()) p.audit_log = f.audit_log;
    if (s.remote()) p.via = s.remote_url();
    auto res = api::one_shot(s.api(), p, our_stdio());
    if (res.audit_log_refused)
        throw Error(
            ErrorCode::usage,
            "run: --audit-log needs audit (add --audit or use a template with audit: true)");
    if (res.audit) {
        const auto& st = *res.audit;
        log().info("audit: " + f.audit_log + " complete=" + (st.complete ? "true" : "false") +
                   " events=" + std::to_string(st.events) +
                   " dropped=" + std::to_string(st.dropped) +
                   (st.reasons.empty() ? "" : " reasons=" + nlohmann::json(st.reasons).dump()));
        if (!st.complete)
            log().warn("the audit log " + f.audit_log + " is incomplete (see its .status.json)");
    }
    return finish(res.run);
}

}  // namespace

void register_run(CLI::App& app, GlobalOptions& g, Outcome& out,
                  std::vector<std::string>& command) {
    auto* sub = app.add_subcommand(
        "run", "Run a command in a sandbox (or, with --template, in a one-shot sandbox)");
    sub->footer(
        "Usage: sandweave run ID [options] -- COMMAND [ARGS...]\n"
        "       sandweave run ID [options] -c 'shell string'\n"
        "       sandweave run --template T [create options] -- COMMAND [ARGS...]\n"
        "With an entrypoint (an imported image's, or the template's), the words after `--`\n"
        "are its arguments and no words run its cmd, as in docker run; --entrypoint ''\n"
        "runs the words as they are.");
    auto f = std::make_shared<RunFlags>();
    sub->add_option("id", f->id, "Sandbox id or name (omit with --template for a one-shot run)");
    add_create_flags(*sub, f->create, false);
    sub->add_option("--user", f->user, "UID[:GID] to run as (default: the sandbox's user)");
    sub->add_option("--cwd", f->cwd, "Working directory in the sandbox");
    sub->add_option("-e,--env", f->env, "Environment KEY=VALUE (repeatable)")
        ->allow_extra_args(false);
    sub->add_option("--timeout", f->timeout,
                    "Kill the command and all it started after this long (exit 124), e.g. 30s");
    sub->add_option("-c", f->shell, "Run this string with /bin/sh -c");
    sub->add_option("--entrypoint", f->entrypoint,
                    "Run this program instead of the sandbox's entrypoint, dropping its cmd ('' "
                    "runs the command as given)");
    sub->add_flag(
        "-t,--tty", f->tty,
        "Give the command a terminal (a pty in the guest; raw mode here when stdin is one)");
    sub->add_flag("-i,--interactive", f->interactive,
                  "Keep stdin open (always on; accepted as in docker exec -it)");
    sub->add_flag("-d,--detach", f->detach,
                  "Start the command and print its handle (see ps, logs, kill, wait)");
    sub->add_option(
        "--audit-log", f->audit_log,
        "One-shot with audit: export the log here (and PATH.status.json) before removal");
    sub->callback([&g, &out, &command, f, sub] {
        out.docker_exit_codes = true;
        api::RunParams params = to_run_params(*f, command);
        bool one_shot_mode = sub->count("--template") > 0 || sub->count("--from-snapshot") > 0;
        if (!f->id.empty() && one_shot_mode)
            throw Error(
                ErrorCode::usage,
                "run: give a sandbox ID or --template/--from-snapshot (one-shot), not both");
        if (one_shot_mode && f->detach)
            throw Error(
                ErrorCode::usage,
                "run: --detach needs a sandbox ID (a one-shot sandbox ends with its command)");
        if (f->id.empty() && !one_shot_mode)
            throw Error(ErrorCode::usage,
                        "run: missing sandbox ID (or --template T for a one-shot sandbox)");
        bool create_flags_used = sub->count("--hidepid") || sub->count("--audit") ||
                                 sub->count("--no-audit") || sub->count("--name") ||
                                 sub->count("--label");
        if (!f->audit_log.empty() && !one_shot_mode)
            throw Error(ErrorCode::usage,
                        "run: --audit-log applies to one-shot runs (--template); use `sandweave "
                        "audit export` for a sandbox");
        if (!one_shot_mode && create_flags_used)
            throw Error(ErrorCode::usage,
                        "run: create options (--hidepid, --audit, ...) only apply with --template");
        Session s(g);
        if (one_shot_mode) {
            out.exit_code = one_shot(s, *f, *sub, std::move(params));
        } else if (f->detach) {
            params.id = f->id;
            auto r = s.api().run(params, api::RunIo{});
            if (g.json)
                print_json(api::encode_value(r));
            else
                print_line(std::to_string(r.handle.value_or(0)));
            out.exit_code = 0;
        } else {
            params.id = f->id;
            api::RunIo io = our_stdio();
            if (f->tty) {
                // One stream from a pty: no relay needed, and none of stderr.
                io.stdin_fd = 0;
                io.out = OutputSink{1, {}};
            }
            std::optional<RawTerminal> raw;
            if (f->tty) raw.emplace(0);
            auto r = s.api().run(params, io);
            raw.reset();
            out.exit_code = finish(r);
        }
    });
}

}  // namespace sandweave::cli
