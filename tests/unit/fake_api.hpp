#pragma once
// An Api for unit tests of the logic above the interface (the batch runner,
// anything written over any Api): every method throws, naming itself, so a
// test overrides exactly the calls it expects and an unexpected call fails
// loudly instead of answering something made up. The real implementations
// are tested against the real runtime by the integration tests.

#include <string>

#include "lib/api/api.hpp"
#include "lib/core/error.hpp"

namespace sandweave::testing {

class FakeApi : public api::Api {
  public:
    api::VersionResult version() override { unexpected("version"); }
    SandboxView create(const api::CreateParams&) override { unexpected("create"); }
    api::RunResult run(const api::RunParams&, const api::RunIo&) override { unexpected("run"); }
    api::ProcessList ps(const api::IdParams&) override { unexpected("ps"); }
    api::KillResult kill(const api::KillParams&) override { unexpected("kill"); }
    api::RunResult wait(const api::HandleParams&) override { unexpected("wait"); }
    api::SandboxList ls(const api::LsParams&) override { unexpected("ls"); }
    SandboxView inspect(const api::IdParams&) override { unexpected("inspect"); }
    SandboxView terminate(const api::IdParams&) override { unexpected("terminate"); }
    api::Removed rm(const api::IdParams&) override { unexpected("rm"); }
    api::RemovedList prune() override { unexpected("prune"); }
    audit::Status audit_export(const api::AuditExportParams&) override {
        unexpected("audit_export");
    }
    audit::Status audit_fetch(const api::IdParams&,
                              const std::function<void(std::string_view)>&) override {
        unexpected("audit_fetch");
    }
    audit::Status audit_status(const api::IdParams&) override { unexpected("audit_status"); }
    SnapshotRecord snapshot_create(const api::SnapshotCreateParams&) override {
        unexpected("snapshot_create");
    }
    api::SnapshotList snapshot_ls() override { unexpected("snapshot_ls"); }
    api::Removed snapshot_rm(const api::IdParams&) override { unexpected("snapshot_rm"); }
    PoolInfo pool_create(const api::PoolCreateParams&) override { unexpected("pool_create"); }
    SandboxView pool_acquire(const api::PoolAcquireParams&) override { unexpected("pool_acquire"); }
    api::PoolList pool_ls() override { unexpected("pool_ls"); }
    PoolInfo pool_resize(const api::PoolResizeParams&) override { unexpected("pool_resize"); }
    api::Removed pool_rm(const api::NameParams&) override { unexpected("pool_rm"); }
    api::TemplateList template_ls() override { unexpected("template_ls"); }
    api::TemplateShowResult template_show(const api::TemplateShowParams&) override {
        unexpected("template_show");
    }
    api::TemplateValidateResult template_validate(const api::TemplateValidateParams&) override {
        unexpected("template_validate");
    }
    api::Image image_build(const api::ImageBuildParams&) override { unexpected("image_build"); }
    api::ImageList image_ls() override { unexpected("image_ls"); }
    api::RecipeList image_recipes() override { unexpected("image_recipes"); }
    api::Removed image_rm(const api::NameParams&) override { unexpected("image_rm"); }
    api::Image image_import(const api::ImageImportParams&) override { unexpected("image_import"); }
    api::Image image_inspect(const api::NameParams&) override { unexpected("image_inspect"); }
    api::DoctorResult doctor() override { unexpected("doctor"); }
    api::ScreenshotResult desktop_screenshot(
        const api::IdParams&, const std::function<void(std::string_view)>&) override {
        unexpected("desktop_screenshot");
    }
    api::Empty desktop_click(const api::PointerParams&) override { unexpected("desktop_click"); }
    api::Empty desktop_move(const api::PointerParams&) override { unexpected("desktop_move"); }
    api::Empty desktop_type(const api::TypeParams&) override { unexpected("desktop_type"); }
    api::Empty desktop_key(const api::KeyParams&) override { unexpected("desktop_key"); }
    api::Empty cp_out(const api::CpOutParams&, const api::CpIo&) override { unexpected("cp_out"); }
    api::Empty cp_in(const api::CpInParams&, const api::CpIo&) override { unexpected("cp_in"); }

  protected:
    [[noreturn]] static void unexpected(const std::string& method) {
        throw Error(ErrorCode::general, "fake api: " + method + " is not part of this test");
    }
};

}  // namespace sandweave::testing
