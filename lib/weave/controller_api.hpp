#pragma once
// The controller's Api (internal to lib/weave): each sandbox lives in a
// Slurm job on the worker Slurm chose; its calls go over that job's
// WorkerLink. The map from sandbox to job is rebuilt from Slurm at start.
//
// One file per area: sandboxes.cpp (create, routing, ls, rm), pools.cpp
// (pools: members Slurm placed, refilled in the background), catalog.cpp
// (templates, images and snapshots: asked of the workers),
// controller_api.cpp (desktops, what is not routed yet, version).

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "lib/api/api.hpp"
#include "lib/weave/controller.hpp"
#include "lib/weave/worker_link.hpp"

namespace sandweave::weave {

// A sandbox and where Slurm put it.
struct Placed {
    std::string id, name, node;
    long job = 0;
    std::shared_ptr<WorkerLink> link;
};

struct ControllerPool;  // pools.cpp

class ControllerApi final : public api::Api {
  public:
    explicit ControllerApi(ClusterConfig c);
    ~ControllerApi() override;  // waits for background refills (pools.cpp)

    // The pools, from their members' jobs and records (pools.cpp); after the
    // sandboxes are back.
    void rebuild_pools();

    api::VersionResult version() override;

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

    // Desktops, routed (controller_api.cpp); doctor is not routed yet.
    api::DoctorResult doctor() override;
    api::ScreenshotResult desktop_screenshot(
        const api::IdParams& p, const std::function<void(std::string_view)>& on_data) override;
    api::Empty desktop_click(const api::PointerParams& p) override;
    api::Empty desktop_move(const api::PointerParams& p) override;
    api::Empty desktop_type(const api::TypeParams& p) override;
    api::Empty desktop_key(const api::KeyParams& p) override;

  private:
    // Every job of ours that runs, reconnected (sandboxes.cpp).
    void rebuild();

    // The sandbox an id names: its id, its name, or a unique prefix of its
    // id; and the params naming it by its full id.
    std::pair<Placed, api::IdParams> route(const std::string& id);

    template <class R>
    R via(const api::IdParams& p, R (api::Api::*fn)(const api::IdParams&)) {
        auto [pl, q] = route(p.id);
        return ((pl.link->api()).*fn)(q);
    }

    // Pools (pools.cpp). Lock order: pools_mu_ before mu_.
    Placed make_member(const ControllerPool& pool);
    SandboxView claim(const Placed& member, const std::string& pool);
    void drop_member(const std::string& id);
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
        return ((pl.link->api()).*fn)(q);
    }

    ClusterConfig c_;
    std::mutex mu_;
    std::map<std::string, Placed> placed_;
    std::mutex pools_mu_;
    std::condition_variable refills_done_;
    std::map<std::string, std::shared_ptr<ControllerPool>> pools_;
    int refills_ = 0;
    bool stopping_ = false;
};

}  // namespace sandweave::weave
