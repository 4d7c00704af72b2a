// The Weave worker daemon (lib/rpc/worker.hpp).
#include "lib/rpc/worker.hpp"

#include <condition_variable>
#include <mutex>
#include <thread>

#include "lib/api/local.hpp"
#include "lib/core/host.hpp"
#include "lib/core/log.hpp"
#include "lib/core/process.hpp"
#include "lib/rpc/step_peer.hpp"
#include "lib/sandbox/lifetime.hpp"
#include "lib/store/state.hpp"

namespace sandweave::rpc {

namespace {

constexpr auto retention_every = std::chrono::minutes(1);

}  // namespace

void serve_worker(const WorkerOptions& o, int stop_fd) {
    LocalRunner runner;
    LocalHost host;
    StateStore store(o.state_dir.empty() ? StateStore::default_root() : o.state_dir);
    Context ctx{store, runner, host, o.runsc};
    api::LocalApi api(ctx);
    // A job step's peer is a user, not the controller: its template paths
    // name files on the worker that root would read for it, so they are
    // refused as for any remote client (it sends a template's content).
    api::LocalApi step_api(ctx, api::Caller::remote);
    std::optional<uid_t> controller_uid;
    if (!o.controller_user.empty()) controller_uid = run_as_user(o.controller_user).uid;
    ServeOptions serve = o.serve;
    serve.admit_other = [&](pid_t pid, uid_t uid) -> std::shared_ptr<api::Api> {
        if (controller_uid && uid == *controller_uid)
            return std::shared_ptr<api::Api>(&api, [](api::Api*) {});
        return admit_step_peer(step_api, store, pid, uid);
    };
    std::mutex mu;
    std::condition_variable cv;
    bool stopping = false;
    std::thread retention([&] {
        std::unique_lock<std::mutex> lk(mu);
        do {
            lk.unlock();
            try {
                for (const auto& id :
                     remove_retained_job_sandboxes(ctx, o.retain, std::chrono::system_clock::now()))
                    log().info("worker: sandbox " + id +
                               " removed: its Slurm job ended longer ago than the retention");
            } catch (const std::exception& e) {
                log().warn(std::string("worker: retention: ") + e.what());
            }
            lk.lock();
        } while (!cv.wait_for(lk, retention_every, [&] { return stopping; }));
    });
    auto join = [&] {
        {
            std::lock_guard<std::mutex> g(mu);
            stopping = true;
        }
        cv.notify_all();
        retention.join();
    };
    try {
        serve_socket(api, o.socket, stop_fd, serve);
    } catch (...) {
        join();
        throw;
    }
    join();
}

}  // namespace sandweave::rpc
