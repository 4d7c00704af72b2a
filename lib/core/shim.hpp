#pragma once
// The sandbox supervisor ("shim"). `runsc run --detach` leaves the sandbox and
// gofer processes behind as orphans, and whoever adopts them must reap them
// before runsc considers a sandbox gone: with a slow host init, `runsc delete`
// then waits seconds. So sandweave starts runsc under a tiny detached process of
// its own (`sandweave __shim`) that is a child subreaper: it adopts the sandbox's
// processes, reaps them the moment they exit, and exits itself when none are left.
// For a sandbox with a lifetime it also hosts the lifetime watcher, in a thread
// (`--lifetime STATE_DIR ID`; the body comes from the executable, see
// ShimCompanion), so such a sandbox has no watcher process of its own.
//
// The shim is a detached helper (lib/core/helper.hpp): its readiness report is
// "ok" once runsc exited 0, else "error STATUS\n" followed by runsc's own error
// messages (its --log-fd); the launcher waits for that report only, never for
// the shim.

#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "lib/core/helper.hpp"
#include "lib/core/process.hpp"

namespace sandweave {

inline constexpr const char* shim_verb = "__shim";

// Runs `argv` (a detaching runsc call such as `run --detach`) under a new shim;
// stdout/stderr of runsc and the sandbox go to console_log. Gives up (and kills
// the shim's session) after `timeout`.
// With `agent_socket`, the shim also serves the guest agent there
// (lib/core/relay.hpp).
// With `lifetime` (state directory, sandbox id), the shim also watches the
// sandbox's lifetime.
LaunchResult launch_under_shim(const std::vector<std::string>& argv,
                               const std::filesystem::path& console_log,
                               std::chrono::milliseconds timeout,
                               const std::filesystem::path& agent_socket = {},
                               const std::vector<std::string>& lifetime = {});

// launch_under_shim in two steps: start() starts the shim (a HeldHelper) and
// returns at once, go() lets it run runsc and waits for the report (the
// timeout counts from there). Create starts it before it mounts the overlay,
// so the shim's exec and set-up are off its critical path. Dropped without
// go(), the shim exits without starting anything.
class HeldShim {
  public:
    static HeldShim start(const std::vector<std::string>& argv,
                          const std::filesystem::path& console_log,
                          std::chrono::milliseconds timeout,
                          const std::filesystem::path& agent_socket = {},
                          const std::vector<std::string>& lifetime = {});
    LaunchResult go();

  private:
    HeldHelper helper_;
    std::filesystem::path console_log_;
    std::chrono::milliseconds timeout_{0};
};

// What the shim runs beside the sandbox for `--lifetime ARGS`: called once
// runsc has started the sandbox and before the shim reports ready (so it can
// take a lock the launcher will find held); the body it returns then runs in
// a thread with every signal blocked until it returns or `stop_fd` (an
// eventfd) becomes readable, which it does when the sandbox's processes are
// gone. cmd/main.cpp passes the lifetime watcher (lib/sandbox/lifetime.hpp).
using ShimCompanion =
    std::function<std::function<void(int stop_fd)>(const std::vector<std::string>& args)>;

// Entry point of `sandweave __shim [--agent SOCKET] [--held] [--lifetime
// STATE_DIR ID] CONSOLE_LOG RUNSC ARGS...` (fd 3: the report; with --held,
// fd 4: the go socket).
int shim_main(const std::vector<std::string>& args, const ShimCompanion& companion = {});

}  // namespace sandweave
