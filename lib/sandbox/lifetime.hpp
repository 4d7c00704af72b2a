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
// Enforcement is a watcher per sandbox with a lifetime that holds
// <sandbox>/lifetime.lock for as long as it watches, sleeps until the next
// deadline or until the sandbox's directory changes (inotify: a new record,
// an activity mark, the directory renamed away by rm), and stops as soon as
// the sandbox is no longer running. It is a thread of the sandbox's shim
// (lib/runtime/shim.hpp, `__shim --lifetime`), so a sandbox with a lifetime
// costs no process more. When it is due, the shim's watcher hands over to
// a detached `sandweave __lifetime` (started with launch_helper), which
// terminates the sandbox and records why (`ended_by`: "ttl" or
// "idle_timeout"): terminating runs runsc commands, whose exit the shim, a
// subreaper reaping every child, must not take from them. When no shim
// watches (it was killed, or a sandbox from before), the next `ls` or
// `inspect` that finds the lock free starts a `__lifetime` that watches too.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lib/sandbox/context.hpp"
#include "lib/sandbox/records.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

inline constexpr const char* lifetime_verb = "__lifetime";

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

// The watcher hosted by the shim (a ShimCompanion, args: state directory and
// sandbox id). Takes the watcher lock when it is free, then returns the
// thread's body: it waits while the sandbox is being created or its clock has
// not started (a warm pool member), takes the lock over if another watcher
// held it and went away, and when a deadline passes releases the lock and
// starts `__lifetime`, which ends the sandbox. It returns when the sandbox
// stops running or is removed, or when stop_fd becomes readable.
std::function<void(int stop_fd)> shim_lifetime_watcher(const std::vector<std::string>& args);

// A Slurm epilog on a Weave worker (`sandweave __slurm-epilog --state-dir
// DIR JOB`, docs/weave.md "Lifetimes"): every sandbox labelled
// `slurm_job=JOB` that still runs is terminated, final audit barrier first,
// and records `ended_by: "slurm_job"`. Returns how many it ended; one that
// cannot be ended is logged and the others still go.
inline constexpr const char* slurm_epilog_verb = "__slurm-epilog";
int end_job_sandboxes(Context& ctx, const std::string& job);

// A Weave worker's retention (`sandweave worker --retain`): a sandbox whose
// Slurm job ended keeps its record and audit log, so its export stays
// retrievable through the worker daemon; once it has been stopped longer
// than `retain` it is removed. Only sandboxes labelled `slurm_job` (Weave's)
// and stopped or failed; returns the ids removed. One that cannot be
// removed is logged and the others still go.
std::vector<std::string> remove_retained_job_sandboxes(Context& ctx, std::chrono::seconds retain,
                                                       std::chrono::system_clock::time_point now);

}  // namespace sandweave
