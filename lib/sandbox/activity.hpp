#pragma once
// A sandbox's activity, for its idle timeout (lib/sandbox/lifetime.hpp). Two
// facts, kept in one file of the sandbox's directory, `activity`:
//
//   - a command is running: whoever runs one holds a shared flock on the file
//     for as long as it runs (CommandActivity). flock goes with its holder, so
//     a run killed with SIGKILL never leaves the sandbox "busy" forever;
//   - the last activity: the file's mtime, touched when a command starts and
//     ends and on every API call that acts on the sandbox (touch_activity).
//
// The lifetime watcher takes the exclusive lock (without waiting) before it
// ends an idle sandbox and holds it while it terminates, so a command that
// starts meanwhile waits, then finds the sandbox stopped instead of being
// killed half-way.

#include <chrono>
#include <filesystem>
#include <optional>

#include "lib/core/fsutil.hpp"

namespace sandweave {

// Marks the last activity now. Creates the file; never throws (an activity
// mark must not fail the call it marks).
void touch_activity(const std::filesystem::path& sandbox_dir);

// A command running in the sandbox, from construction to destruction.
class CommandActivity {
  public:
    explicit CommandActivity(const std::filesystem::path& sandbox_dir);
    ~CommandActivity();
    CommandActivity(const CommandActivity&) = delete;
    CommandActivity& operator=(const CommandActivity&) = delete;

  private:
    std::filesystem::path dir_;
    std::optional<FileLock> lock_;
};

struct ActivityInfo {
    bool busy = false;                                          // a command is running
    std::optional<std::chrono::system_clock::time_point> last;  // none: never marked
};

ActivityInfo read_activity(const std::filesystem::path& sandbox_dir);

// The exclusive lock: held, no command is running or can start. Unlocked when
// one is running.
FileLock try_lock_idle(const std::filesystem::path& sandbox_dir);

}  // namespace sandweave
