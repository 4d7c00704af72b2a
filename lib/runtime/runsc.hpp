#pragma once
// The runsc driver: every call to gVisor's runtime goes through here, with the
// same global flags on every call for a given sandbox (runsc refuses to start a
// sandbox whose calls disagree, e.g. on --network). Output that runsc offers as
// JSON (state, list) is parsed with nlohmann, never scraped.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/process.hpp"
#include "lib/core/units.hpp"

namespace sandweave {

// Which runsc to use: --runsc, else $SANDWEAVE_RUNSC, else the patched runtime
// installed by runtime/build-runsc.sh (/usr/local/lib/sandweave/runsc), else
// `runsc` on PATH. Throws ErrorCode::runtime (exit 5) when none is usable.
std::filesystem::path find_runsc(const std::optional<std::string>& flag);
inline constexpr const char* patched_runsc_path = "/usr/local/lib/sandweave/runsc";

struct ContainerState {
    std::string status;  // "created", "running", "stopped", ...
    pid_t pid = 0;       // host pid of the sandbox's root process
};

// runsc's own record of a container: the `.state` file in its --root that
// `runsc state` and `runsc delete` read, and the lock beside it.
struct ContainerFiles {
    std::filesystem::path state_file, lock_file;
    ContainerState state;  // status as `runsc state` would say it
    pid_t gofer_pid = 0;
    bool sandbox_alive = false;  // its sandbox process (state.pid) is alive, not a zombie
};

// The files of container `id` in runsc root `root` (Runsc::container_files).
std::optional<ContainerFiles> read_container_files(const std::filesystem::path& root,
                                                   const std::string& id);

struct ExecRequest {
    std::vector<std::string> argv;
    UserSpec user;
    std::string cwd = "/";
    std::vector<std::string> env;  // "K=V"
};

class Runsc {
  public:
    Runsc(CommandRunner& runner, std::filesystem::path binary,
          std::vector<std::string> global_flags);

    // The flags every call for a sandbox carries.
    static std::vector<std::string> flags_for(
        const std::filesystem::path& root, const std::string& platform, const std::string& network,
        const std::optional<std::filesystem::path>& pod_init_config);

    const std::filesystem::path& binary() const { return binary_; }
    std::string version();  // first line of `runsc --version`

    // `runsc run --detach`: creates and starts. The sandbox inherits stdio, so it
    // goes to `console_log`, never to a pipe we would wait on.
    // With `agent_socket`, init's stdin is the guest agent's channel and the
    // supervisor serves it there (docs/agent.md). With `shim_companions` (the
    // state directory and the id), it also runs the sandbox's companions.
    void run_detached(const std::string& id, const std::filesystem::path& bundle,
                      const std::filesystem::path& console_log,
                      const std::filesystem::path& agent_socket = {},
                      const std::vector<std::string>& shim_companions = {});

    // `runsc restore --detach` of a checkpoint image into a new sandbox.
    void restore_detached(const std::string& id, const std::filesystem::path& bundle,
                          const std::filesystem::path& image,
                          const std::filesystem::path& console_log,
                          const std::filesystem::path& agent_socket = {},
                          const std::vector<std::string>& shim_companions = {});

    // The two above prepared ahead (CommandRunner::prepare_detached): the
    // supervisor starts up now, runsc only at go(), which throws as they do.
    // Dropped without go(), nothing runs.
    class Launch {
      public:
        void go();

      private:
        friend class Runsc;
        std::unique_ptr<PreparedLaunch> prepared_;
        std::string what_;
    };
    Launch prepare_run_detached(const std::string& id, const std::filesystem::path& bundle,
                                const std::filesystem::path& console_log,
                                const std::filesystem::path& agent_socket = {},
                                const std::vector<std::string>& shim_companions = {});
    Launch prepare_restore_detached(const std::string& id, const std::filesystem::path& bundle,
                                    const std::filesystem::path& image,
                                    const std::filesystem::path& console_log,
                                    const std::filesystem::path& agent_socket = {},
                                    const std::vector<std::string>& shim_companions = {});

    // Runs a process in the sandbox attached to the streams in `attach`;
    // returns its status.
    // Exit 127/126 when the program is missing / not executable (runsc's own
    // failure, read from its error log fd, not guessed from the status).
    struct ExecResult {
        int status = 0;  // Docker-style: exit code or 128+signal
        bool timed_out = false;
        bool cancelled = false;
        std::optional<std::string> runtime_error;  // runsc itself failed
    };
    ExecResult exec_attached(const std::string& id, const ExecRequest& req,
                             const std::filesystem::path& scratch_dir, const AttachOptions& attach);

    // Read from runsc's state file, as `runsc state` would (a created or
    // running container whose sandbox process is gone is "stopped"), without
    // starting runsc; `runsc state` only when the file cannot be read.
    std::optional<ContainerState> state(const std::string& id);
    // The container's files in --root; nullopt when runsc has none. Throws
    // Error when they exist but cannot be read (runsc writing them) or no
    // --root is set.
    std::optional<ContainerFiles> container_files(const std::string& id);
    // One call to the sandbox's control server (what `runsc trace list` and
    // friends do, over the sandbox's abstract socket), without starting
    // runsc: its result, or nullopt when the sandbox does not answer or
    // answers with an error (the caller falls back to the runsc command).
    std::optional<nlohmann::json> control_call(const std::string& id, const std::string& method);
    std::map<std::string, ContainerState> list();
    // `runsc events --stats`: the sandbox's usage event (parsed JSON), or
    // nullopt when runsc has no such running sandbox.
    std::optional<nlohmann::json> stats(const std::string& id);
    void kill(const std::string& id, int signal, std::optional<pid_t> guest_pid = std::nullopt);
    void remove(const std::string& id, bool force);  // runsc delete
    // `runsc run` in the foreground (no shim: the sandbox's processes exit with
    // it), stdout and stderr appended to `output`; killed after `timeout`. For
    // throwaway probe sandboxes.
    CommandResult run_to_exit(const std::string& id, const std::filesystem::path& bundle,
                              const std::filesystem::path& output,
                              std::chrono::milliseconds timeout);

    // `runsc checkpoint` into `image_dir` (which must exist); the sandbox stops.
    void checkpoint(const std::string& id, const std::filesystem::path& image_dir);
    void pause(const std::string& id);
    void resume(const std::string& id);

    CommandResult raw(std::vector<std::string> args);  // any other subcommand, captured

  private:
    std::vector<std::string> argv(std::vector<std::string> args) const;
    std::optional<std::filesystem::path> root_dir() const;

    CommandRunner& runner_;
    std::filesystem::path binary_;
    std::vector<std::string> flags_;
};

}  // namespace sandweave
