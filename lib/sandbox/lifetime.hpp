#pragma once
// Lifetimes: `ttl` and `idle_timeout` (SandboxSpec::lifetime) end a sandbox
// when they pass, with the final audit barrier first (terminate_sandbox),
// whether or not any sandweave command runs meanwhile.
//
// The clock starts when the sandbox is handed to its user: at create, or for
// a pool member at acquire (a warm idle member waits without ageing). The ttl
// deadline is saved in the record (expires_at_ms); idleness is read from the
// sandbox's activity file (lib/sandbox/activity.hpp).
//
// Enforcement is a small detached process per sandbox with a lifetime,
// `sandweave __lifetime` (started with launch_helper), that holds
// <sandbox>/lifetime.lock for as long as it watches, sleeps until the next
// deadline or until the sandbox's directory changes (inotify: a new record,
// an activity mark, the directory renamed away by rm), and exits as soon as
// the sandbox is no longer running. When it is due it terminates the sandbox
// and records why (`ended_by`: "ttl" or "idle_timeout"). A watcher killed by
// accident is started again by the next `ls` or `inspect` that finds the lock
// free.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "lib/sandbox/context.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

inline constexpr const char* lifetime_verb = "__lifetime";

// How long the sandbox has left, for ls/inspect; nullopt when it has no
// lifetime or its clock has not started (a warm pool member) or it has ended.
struct TimeLeft {
    std::optional<std::chrono::milliseconds> ttl;
    std::optional<std::chrono::milliseconds> idle;  // counts only while not busy
    bool busy = false;                              // a command is running
    // The sooner of the two that is counting.
    std::optional<std::chrono::milliseconds> soonest() const;
};
std::optional<TimeLeft> time_left(const StateStore& store, const SandboxRecord& r,
                                  std::chrono::system_clock::time_point now);

// Starts the clock: sets r.expires_at_ms (the caller saves r) and marks the
// activity. A no-op without a lifetime or for a warm pool member.
void start_lifetime_clock(const StateStore& store, SandboxRecord& r);

// Makes sure a watcher runs for r (a no-op when one does, or when r has no
// lifetime or no started clock). Throws when one is needed and cannot start.
void ensure_lifetime_watcher(Context& ctx, const SandboxRecord& r);

// Body of `sandweave __lifetime --state-dir DIR ID`.
int lifetime_watch_main(Context& ctx, const std::string& id);

}  // namespace sandweave
