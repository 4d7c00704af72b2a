#pragma once
// This process's own cgroups, and a move into the one it is already in.
//
// Why a no-op move is worth making: every write to a cgroup.procs file takes
// the kernel's global cgroup_threadgroup_rwsem for writing, and the first such
// write after a quiet spell waits a whole RCU grace period first (the
// percpu-rwsem's rcu_sync turning its readers to the slow path): 6-16 ms on
// the machines here, against 0.2 ms for a write within a few milliseconds
// after it. runsc's first act on a new sandbox is such a write (it joins the
// sandbox's cgroups before starting the gofer and the sentry). create makes
// its own harmless write on a thread at its start, so the grace period
// passes while it prepares the sandbox and runsc starts; docs/design.md,
// "The cgroup attach lock".

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandweave {

// The cgroup.procs files of the cgroups that /proc/self/cgroup (`cgroups`)
// names, where /proc/self/mountinfo (`mountinfo`) shows their hierarchy
// mounted: the unified (cgroup2) one first, then the v1 hierarchies, the ones
// whose attach does the least first (memory and cpuset last). A hierarchy
// mounted from a subtree the process's cgroup is not under is left out.
std::vector<std::filesystem::path> own_cgroup_procs_files(std::string_view cgroups,
                                                          std::string_view mountinfo);

// Writes this process's pid into the first of its own cgroup.procs files that
// takes it, which moves nothing: the process is there already. Blocks for
// the lock (see above). Returns the file written, or nullopt when none took
// it (not root, no cgroup filesystem mounted); never throws.
std::optional<std::filesystem::path> rejoin_own_cgroup();

// A sandbox's host cgroups. runsc makes "/<container id>" in every hierarchy
// when the bundle names no cgroupsPath, and removes them at `runsc delete`; a
// runsc killed between the two (an interrupted create, a killed pool refill)
// leaves them behind, empty, where only the id finds them again.
//
// The directory `name` at the top of every hierarchy mounted from its root
// (`mountinfo` as /proc/self/mountinfo), each once, existing or not.
std::vector<std::filesystem::path> top_cgroup_dirs(std::string_view name,
                                                   std::string_view mountinfo);
// Names of the cgroups at the top of those hierarchies that begin with `prefix`.
std::vector<std::string> top_cgroup_names(std::string_view prefix, std::string_view mountinfo);
// Removes the cgroup `name` in every hierarchy of this host. A cgroup whose
// last task is still exiting is busy for a moment: tried again until
// `patience` has passed. Returns the directories still there (a cgroup with
// live tasks, which the kernel never lets go); never throws.
std::vector<std::filesystem::path> remove_top_cgroups(const std::string& name,
                                                      std::chrono::milliseconds patience);
// Names beginning with `prefix` whose cgroups hold no task in any hierarchy
// and were made at least `min_age` ago: left behind, not a create that is
// about to join its cgroup (runsc makes it, then moves itself in).
std::vector<std::string> stale_top_cgroups(std::string_view prefix, std::chrono::seconds min_age);

}  // namespace sandweave
