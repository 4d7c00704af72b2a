#pragma once
// The sandbox supervisor ("shim"). `runsc run --detach` leaves the sandbox and
// gofer processes behind as orphans, and whoever adopts them must reap them
// before runsc considers a sandbox gone: with a slow host init, `runsc delete`
// then waits seconds. So sandweave starts runsc under a tiny detached process of
// its own (`sandweave __shim`) that is a child subreaper: it adopts the sandbox's
// processes, reaps them the moment they exit, and exits itself when none are left.
// For a sandbox with a lifetime or a resolver it also hosts their loops, in
// threads (`--companions STATE_DIR ID`; the bodies come from the executable,
// see ShimCompanion), so such a sandbox has no watcher or resolver process of
// its own, and they end with it.
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
// (lib/runtime/relay.hpp).
// With `companions` (state directory, sandbox id), the shim also runs the
// sandbox's companions (its lifetime watcher, its resolver).
LaunchResult launch_under_shim(const std::vector<std::string>& argv,
                               const std::filesystem::path& console_log,
                               std::chrono::milliseconds timeout,
                               const std::filesystem::path& agent_socket = {},
                               const std::vector<std::string>& companions = {});

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
                          const std::vector<std::string>& companions = {});
    LaunchResult go();

  private:
    HeldHelper helper_;
    std::filesystem::path console_log_;
    std::chrono::milliseconds timeout_{0};
};

// What the shim runs beside the sandbox for `--companions ARGS`: called once
// runsc has started the sandbox and before the shim reports ready (so it can
// take a lock the launcher will find held, or bind a socket); each body it
// returns then runs in a thread of its own with every signal blocked until it
// returns or `stop_fd` (an eventfd) becomes readable, which it does when the
// sandbox's processes are gone. When it throws, the shim reports the error
// and the create fails (a companion a guarantee rests on fails closed).
// cmd/main.cpp passes lib/sandbox/companions.hpp's.
using ShimCompanion = std::function<std::vector<std::function<void(int stop_fd)>>(
    const std::vector<std::string>& args)>;

// Entry point of `sandweave __shim [--agent SOCKET] [--held] [--companions
// STATE_DIR ID] CONSOLE_LOG RUNSC ARGS...` (fd 3: the report; with --held,
// fd 4: the go socket).
int shim_main(const std::vector<std::string>& args, const ShimCompanion& companion = {});

}  // namespace sandweave
