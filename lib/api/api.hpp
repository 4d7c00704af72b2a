#pragma once
// The API: every operation a client can ask of a worker, as one method of
// `Api` taking a request and returning a result (lib/api/types.hpp). Clients
// hold an Api& and never know which one they have: LocalApi
// (lib/api/local.hpp) runs the operation in this process, RpcClient
// (lib/rpc/client.hpp) sends it to `sandweave serve` on another host over
// JSON-RPC (docs/protocol.md), which the server dispatches to its own LocalApi.
//
// Errors are sandweave::Error with the exit code of the README's table and the
// chain of what was being done. Below the interface: the client-side work
// written once over any Api (a one-shot run, `sandweave cp`, an audit export
// or a screenshot written on the client's host).

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "lib/api/types.hpp"

namespace sandweave::api {

// ---- the interface ---------------------------------------------------------

class Reservations;  // below: a Weave controller's

class Api {
  public:
    virtual ~Api() = default;

    virtual VersionResult version() = 0;

    virtual SandboxView create(const CreateParams& p) = 0;
    // Output streams through `io` while the command runs.
    virtual RunResult run(const RunParams& p, const RunIo& io) = 0;
    virtual ProcessList ps(const IdParams& p) = 0;
    virtual KillResult kill(const KillParams& p) = 0;
    virtual RunResult wait(const HandleParams& p) = 0;
    virtual SandboxList ls(const LsParams& p) = 0;
    virtual SandboxView inspect(const IdParams& p) = 0;
    virtual SandboxView terminate(const IdParams& p) = 0;
    virtual Removed rm(const IdParams& p) = 0;
    virtual RemovedList prune() = 0;
    // An episode's end: the final audit barrier, the export of the whole log
    // to audit_path (if given), the stop and the removal. Here as those
    // calls one after another (for a worker that does not offer it); a
    // LocalApi does it under one lock. A failed export leaves the sandbox
    // stopped, its log there to export again; nothing else is left running.
    virtual Finished finish(const FinishParams& p);

    virtual audit::Status audit_export(const AuditExportParams& p) = 0;
    // The same flush barrier and export, with the exported bytes handed to
    // `on_data` as they are read instead of written on the worker; the status
    // describes exactly those bytes (sha256, bytes). For a client that is not
    // on the worker's host (export_to_client).
    virtual audit::Status audit_fetch(const IdParams& p,
                                      const std::function<void(std::string_view)>& on_data) = 0;
    virtual audit::Status audit_status(const IdParams& p) = 0;

    virtual SnapshotRecord snapshot_create(const SnapshotCreateParams& p) = 0;
    virtual SnapshotList snapshot_ls() = 0;
    virtual Removed snapshot_rm(const IdParams& p) = 0;

    virtual PoolInfo pool_create(const PoolCreateParams& p) = 0;
    virtual SandboxView pool_acquire(const PoolAcquireParams& p) = 0;
    virtual PoolList pool_ls() = 0;
    virtual PoolInfo pool_resize(const PoolResizeParams& p) = 0;
    virtual Removed pool_rm(const NameParams& p) = 0;

    // The batch reservations this Api serves: a Weave controller's, or a
    // connection to one; null for a worker, which has none (Reservations).
    virtual Reservations* reservations() { return nullptr; }

    virtual TemplateList template_ls() = 0;
    virtual TemplateShowResult template_show(const TemplateShowParams& p) = 0;
    virtual TemplateValidateResult template_validate(const TemplateValidateParams& p) = 0;

    virtual Image image_build(const ImageBuildParams& p) = 0;
    virtual ImageList image_ls() = 0;
    virtual RecipeList image_recipes() = 0;
    virtual Removed image_rm(const NameParams& p) = 0;
    virtual Image image_import(const ImageImportParams& p) = 0;
    virtual Image image_inspect(const NameParams& p) = 0;

    virtual DoctorResult doctor() = 0;

    // The PNG is handed to `on_data` in chunks; the result describes it.
    virtual ScreenshotResult desktop_screenshot(
        const IdParams& p, const std::function<void(std::string_view)>& on_data) = 0;
    virtual Empty desktop_click(const PointerParams& p) = 0;
    virtual Empty desktop_move(const PointerParams& p) = 0;
    virtual Empty desktop_type(const TypeParams& p) = 0;
    virtual Empty desktop_key(const KeyParams& p) = 0;

    // sandweave cp: the guest side of a copy (the stream through `io`).
    virtual Empty cp_out(const CpOutParams& p, const CpIo& io) = 0;
    virtual Empty cp_in(const CpInParams& p, const CpIo& io) = 0;

    // Whether the worker serves `method` (docs/protocol.md's name); a client
    // checks before starting work that would need it half-way.
    virtual bool offers(const std::string& method) const {
        (void)method;
        return true;
    }
};

// Slots for many creates at once: a Weave controller's (a Slurm job array),
// which a batch takes before its episodes so that Slurm places them as one
// job. batch_release ends the slots not used. Only a controller serves them
// (Api::reservations), so a worker's Api does not carry them.
class Reservations {
  public:
    virtual ~Reservations() = default;
    virtual Reservation batch_reserve(const ReserveParams& p) = 0;
    virtual Removed batch_release(const IdParams& p) = 0;
};

// ---- the one-shot run ------------------------------------------------------

// create -> run -> (terminate + export the audit log to audit_log) ->
// terminate -> rm, over any Api. The first error wins, but every later step
// still runs, so nothing is left behind. `on_audit` sees the export's status.
struct OneShotParams {
    CreateParams create;
    RunParams run;  // run.id is filled in
    std::optional<std::string> audit_log;
    // Set for a remote connection: the log is fetched and written here, on the
    // client (export_to_client), and the status says it came via this address.
    std::optional<std::string> via;
};
struct OneShotResult {
    RunResult run;
    std::optional<audit::Status> audit;
    // An audit log was asked for but the sandbox has no audit: nothing ran.
    bool audit_log_refused = false;
};
OneShotResult one_shot(Api& api, const OneShotParams& p, const RunIo& io);

// Who makes the requests of a LocalApi: this process (the CLI's local
// connection), or a client of `serve` (through a socket, ssh or a
// controller), whose template files are not this host's to read: such a
// client names an installed template or sends the content (for_remote_worker).
enum class Caller { this_host, remote };

// ---- a remote worker ------------------------------------------------------

// A create request as it must travel to a worker on another host: a template
// given as a file on this host is resolved here (its extends chain included,
// from this host's template directories under `client_state_dir`) and sent
// as the resolved document; a template name or inline text goes as it is and
// resolves on the worker.
CreateParams for_remote_worker(CreateParams p, const std::filesystem::path& client_state_dir);
// The same for `template show`: a file on this host is shown as its content.
TemplateShowParams for_remote_worker(TemplateShowParams p,
                                     const std::filesystem::path& client_state_dir);
// `template validate` of a file on this host for a remote connection: checked
// here, since a worker does not read its clients' files.
TemplateValidateResult validate_on_client(const TemplateValidateParams& p,
                                          const std::filesystem::path& client_state_dir);

// ---- an export written on the client ---------------------------------------

// `audit export` for a client that is not on the worker: fetches the log
// through audit_fetch and writes PATH and PATH.status.json on this host (0600,
// temp file + fsync + rename), but only after the bytes received match the
// worker's byte count and sha256. The old sidecar goes first, and a failure
// leaves neither a partial PATH nor a new sidecar. The status gains "via"; it
// is complete only when the worker's export was complete and every byte
// arrived.
audit::Status export_to_client(Api& api, const std::string& id, const std::string& path,
                               const std::string& via);

// ---- sandweave cp on the client ----------------------------------------------

// One side of `sandweave cp`: "ID:/path" in a sandbox, or a local path ("-":
// a tar on stdin or stdout). A colon before the first slash names a sandbox,
// as with docker cp (write ./a:b for a local file named a:b).
struct CopyEndpoint {
    std::optional<std::string> sandbox;
    std::string path;
};
CopyEndpoint parse_copy_endpoint(const std::string& text);

struct CopyParams {
    CopyEndpoint src, dst;
    std::optional<std::string> user;
    // The tar of a "-" side (stdin / stdout).
    int tar_in = 0, tar_out = 1;
};
// Copies between this host and a sandbox of `api` (either direction; exactly
// one side is in a sandbox). Throws Error(usage) for a copy between two local
// or two sandbox paths. Progress goes to the thread's progress sink.
void copy(Api& api, const CopyParams& p);

// ---- a screenshot written on the client --------------------------------------

// Fetches a screenshot through desktop_screenshot and returns the PNG once its
// byte count and sha256 match the result and it passes the same PNG checks
// the worker made (a remote worker is not trusted more than a guest).
std::string fetch_screenshot(Api& api, const std::string& id, ScreenshotResult* info = nullptr);
// fetch_screenshot, then PATH on this host (0644, temp file + fsync + rename).
ScreenshotResult save_screenshot(Api& api, const std::string& id, const std::string& path);

}  // namespace sandweave::api
