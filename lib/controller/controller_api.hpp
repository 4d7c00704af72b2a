#pragma once
// The controller's Api (internal to lib/controller): each sandbox lives in a
// Slurm job on the worker Slurm chose; its calls go over that job's
// WorkerLink. The map from sandbox to job is rebuilt from Slurm at start.
//
// One file per area: sandboxes.cpp (create, routing, ls, rm), watch.cpp
// (what Slurm says: lost workers, ended jobs, reapers), pools.cpp (pools:
// members Slurm placed, refilled in the background), catalog.cpp
// (templates, images and snapshots: asked of the workers), doctor.cpp,
// controller_api.cpp (desktops, version).

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/api/api.hpp"
#include "lib/controller/classify.hpp"
#include "lib/controller/controller.hpp"
#include "lib/controller/slurm.hpp"
#include "lib/controller/worker_link.hpp"
#include "lib/core/error.hpp"
#include "lib/rpc/step_peer.hpp"

namespace sandweave::controller {

// The label a sandbox carries on its worker naming its owner (a Unix user):
// its snapshots carry it too, which is how the controller tells whose a
// snapshot is.
// The worker daemon reads it too (lib/rpc/step_peer.hpp).
inline constexpr const char* owner_label = rpc::weave_owner_label;

// A sandbox and where Slurm put it.
struct Placed {
    std::string id, name, node;
    long job = 0;
    std::shared_ptr<WorkerLink> link;  // null once lost or ended
    SandboxView view;                  // what the worker last said of it
    // Set once Slurm says the worker failed (lost) or the job ended
    // (stopped: the worker's epilog terminated it); `why` says which.
    std::optional<SandboxState> gone;
    std::string why;
    int missing = 0;  // polls in a row whose squeue did not list its job
    // Set while its job runs but its worker daemon cannot be reached (the
    // relay's error): shown by ls and inspect, cleared when it answers again.
    std::string unreachable;
    // The Unix user who owns it (lib/controller/identity.hpp; owner_of).
    std::string owner;
};

// Whose a sandbox is, from what outlives the controller: its job's user
// when Slurm runs the job as someone other than the controller's user (a job
// made as its user), else the owner label the controller gave it at create
// (on its worker, in `v`); empty when neither says (an admin's to see).
std::string owner_of(const SandboxView& v, const std::string& job_user);

struct ControllerPool;  // pools.cpp

class ControllerApi final : public api::Api, public api::Reservations {
  public:
    // Slurm's commands go through `runner` (a fake one in unit tests).
    explicit ControllerApi(ClusterConfig c,
                           std::shared_ptr<CommandRunner> runner = std::make_shared<LocalRunner>());
    ~ControllerApi() override;  // stops the watcher, waits for background refills

    // The pools, from their members' jobs and records (pools.cpp); after the
    // sandboxes are back.
    void rebuild_pools();

    api::VersionResult version() override;

    // The controller, Slurm and each worker's own doctor (doctor.cpp).
    api::DoctorResult doctor() override;

    // Sandboxes (sandboxes.cpp).
    SandboxView create(const api::CreateParams& p) override;
    api::RunResult run(const api::RunParams& p, const api::RunIo& io) override;
    api::ProcessList ps(const api::IdParams& p) override;
    api::KillResult kill(const api::KillParams& p) override;
    api::RunResult wait(const api::HandleParams& p) override;
    api::SandboxList ls(const api::LsParams& p) override;
    SandboxView inspect(const api::IdParams& p) override;
    SandboxView terminate(const api::IdParams& p) override;
    api::Removed rm(const api::IdParams& p) override;
    api::RemovedList prune() override;
    audit::Status audit_export(const api::AuditExportParams& p) override;
    audit::Status audit_fetch(const api::IdParams& p,
                              const std::function<void(std::string_view)>& on_data) override;
    audit::Status audit_status(const api::IdParams& p) override;
    api::Empty cp_out(const api::CpOutParams& p, const api::CpIo& io) override;
    api::Empty cp_in(const api::CpInParams& p, const api::CpIo& io) override;

    // Reservations: a batch's slots as a Slurm job array (reservations.cpp).
    api::Reservations* reservations() override { return this; }
    api::Reservation batch_reserve(const api::ReserveParams& p) override;
    api::Removed batch_release(const api::IdParams& p) override;

    // Pools (pools.cpp).
    PoolInfo pool_create(const api::PoolCreateParams& p) override;
    SandboxView pool_acquire(const api::PoolAcquireParams& p) override;
    api::PoolList pool_ls() override;
    PoolInfo pool_resize(const api::PoolResizeParams& p) override;
    api::Removed pool_rm(const api::NameParams& p) override;

    // Snapshots, templates and images, from the workers (catalog.cpp).
    SnapshotRecord snapshot_create(const api::SnapshotCreateParams& p) override;
    api::SnapshotList snapshot_ls() override;
    api::Removed snapshot_rm(const api::IdParams& p) override;
    api::TemplateList template_ls() override;
    api::TemplateShowResult template_show(const api::TemplateShowParams& p) override;
    api::TemplateValidateResult template_validate(const api::TemplateValidateParams& p) override;
    api::Image image_build(const api::ImageBuildParams& p) override;
    api::ImageList image_ls() override;
    api::RecipeList image_recipes() override;
    api::Removed image_rm(const api::NameParams& p) override;
    api::Image image_import(const api::ImageImportParams& p) override;
    api::Image image_inspect(const api::NameParams& p) override;

    // Desktops, routed (controller_api.cpp).
    api::ScreenshotResult desktop_screenshot(
        const api::IdParams& p, const std::function<void(std::string_view)>& on_data) override;
    api::Empty desktop_click(const api::PointerParams& p) override;
    api::Empty desktop_move(const api::PointerParams& p) override;
    api::Empty desktop_type(const api::TypeParams& p) override;
    api::Empty desktop_key(const api::KeyParams& p) override;

  private:
    // One sandbox of `p` in a Slurm allocation of its own (sandboxes.cpp):
    // the grant (held as in flight, so the reaper spares it, until the
    // sandbox is placed), the worker's create with the slurm_job label the
    // epilog looks for, then `name_job` names the job after it. On any
    // failure the job is cancelled.
    // The job is `owner`'s (a Unix user: `--uid`), and so is the sandbox.
    Placed place(api::CreateParams p, slurm::AllocationRequest req, const std::string& owner,
                 const std::function<void(long, const std::string&)>& name_job);
    // The same in a job Slurm already runs for `owner` (a reservation's slot).
    Placed place_in(long job, api::CreateParams p, const std::string& owner,
                    const std::function<void(long, const std::string&)>& name_job);
    // The full id of the caller's snapshot `id` names (its id, name or a
    // unique prefix); not_found for anyone else's (catalog.cpp).
    std::string own_snapshot(const std::string& id);
    // A create in a reservation's slot (reservations.cpp).
    SandboxView create_in_slot(const api::CreateParams& p);
    std::string array_owner(long array, std::vector<slurm::Job> jobs);
    bool stopping();

    // What Slurm says, acted on (watch.cpp): observed (squeue, sinfo),
    // classified (classify.hpp, pure), acted on: placed sandboxes whose
    // worker failed become lost, whose job ended stopped; a running job of
    // ours that no one holds is taken back (at start: every one) or, when
    // its worker does not know its sandbox or it was never named, cancelled.
    // At `first` (the start) and every few polls it also reaps the workers'
    // sandboxes whose job Slurm no longer runs. Serialised by watch_mu_.
    void watch_once(bool first = false);
    void watch_loop();
    // What the controller holds, for classify (under watch_mu_).
    Holdings holdings(bool first);
    // watch_once's steps. The decisions about the controller's own view,
    // under mu_: whether a sandbox went (lost or ended), with the links of
    // those that did in `dropped` (closed by the caller, outside the lock).
    bool apply_to_view(const Holdings& held, const std::vector<Decision>& decisions,
                       std::vector<std::shared_ptr<WorkerLink>>& dropped);
    // The decisions for Slurm: jobs, job arrays and slots to cancel.
    void apply_to_slurm(const std::vector<Decision>& decisions);
    // The workers to reap (`reap` decisions) against the jobs Slurm runs.
    void reap_all(const std::vector<Decision>& decisions, const Observation& seen);
    // Removes the sandboxes on `node` labelled with a job not in `live`.
    void reap_worker(const std::string& node, const std::set<std::string>& live);
    // Reconnects to a running job's sandbox (`job_user`: Slurm's user of the
    // job, for its owner); cancels the job when its worker does not know the
    // sandbox.
    // Returns false when it could not reach the worker (then the sandbox, if
    // placed, carries the reason in `unreachable`).
    bool adopt(long job, const std::string& id, const std::string& node,
               const std::string& job_user);
    // adopt for every `reconnect` among `decisions`, several at once;
    // counts the failures in tries_.
    void adopt_all(const std::vector<Decision>& decisions);
    // On a broken link: asks Slurm now; a sandbox Slurm calls lost or ended
    // gets that one line instead of the link's error.
    [[noreturn]] void link_failed(const Placed& pl, const Error& e);
    // Throws when the sandbox is lost or ended (only inspect, ls, audit
    // status/fetch and rm still answer for it).
    static void require_live(const Placed& pl);
    // An audit call for a sandbox whose job ended, on its worker daemon
    // (which keeps it for its retention) without a step in the ended job;
    // an incomplete status saying why when the worker cannot answer.
    audit::Status on_worker_of_ended(const Placed& pl,
                                     const std::function<audit::Status(api::Api&)>& fn);

    // The call `fn` on the sandbox's link, with link_failed on a broken one.
    // A link already known to be broken (its relay ended: the controller
    // restarted, the step was killed, the worker daemon restarted) is
    // replaced before the call, so the call is not lost to it.
    template <class F>
    auto on_link(const Placed& placed, F&& fn) {
        require_live(placed);
        Placed pl = placed;
        if (pl.link->exited()) pl = relink(pl);
        try {
            return fn(pl.link->api());
        } catch (const Error& e) {
            if (e.code() != ErrorCode::connection) throw;
            link_failed(pl, e);
        }
    }
    // A new link for `pl` (adopt); throws the worker's reason when there is none.
    Placed relink(const Placed& pl);

    // The sandbox an id names among the caller's (an admin's: everyone's):
    // its id, its name, or a unique prefix of its id; and the params naming
    // it by its full id. Another user's is "no such sandbox", as one that
    // does not exist.
    std::pair<Placed, api::IdParams> route(const std::string& id);

    template <class R>
    R via(const api::IdParams& p, R (api::Api::*fn)(const api::IdParams&)) {
        auto [pl, q] = route(p.id);
        return on_link(pl, [&, q = q](api::Api& a) { return (a.*fn)(q); });
    }

    // At exit (pools.cpp): waits a while for background refills, then closes
    // every worker connection at once.
    void stop_refills_and_links();
    // Cancels the job of a sandbox that was removed, unnamed first.
    void end_removed_job(long job);

    // Pools (pools.cpp). Lock order: pools_mu_ before mu_.
    Placed make_member(const ControllerPool& pool);
    SandboxView claim(const Placed& member, const std::string& pool);
    void drop_member(const std::string& id);
    // Idle members whose worker was lost or whose job ended leave their pool,
    // which refills (the watcher calls it; takes pools_mu_).
    void replace_gone_members();
    void start_refill(const std::shared_ptr<ControllerPool>& pool);
    void refill(std::shared_ptr<ControllerPool> pool);
    void retag(const ControllerPool& pool);
    PoolInfo info_of(ControllerPool& pool);
    std::shared_ptr<ControllerPool> find_pool(const std::string& name);

    // A worker connection for calls that name no sandbox (catalog.cpp): one
    // a sandbox already has on that node, else a short-lived step.
    std::shared_ptr<WorkerLink> link_to(const std::string& node);

    // A call whose params name the sandbox in `id`, sent with its full id.
    template <class P, class R>
    R routed(const P& p, R (api::Api::*fn)(const P&)) {
        Placed pl = route(p.id).first;
        P q = p;
        q.id = pl.id;
        return on_link(pl, [&, q = q](api::Api& a) { return (a.*fn)(q); });
    }

    ClusterConfig c_;
    slurm::Client slurm_;  // this controller's: its jobs carry c_.controller_id
    std::mutex mu_;        // placed_, in_flight_, ending_
    std::map<std::string, Placed> placed_;
    std::set<long> in_flight_;  // jobs granted to a create not yet named
    // Jobs of sandboxes the controller removes itself (rm, a pool member
    // dropped), until Slurm no longer lists them: not adopted back meanwhile.
    std::set<long> ending_;
    std::map<long, std::string> array_owners_;  // reservations' users, as Slurm has them

    std::mutex pools_mu_;
    std::condition_variable refills_done_;
    std::map<std::string, std::shared_ptr<ControllerPool>> pools_;
    int refills_ = 0;
    bool refills_stopping_ = false;

    std::mutex watch_mu_;        // one watch_once at a time
    std::map<long, int> tries_;  // running jobs adopt failed for, and how often
    unsigned polls_ = 0;
    // The name of this controller's jobs before their sandbox names them
    // (`sandweave-` and random hex): an unnamed job with another name is a
    // create of a controller that is gone.
    std::string instance_;
    std::mutex stop_mu_;
    std::condition_variable stop_cv_;
    bool stopping_ = false;
    std::thread watcher_;
};

}  // namespace sandweave::controller
