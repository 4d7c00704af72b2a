#pragma once
// The API spoken to a remote `sandweave serve` (docs/protocol.md): RpcClient
// implements api::Api over a byte stream, so a client holding an Api& (the
// CLI, anything above it) cannot tell a remote worker from the local one.
//
// One reader thread takes the server's lines: a response completes the call
// waiting for its id; run.output notifications are written to the run's
// output sinks as they arrive (a slow local stdout slows the remote command,
// nothing is buffered without bound); log notifications go to log(). A run's
// stdin is read by a thread of its own and sent one chunk at a time, each
// waiting for its acknowledgement. When the stream breaks, every call in
// flight fails with ErrorCode::connection (the CLI exits 255).
//
// audit_export writes its PATH on this host, not on the worker (through
// audit.fetch: api::export_to_client), as every other path a client names.
//
// Everything the server sends is untrusted: lines are bounded, and a malformed
// answer is an error, never a crash.

#include <memory>
#include <string>

#include "lib/api/api.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"

namespace sandweave::rpc {

class RpcClient final : public api::Api, public api::Reservations {
  public:
    // Reads the server's lines from `in`, writes requests to `out` (the two may
    // be one socket). `peer` names the other end in messages ("ssh://web1").
    // Performs the handshake; throws Error when the server is unusable.
    // `hello_extra` joins the hello request's params (a weave:// token).
    RpcClient(Fd in, Fd out, std::string peer,
              nlohmann::json hello_extra = nlohmann::json::object());
    ~RpcClient() override;
    RpcClient(const RpcClient&) = delete;
    RpcClient& operator=(const RpcClient&) = delete;

    const api::HelloResult& server() const;
    bool has_method(const std::string& name) const;

    // Any method by name (for a method this client has no typed call for).
    nlohmann::json call(const std::string& method, const nlohmann::json& params);

    api::VersionResult version() override;
    SandboxView create(const api::CreateParams& p) override;
    api::RunResult run(const api::RunParams& p, const api::RunIo& io) override;
    api::ProcessList ps(const api::IdParams& p) override;
    api::KillResult kill(const api::KillParams& p) override;
    api::RunResult wait(const api::HandleParams& p) override;
    api::SandboxList ls(const api::LsParams& p) override;
    SandboxView inspect(const api::IdParams& p) override;
    SandboxView terminate(const api::IdParams& p) override;
    api::Removed rm(const api::IdParams& p) override;
    api::Finished finish(const api::FinishParams& p) override;
    api::RemovedList prune() override;
    audit::Status audit_export(const api::AuditExportParams& p) override;
    audit::Status audit_fetch(const api::IdParams& p,
                              const std::function<void(std::string_view)>& on_data) override;
    audit::Status audit_status(const api::IdParams& p) override;
    SnapshotRecord snapshot_create(const api::SnapshotCreateParams& p) override;
    api::SnapshotList snapshot_ls() override;
    api::Removed snapshot_rm(const api::IdParams& p) override;
    PoolInfo pool_create(const api::PoolCreateParams& p) override;
    SandboxView pool_acquire(const api::PoolAcquireParams& p) override;
    api::PoolList pool_ls() override;
    PoolInfo pool_resize(const api::PoolResizeParams& p) override;
    api::Removed pool_rm(const api::NameParams& p) override;
    api::TemplateList template_ls() override;
    api::TemplateShowResult template_show(const api::TemplateShowParams& p) override;
    api::TemplateValidateResult template_validate(const api::TemplateValidateParams& p) override;
    api::Image image_build(const api::ImageBuildParams& p) override;
    api::ImageList image_ls() override;
    api::RecipeList image_recipes() override;
    api::Removed image_rm(const api::NameParams& p) override;
    api::Image image_import(const api::ImageImportParams& p) override;
    api::Image image_inspect(const api::NameParams& p) override;
    api::DoctorResult doctor() override;
    api::ScreenshotResult desktop_screenshot(
        const api::IdParams& p, const std::function<void(std::string_view)>& on_data) override;
    api::Empty desktop_click(const api::PointerParams& p) override;
    api::Empty desktop_move(const api::PointerParams& p) override;
    api::Empty desktop_type(const api::TypeParams& p) override;
    api::Empty desktop_key(const api::KeyParams& p) override;
    api::Empty cp_out(const api::CpOutParams& p, const api::CpIo& io) override;
    api::Empty cp_in(const api::CpInParams& p, const api::CpIo& io) override;

    bool offers(const std::string& method) const override { return has_method(method); }

    // A controller's reservations, when the server lists them.
    api::Reservations* reservations() override {
        return has_method("batch.reserve") ? this : nullptr;
    }
    api::Reservation batch_reserve(const api::ReserveParams& p) override;
    api::Removed batch_release(const api::IdParams& p) override;

  private:
    void handshake(const nlohmann::json& hello_extra);
    // The error for what the server cannot do: "PEER WHAT (it is SERVER; update
    // it)", or without "; update it" when it is our own version (a
    // controller that does not route it, say).
    Error lacks(const std::string& what) const;
    // A request that streams like sandbox.run (output notifications, run.stdin
    // from io.stdin_fd, signals and io.control forwarded): {"result": ...} or
    // {"error": ...}. With follow_window, our terminal's SIGWINCH becomes
    // run.resize (a tty run).
    nlohmann::json streamed(const std::string& method, const nlohmann::json& params,
                            const api::RunIo& io, bool follow_window = false);

    // sandbox.cp_in / cp_out: a streamed request whose stream is io's.
    api::Empty copy_request(const std::string& method, const nlohmann::json& params,
                            const api::CpIo& io);

    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace sandweave::rpc
