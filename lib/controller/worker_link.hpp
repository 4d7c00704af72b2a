#pragma once
// One `srun --jobid J --overlap ... sandweave __relay --socket PATH` into a
// sandbox's job on the node Slurm granted, and the API client over it to
// that node's worker daemon. The connection stays open for the sandbox's
// life and carries all its traffic.

#include <sys/types.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "lib/controller/controller.hpp"
#include "lib/rpc/client.hpp"

namespace sandweave::controller {

class WorkerLink {
  public:
    // Into sandbox job `job` on `node`, whose owner is Unix user `user`:
    // the relay runs as them (only they may start a step in their job), and
    // the worker daemon serves it only that job's sandboxes
    // (lib/rpc/step_peer.hpp). Empty `user`: the controller's own.
    WorkerLink(const ClusterConfig& c, long job, const std::string& node, const std::string& user);
    // Onto `node` for calls that name no sandbox (templates, images,
    // snapshots, reaping), in a small allocation of the controller's own
    // user for as long as it is open.
    WorkerLink(const ClusterConfig& c, const std::string& node);
    ~WorkerLink();
    WorkerLink(const WorkerLink&) = delete;
    WorkerLink& operator=(const WorkerLink&) = delete;

    rpc::RpcClient& api() { return *client_; }

    // Whether its srun has ended (the link is then broken).
    bool exited();

  private:
    void open(const ClusterConfig& c, const std::string& node,
              const std::vector<std::string>& srun_options, const std::string& peer,
              const std::string& user);
    void reap();
    std::mutex mu_;
    bool reaped_ = false;
    pid_t pid_ = -1;
    std::string peer_;
    std::unique_ptr<rpc::RpcClient> client_;
};

}  // namespace sandweave::controller
