#pragma once
// The protocol table: one row per request/result method of docs/protocol.md,
// binding its name to its params type, its result type and the Api member
// that serves it. The server's dispatch (methods.cpp) and the RPC client's
// stubs (lib/rpc/client.cpp) are both made from these rows, so a name is
// written once and a stub cannot send one method's params under another's
// name. Methods that need a connection's streams (sandbox.run, run.*,
// sandbox.cp_*, audit.fetch, desktop.screenshot, hello) are not rows:
// lib/rpc serves them.

#include "lib/api/api.hpp"

namespace sandweave::api {

// A method taking P and answering R, served by a member of On: of Api (every
// worker and controller serves it), or of Reservations (only a Weave
// controller does: a worker neither lists nor serves it).
template <class P, class R, class On = Api>
struct Row {
    const char* name;
    R (On::*serve)(const P&);
};
// A method without params.
template <class R>
struct Row0 {
    const char* name;
    R (Api::*serve)();
};

namespace protocol {

inline constexpr Row0<VersionResult> version{"version", &Api::version};
inline constexpr Row<CreateParams, SandboxView> sandbox_create{"sandbox.create", &Api::create};
inline constexpr Row<LsParams, SandboxList> sandbox_ls{"sandbox.ls", &Api::ls};
inline constexpr Row<IdParams, SandboxView> sandbox_inspect{"sandbox.inspect", &Api::inspect};
inline constexpr Row<IdParams, ProcessList> sandbox_ps{"sandbox.ps", &Api::ps};
inline constexpr Row<KillParams, KillResult> sandbox_kill{"sandbox.kill", &Api::kill};
inline constexpr Row<HandleParams, RunResult> sandbox_wait{"sandbox.wait", &Api::wait};
inline constexpr Row<IdParams, SandboxView> sandbox_terminate{"sandbox.terminate", &Api::terminate};
inline constexpr Row<IdParams, Removed> sandbox_rm{"sandbox.rm", &Api::rm};
inline constexpr Row<FinishParams, Finished> sandbox_finish{"sandbox.finish", &Api::finish};
inline constexpr Row0<RemovedList> sandbox_prune{"sandbox.prune", &Api::prune};
inline constexpr Row<AuditExportParams, audit::Status> audit_export{"audit.export",
                                                                    &Api::audit_export};
inline constexpr Row<IdParams, audit::Status> audit_status{"audit.status", &Api::audit_status};
inline constexpr Row<SnapshotCreateParams, SnapshotRecord> snapshot_create{"snapshot.create",
                                                                           &Api::snapshot_create};
inline constexpr Row0<SnapshotList> snapshot_ls{"snapshot.ls", &Api::snapshot_ls};
inline constexpr Row<IdParams, Removed> snapshot_rm{"snapshot.rm", &Api::snapshot_rm};
inline constexpr Row<PoolCreateParams, PoolInfo> pool_create{"pool.create", &Api::pool_create};
inline constexpr Row<PoolAcquireParams, SandboxView> pool_acquire{"pool.acquire",
                                                                  &Api::pool_acquire};
inline constexpr Row0<PoolList> pool_ls{"pool.ls", &Api::pool_ls};
inline constexpr Row<PoolResizeParams, PoolInfo> pool_resize{"pool.resize", &Api::pool_resize};
inline constexpr Row<NameParams, Removed> pool_rm{"pool.rm", &Api::pool_rm};
inline constexpr Row<ReserveParams, Reservation, Reservations> batch_reserve{
    "batch.reserve", &Reservations::batch_reserve};
inline constexpr Row<IdParams, Removed, Reservations> batch_release{"batch.release",
                                                                    &Reservations::batch_release};
inline constexpr Row0<TemplateList> template_ls{"template.ls", &Api::template_ls};
inline constexpr Row<TemplateShowParams, TemplateShowResult> template_show{"template.show",
                                                                           &Api::template_show};
inline constexpr Row<TemplateValidateParams, TemplateValidateResult> template_validate{
    "template.validate", &Api::template_validate};
inline constexpr Row<ImageBuildParams, Image> image_build{"image.build", &Api::image_build};
inline constexpr Row0<ImageList> image_ls{"image.ls", &Api::image_ls};
inline constexpr Row0<RecipeList> image_recipes{"image.recipes", &Api::image_recipes};
inline constexpr Row<NameParams, Removed> image_rm{"image.rm", &Api::image_rm};
inline constexpr Row<ImageImportParams, Image> image_import{"image.import", &Api::image_import};
inline constexpr Row<NameParams, Image> image_inspect{"image.inspect", &Api::image_inspect};
inline constexpr Row0<DoctorResult> doctor{"doctor", &Api::doctor};
inline constexpr Row<PointerParams, Empty> desktop_click{"desktop.click", &Api::desktop_click};
inline constexpr Row<PointerParams, Empty> desktop_move{"desktop.move", &Api::desktop_move};
inline constexpr Row<TypeParams, Empty> desktop_type{"desktop.type", &Api::desktop_type};
inline constexpr Row<KeyParams, Empty> desktop_key{"desktop.key", &Api::desktop_key};

}  // namespace protocol
}  // namespace sandweave::api
