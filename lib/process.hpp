#pragma once
// Process execution behind an interface. Everything that runs a program (runsc,
// debootstrap, the audit writer) goes through a CommandRunner, so the layers above
// can be unit-tested with a fake and, later, run on a worker over SSH.
//
// Contract of the local implementation: argv vectors only (never a shell string),
// every descriptor we open is close-on-exec, captured output is read while the
// child runs (no deadlock past a pipe's 64 KiB), and we waitpid() the exact pid.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace sandweave {

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
    // Descriptors handed to the child: {our fd, the child's fd number}.
    std::vector<std::pair<int, int>> pass_fds;
};

struct CommandResult {
    int exit_status = -1;  // valid when term_signal == 0
    int term_signal = 0;
    bool timed_out = false;
    std::string out;
    std::string err;

    bool ok() const { return term_signal == 0 && exit_status == 0 && !timed_out; }
    // Docker-style status: the exit code, or 128+N for a signal.
    int shell_status() const { return term_signal ? 128 + term_signal : exit_status; }
    // "exit status 3: <last line of stderr>" for error messages.
    std::string describe() const;
};

// For commands attached to the user's terminal (sandweave run): stdio inherited,
// signals forwarded, a timeout hook.
struct AttachOptions {
    std::optional<std::chrono::milliseconds> timeout;
    // Runs when the timeout expires; should ask the child to stop the workload.
    // The child gets SIGKILL if it is still alive `kill_grace` later.
    std::function<void()> on_timeout;
    std::chrono::milliseconds kill_grace{3000};
    // Called when a forwardable signal arrives, instead of kill(child, sig).
    std::function<void(int sig)> forward_signal;
};

class CommandRunner {
public:
    virtual ~CommandRunner() = default;
    virtual CommandResult run(const Command& cmd) = 0;
    // Stdio inherited; SIGINT/SIGTERM/SIGHUP/SIGQUIT sent to us by another process
    // are forwarded to the child (a terminal's Ctrl-C reaches the child directly).
    virtual CommandResult run_attached(const Command& cmd, const AttachOptions& opts) = 0;
};

class LocalRunner final : public CommandRunner {
public:
    CommandResult run(const Command& cmd) override;
    CommandResult run_attached(const Command& cmd, const AttachOptions& opts) override;
};

// Spawns a detached child (new session, stdio as given) and returns its pid
// without waiting; used for long-lived helpers such as the audit writer.
pid_t spawn_detached(const Command& cmd);

// Absolute path of the running executable (/proc/self/exe).
std::filesystem::path self_exe();

}  // namespace sandweave
