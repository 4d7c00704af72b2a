#pragma once
// The sandbox side of the protected runtime audit: what create, terminate, rm and
// `audit export/status` do with lib/audit's writer. The writer lives in the
// sandbox's state directory (<state>/sandboxes/<id>/audit, 0700), outside every
// guest-visible path; runsc gets a --pod-init-config pointing its `remote` sink
// at the writer's socket, and the writer is started before runsc creates the
// sandbox, so no event of the guest predates it.

#include <cstdint>
#include <filesystem>
#include <optional>

#include "lib/audit/audit.hpp"
#include "lib/runtime/runsc.hpp"
#include "lib/sandbox/context.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

std::filesystem::path audit_dir(const StateStore& store, const std::string& id);

// Starts the writer for a sandbox being created and returns the path of the
// --pod-init-config file to hand to runsc.
//
// runsc connects to the writer's socket by the path in that file, and a Unix
// socket's path must fit sun_path (108 bytes). When the state directory is
// too long for that, runsc is pointed through a short alias instead:
// short_audit_root/<id>, a symlink to the sandbox's audit directory, in a
// 0700 directory of ours (the writer binds through a descriptor of its own
// directory, whatever its length).
inline constexpr const char* short_audit_root = "/run/sandweave/audit";
std::filesystem::path start_audit(Context& ctx, const SandboxRecord& r);
// Removes a sandbox's short alias, if it has one (rm, a failed create).
void remove_audit_alias(const std::string& id);
// Removes the aliases whose sandbox is gone (a create killed before it could
// clean up); returns how many. prune calls it.
int sweep_audit_aliases();

// The sentry's own dropped count (`runsc trace list`), nullopt when the runtime
// cannot say (stopped sandbox, runsc failure): the status then says
// runtime_unavailable.
std::optional<std::uint64_t> sentry_dropped(Runsc& runsc, const std::string& id);

// Final barrier and writer stop (terminate); the runtime's count is read first.
audit::Status finish_audit(Context& ctx, const SandboxRecord& r, bool sandbox_running);

// Fails closed: throws (general) when `r` is audited and its writer can no
// longer record, so nothing new runs in the sandbox unaudited (a command, a
// copy, a desktop action). `what` is what the caller wanted ("run a
// command"). Signals, waits and exports of what was recorded still work.
void require_audit_writer(Context& ctx, const SandboxRecord& r, const std::string& what);

// `audit export ID PATH`: flush barrier, atomic copy and sidecar.
audit::Status export_audit(Context& ctx, const std::string& id_or_name,
                           const std::filesystem::path& dest);

// `audit status ID`: the writer's live figures, no export.
audit::Status audit_status(Context& ctx, const std::string& id_or_name);

}  // namespace sandweave
