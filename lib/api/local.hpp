#pragma once
// The API on this host: LocalApi runs each operation with the worker-side
// code of lib/sandbox against the state directory of its Context. The CLI
// makes one for a local connection (cmd/common.cpp) and `sandweave serve`
// makes one per client. Parameters are checked here, in the library's own
// words (no CLI flag names), because params may come from any client. This is
// the only API header that includes the worker's libraries.

#include <functional>
#include <string>
#include <string_view>

#include "lib/api/api.hpp"
#include "lib/api/types.hpp"
#include "lib/core/units.hpp"
#include "lib/options/template.hpp"
#include "lib/sandbox/context.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave::api {

// The API on this host: the worker-side operations of lib/sandbox.
class LocalApi final : public Api {
  public:
    explicit LocalApi(Context ctx, Caller caller = Caller::this_host)
        : ctx_(ctx), caller_(caller) {}

    VersionResult version() override;
    SandboxView create(const CreateParams& p) override;
    RunResult run(const RunParams& p, const RunIo& io) override;
    ProcessList ps(const IdParams& p) override;
    KillResult kill(const KillParams& p) override;
    RunResult wait(const HandleParams& p) override;
    SandboxList ls(const LsParams& p) override;
    SandboxView inspect(const IdParams& p) override;
    SandboxView terminate(const IdParams& p) override;
    Removed rm(const IdParams& p) override;
    Finished finish(const FinishParams& p) override;
    RemovedList prune() override;
    audit::Status audit_export(const AuditExportParams& p) override;
    audit::Status audit_fetch(const IdParams& p,
                              const std::function<void(std::string_view)>& on_data) override;
    audit::Status audit_status(const IdParams& p) override;
    SnapshotRecord snapshot_create(const SnapshotCreateParams& p) override;
    SnapshotList snapshot_ls() override;
    Removed snapshot_rm(const IdParams& p) override;
    PoolInfo pool_create(const PoolCreateParams& p) override;
    SandboxView pool_acquire(const PoolAcquireParams& p) override;
    PoolList pool_ls() override;
    PoolInfo pool_resize(const PoolResizeParams& p) override;
    Removed pool_rm(const NameParams& p) override;
    // Everything but a controller's own methods (batch reservations).
    bool offers(const std::string& method) const override;
    TemplateList template_ls() override;
    TemplateShowResult template_show(const TemplateShowParams& p) override;
    TemplateValidateResult template_validate(const TemplateValidateParams& p) override;
    Image image_build(const ImageBuildParams& p) override;
    ImageList image_ls() override;
    RecipeList image_recipes() override;
    Removed image_rm(const NameParams& p) override;
    Image image_import(const ImageImportParams& p) override;
    Image image_inspect(const NameParams& p) override;
    DoctorResult doctor() override;
    ScreenshotResult desktop_screenshot(
        const IdParams& p, const std::function<void(std::string_view)>& on_data) override;
    Empty desktop_click(const PointerParams& p) override;
    Empty desktop_move(const PointerParams& p) override;
    Empty desktop_type(const TypeParams& p) override;
    Empty desktop_key(const KeyParams& p) override;
    Empty cp_out(const CpOutParams& p, const CpIo& io) override;
    Empty cp_in(const CpInParams& p, const CpIo& io) override;

  private:
    TemplateResolver templates() const;
    // For a remote caller: refuses a template it gives as a path (see Caller).
    void check_caller_template(const CreateParams& p) const;
    Context ctx_;
    Caller caller_;
};

// Request validation shared by every implementation (and fuzzed): turns
// params into the library's request, or throws Error(usage) saying what is
// wrong in the API's terms.
CreateRequest to_create_request(const CreateParams& p);
// "UID[:GID]" as a user; throws Error(usage).
UserSpec parse_user_param(const std::string& text);
RunRequest to_run_request(const RunParams& p);

}  // namespace sandweave::api
