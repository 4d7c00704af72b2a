#pragma once
// Process execution behind an interface. Everything that runs a program (runsc,
// debootstrap, cp) goes through a CommandRunner, so the layers above can be
// unit-tested with a fake and, later, run on a worker over SSH. Long-lived
// helpers of our own (shim, audit writer, pool refill) start through
// launch_helper (lib/core/helper.hpp).
//
// Contract of the local implementation: argv vectors only (never a shell string),
// every descriptor we open is close-on-exec, captured output is read while the
// child runs (no deadlock past a pipe's 64 KiB), and we waitpid() the exact pid.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sandweave {

// Whom a command runs as. Set on a Command, the child takes these ids
// (supplementary groups, then gid, then uid) and drops every ambient
// capability before its exec, and starts in `/`: a Weave controller holding
// only CAP_SETUID and CAP_SETGID starts Slurm's commands as the user they act
// for, and none of them inherits a capability.
struct RunAs {
    std::string user;  // the name, for messages
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;  // every group of the user's, its primary one included
};

// The ids of Unix user `name`; throws Error(usage) when there is none.
RunAs run_as_user(const std::string& name);
// run_as_user's, or nullopt when `name` is empty or this process's own user
// (nothing to change, and no capability needed).
std::optional<RunAs> run_as_other(const std::string& name);

struct Command {
    enum class Stdio { inherit, null, capture, file };

    std::vector<std::string> argv;
    Stdio in = Stdio::null;
    Stdio out = Stdio::capture;
    Stdio err = Stdio::capture;
    std::filesystem::path out_file;  // for Stdio::file (opened for append)
    std::filesystem::path err_file;
    // Killed (SIGKILL) when it runs longer; the result says timed_out.
    std::optional<std::chrono::milliseconds> timeout;
    // Called with each complete stderr line while the child runs (progress).
    std::function<void(const std::string&)> on_err_line;
    std::function<void(const std::string&)> on_out_line;
    // Start the child in a process group of its own, so a terminal's signals
    // reach only us (run_attached forwards them deliberately).
    bool own_process_group = false;
    // Descriptors handed to the child: {our fd, the child's fd number}.
    std::vector<std::pair<int, int>> pass_fds;
    // launch_detached only: the supervisor donates one end of a socket pair
    // as the command's stdin (the sandbox init's channel, docs/agent.md) and
    // relays the guest agent to clients on this Unix socket.
    std::filesystem::path agent_socket;
    // launch_detached only: the supervisor also runs the sandbox's companions
    // (`--companions STATE_DIR ID`, lib/sandbox/companions.hpp: its lifetime
    // watcher, its resolver), so they need no process of their own. Empty: none.
    std::vector<std::string> shim_companions;
    // run and run_attached (local runner): the child runs as this user.
    std::optional<RunAs> run_as;
};

struct CommandResult {
    int exit_status = -1;  // valid when term_signal == 0
    int term_signal = 0;
    bool timed_out = false;
    bool cancelled = false;  // run_attached: RunControl::cancel() ended it
    std::string out;
    std::string err;

    bool ok() const { return term_signal == 0 && exit_status == 0 && !timed_out; }
    // Docker-style status: the exit code, or 128+N for a signal.
    int shell_status() const { return term_signal ? 128 + term_signal : exit_status; }
    // "exit status 3: <last line of stderr>" for error messages.
    std::string describe() const;
};

// Where one output stream of an attached command goes: a descriptor handed to
// the child as it is (fd >= 0), or a pipe we read, giving each chunk to
// on_data as it arrives (on_data set). on_data may block: the command then
// blocks on a full pipe, which is the flow control a slow reader needs.
struct OutputSink {
    int fd = -1;
    std::function<void(std::string_view chunk)> on_data;
};

// Requests for a running attached command from other threads (the API server
// relays a client's signal and cancel requests this way). Thread-safe.
class RunControl {
  public:
    RunControl();
    ~RunControl();
    RunControl(const RunControl&) = delete;
    RunControl& operator=(const RunControl&) = delete;

    void signal(int sig);
    // A new window size for the command's pty (the latest one wins).
    void resize(std::uint16_t rows, std::uint16_t cols);
    // Ends the command: on_timeout's stop hook, then SIGKILL after the grace.
    void cancel();
    bool cancelled() const;

    // For the waiting loop: readable while something is pending.
    int fd() const;
    std::vector<int> take_signals();
    // The size asked for since the last call, if any; call after take_signals.
    std::optional<std::pair<std::uint16_t, std::uint16_t>> take_resize();

  private:
    struct State;
    State* s_;
};

// For commands attached to streams (sandweave run): stdin, stdout and stderr
// as given (by default our own 0, 1 and 2), signals forwarded, a timeout hook.
struct AttachOptions {
    std::optional<std::chrono::milliseconds> timeout;
    // Runs when the timeout expires or the command is cancelled; should ask
    // the child to stop the workload. The child gets SIGKILL if it is still
    // alive `kill_grace` later.
    std::function<void()> on_timeout;
    std::chrono::milliseconds kill_grace{3000};
    // Called when a forwardable signal arrives, instead of kill(child, sig).
    std::function<void(int sig)> forward_signal;

    int stdin_fd = 0;  // handed to the child; -1 for /dev/null
    // The pty's first window size when stdin_fd is not the terminal itself
    // (a remote client's terminal); 0: the terminal's, else the agent's default.
    std::uint16_t rows = 0, cols = 0;
    OutputSink out{1, {}};
    OutputSink err{2, {}};
    // SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to this process are forwarded
    // (a command attached to the user's terminal). Off in a multi-threaded
    // server, which forwards a client's signals through `control` instead.
    bool forward_own_signals = true;
    RunControl* control = nullptr;
};

// The outcome of a detaching launch (see launch_detached).
struct LaunchResult {
    int exit_status = -1;       // of the launching command
    std::string runtime_error;  // what it wrote to its error log (fd 3), if anything
};

// A detaching launch prepared ahead: its supervisor may already be starting
// up, and runs the command at go() (see prepare_detached). Dropped without
// go(), nothing is run.
class PreparedLaunch {
  public:
    virtual ~PreparedLaunch() = default;
    virtual LaunchResult go() = 0;
};

class CommandRunner {
  public:
    virtual ~CommandRunner() = default;
    // launch_detached in two steps, for a caller with work left before the
    // command may start (create: mount, bundle): the local runner starts the
    // supervisor now, so its start-up overlaps that work. This default
    // starts nothing before go().
    virtual std::unique_ptr<PreparedLaunch> prepare_detached(
        const Command& cmd, const std::filesystem::path& console_log);
    // Runs a command that leaves long-lived processes behind (`runsc run
    // --detach`) under a supervisor that adopts and reaps them (lib/runtime/shim.hpp).
    // The command's fd 3 is an error log returned in the result; its stdout and
    // stderr (and those of what it leaves behind) go to console_log.
    virtual LaunchResult launch_detached(const Command& cmd,
                                         const std::filesystem::path& console_log) = 0;
    virtual CommandResult run(const Command& cmd) = 0;
    // Stdio as opts says; SIGINT/SIGTERM/SIGHUP/SIGQUIT (and opts.control's
    // signals) are forwarded to the child (or to opts.forward_signal). With
    // own_process_group unset, a terminal's Ctrl-C already reached the child
    // and is not sent twice.
    virtual CommandResult run_attached(const Command& cmd, const AttachOptions& opts) = 0;
};

class LocalRunner final : public CommandRunner {
  public:
    std::unique_ptr<PreparedLaunch> prepare_detached(
        const Command& cmd, const std::filesystem::path& console_log) override;
    LaunchResult launch_detached(const Command& cmd,
                                 const std::filesystem::path& console_log) override;
    CommandResult run(const Command& cmd) override;
    CommandResult run_attached(const Command& cmd, const AttachOptions& opts) override;
};

// A process that need not be our child, pinned by a pidfd: what is checked,
// signalled and waited for is the process that had the pid when it was
// opened, never a later one that got the pid again. Waiting has no polling
// tick: the pidfd becomes readable at the exit.
class PinnedProcess {
  public:
    // nullopt when there is no such process (any more).
    static std::optional<PinnedProcess> open(pid_t pid);
    // False when it has exited already.
    bool signal(int sig);
    // True once it has exited (a zombie counts), false after `patience`.
    bool wait_exit(std::chrono::milliseconds patience);

  private:
    explicit PinnedProcess(int fd);
    std::shared_ptr<int> fd_;
};

// True when handing `fd` to a child that writes at its own offset would clobber
// it: a regular file opened without O_APPEND (`cmd > log` in a shell). gVisor
// writes a donated file at offsets it tracks itself, from 0.
bool relay_needed(int fd);
// An OutputSink that copies the command's output to `fd` through a pipe (for
// an fd where relay_needed() is true).
OutputSink relaying_sink(int fd);

// Starts `cmd` (its stdio as `in`/`out`/`err` say: inherit or null; its
// pass_fds; its run_as) and returns the pid without waiting: for a child
// that lives as long as a connection (a Weave worker link's srun). The
// caller reaps it.
pid_t start_command(const Command& cmd);

// Absolute path of the running executable (/proc/self/exe).
std::filesystem::path self_exe();

// The executable for the helpers sandweave starts per sandbox (the audit
// writer, the shim): `sandweave-helper` beside this binary (a build tree) or
// in ../libexec/sandweave (an install), which links only what they need and
// so keeps less private memory per process; else this binary itself, which
// runs the same entry points. Looked up once per process.
std::filesystem::path helper_exe();
// The sandweave binary, for the entry points only it runs (`__lifetime`):
// self_exe() itself, or, in sandweave-helper, the sandweave helper_exe()
// found it from (beside it, or ../../bin/sandweave from libexec/sandweave).
std::filesystem::path main_exe();

}  // namespace sandweave
