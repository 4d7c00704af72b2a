#pragma once
// `sandweave worker`: the root service on each Weave node that owns the
// sandboxes there (docs/weave.md, "The worker daemon"). It is `serve
// --socket` on a state directory of its own, started at boot (systemd:
// tools/systemd/sandweave-worker.service) and never by a Slurm job, so a
// sandbox's shim, audit writer and runtime are its descendants and live
// outside every job step's cgroup: a step ending (the controller's relay,
// `__relay`), a job ending or a controller restarting kills none of them.
// The Slurm job is only the sandbox's reservation and lifetime: its epilog
// ends the job's sandboxes (final audit barrier first) on the same state
// directory, under the same locks.
//
// Beside serving, the daemon keeps an ended job's sandbox (record and audit
// log) for `retain`, so the controller can still fetch its export through
// the daemon, then removes it.

#include <chrono>
#include <filesystem>

#include <optional>
#include <string>

#include "lib/rpc/server.hpp"

namespace sandweave::rpc {

struct WorkerOptions {
    std::filesystem::path state_dir;   // empty: the default state directory
    std::optional<std::string> runsc;  // an explicit runtime binary
    std::filesystem::path socket = "/run/sandweave/worker.sock";
    std::chrono::seconds retain = std::chrono::hours(24);
    // The Weave controller's Unix user, served like root (it acts for every
    // user toward Slurm already); empty: none. Other users are served only
    // from a step of their own Slurm job, and only that job's sandboxes
    // (lib/rpc/step_peer.hpp).
    std::string controller_user;
    ServeOptions serve;
};

// Serves the local API on the state directory at the socket (root, our own
// uid and the controller's user fully, a user's Slurm job step scoped to its
// job, by SO_PEERCRED and the peer's cgroups) until `stop_fd` becomes readable;
// meanwhile, at start and every minute, removes the sandboxes whose Slurm
// job ended more than `retain` ago (remove_retained_job_sandboxes).
void serve_worker(const WorkerOptions& o, int stop_fd);

}  // namespace sandweave::rpc
