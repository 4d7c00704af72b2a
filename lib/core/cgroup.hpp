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

#include <filesystem>
#include <optional>
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

}  // namespace sandweave
