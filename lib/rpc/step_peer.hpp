#pragma once
// Whom a Weave worker daemon (lib/rpc/worker.hpp) serves besides root and
// its own uid: the relay (`__relay`, lib/rpc/socket_relay.hpp) the
// controller starts as a sandbox's user in that user's Slurm job, and only
// for that job's sandboxes.
//
// A peer of uid U is admitted when the kernel puts the connecting process in
// a step of a Slurm job of uid U: proctrack/cgroup on cgroup v1 files every
// step's processes under `.../slurm<...>/uid_U/job_J/step_S` of the freezer
// hierarchy, directories only root (slurmstepd) can move a process into.
// The connection is then scoped to job J: it sees, runs in, copies from and
// removes only sandboxes labelled `slurm_job=J`; a create on it gets that
// label from the daemon, whatever the client sent; calls that name no
// sandbox are read-only ones (templates, images, version) or are refused.
// Anything else (no Slurm step, another uid's cgroup, cgroup v2, where the
// path carries no uid) is refused: fail closed.

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>

#include "lib/api/api.hpp"

namespace sandweave {
class StateStore;
}

namespace sandweave::rpc {

// The label a Weave controller puts on each sandbox (and its snapshots)
// naming the Unix user who owns it.
inline constexpr const char* weave_owner_label = "weave_owner";

// The job step a process runs in, as its cgroups say.
struct SlurmStep {
    uid_t uid = 0;
    long job = 0;
    std::string step;  // "0", "batch", "extern", "interactive", ...
};

// Reads the contents of /proc/PID/cgroup: the freezer hierarchy's
// `.../slurm*/uid_U/job_J/step_S[/...]`; nullopt when it shows none.
std::optional<SlurmStep> parse_slurm_cgroup(const std::string& proc_pid_cgroup);

// The step process `pid` runs in now; nullopt when it is in none (or gone).
std::optional<SlurmStep> slurm_step_of(pid_t pid);

// The API a peer of Unix user `user` in a step of job `job` is served:
// `base` limited to that job's sandboxes (labels read from `store`, the
// daemon's state) and to `user`'s snapshots.
std::unique_ptr<api::Api> job_scoped(api::Api& base, StateStore& store, long job,
                                     const std::string& user);

// What a worker daemon serves peer (pid, uid), neither root nor its own
// uid: job_scoped() for a step of that uid's job, else throws
// Error(usage) with the one line the peer is refused with.
std::unique_ptr<api::Api> admit_step_peer(api::Api& base, StateStore& store, pid_t pid, uid_t uid);

}  // namespace sandweave::rpc
