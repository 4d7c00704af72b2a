#pragma once
// `sandweave controller`: the API (docs/protocol.md) for clients over TLS,
// each sandbox placed by Slurm on a participating worker (docs/weave.md).
//
// No scheduling here: a sandbox.create becomes one Slurm allocation
// (`salloc --no-shell --gres=sbx:1`), and the sandbox is created on the node
// Slurm granted by that node's worker daemon (`sandweave worker`), reached
// through a relay step into the job (`srun --jobid J --overlap -w NODE
// sandweave __relay --socket PATH`). That connection stays open and carries
// the sandbox's traffic (run, cp, audit, inspect, terminate, rm); the
// sandbox belongs to the daemon, so the step's end loses nothing. The job is
// named after the sandbox (its comment is `sandweave:<id>`), so the
// controller keeps no state of its own: at start it rebuilds its map from
// `squeue --json`. rm ends the job after the worker's rm.

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "lib/api/api.hpp"

namespace sandweave::controller {

// Where Slurm's configuration is and each worker's sandweave state
// directory: the cluster.env scripts/weave-cluster.sh writes (SLURM_CONF,
// SANDWEAVE_WEAVE_STATE_<node>), or a site's file in the same form.
struct ClusterConfig {
    std::string slurm_conf;  // empty: Slurm's default
    std::map<std::string, std::string>
        state_dirs;  // node -> the worker daemon's state directory (tests, the epilog)
    // node -> the worker daemon's socket (SANDWEAVE_WEAVE_SOCKET_<node>;
    // absent: worker_socket_default): what the relay step connects to.
    std::map<std::string, std::string> sockets;
    std::string partition;      // empty: the default partition
    std::string worker_binary;  // sandweave on the workers
    // A snapshot directory every worker shares (SANDWEAVE_WEAVE_SNAPSHOTS:
    // each worker's <state>/snapshots is it); empty: no snapshots through
    // the controller.
    std::string snapshots;
    // This controller's id (controller_id()): every job it submits carries
    // it in its comment, and it takes only jobs that carry it, so two
    // controllers on one cluster never touch each other's jobs.
    std::string controller_id;
    // munged's socket on this host (SANDWEAVE_WEAVE_MUNGE_SOCKET): where the
    // controller checks clients' munge credentials; empty: munged's default.
    std::string munge_socket;
};
ClusterConfig read_cluster_env(const std::filesystem::path& file);

// The controller's id, kept in `state_dir`/id: made at its first start (12
// random hex digits), the same at every start after, so a restarted
// controller takes back its own jobs and no one else's.
std::string controller_id(const std::filesystem::path& state_dir);

// Where `sandweave worker` listens on a node unless the cluster file says
// otherwise (tools/systemd/sandweave-worker.service).
inline constexpr const char* worker_socket_default = "/run/sandweave/worker.sock";
std::string worker_socket(const ClusterConfig& c, const std::string& node);

// The API a controller serves: routes each sandbox to its worker.
std::unique_ptr<api::Api> make_controller_api(const ClusterConfig& cluster);

struct ControllerOptions {
    std::string listen = "127.0.0.1:7443";
    std::filesystem::path state_dir;              // certificate, key, token, fingerprint
    std::filesystem::path cert, key, token_file;  // empty: in state_dir, made at first start
    std::string server_name;
    std::string munge_socket;  // munged's socket for unmunge; empty: its default
    // Connections served at once; one past it is answered "controller busy"
    // and closed. Each costs two threads and three descriptors while it lasts.
    std::size_t max_connections = 1024;
};

// Listens for TLS clients until `stop_fd` becomes readable; each connection
// must prove an identity in hello (a token, or a munge credential:
// lib/controller/identity.hpp), then speaks the protocol to `api` as it.
void serve_controller(api::Api& api, const ControllerOptions& opts, int stop_fd);

}  // namespace sandweave::controller
