// The controller's Api: what is not a sandbox call (lib/weave/controller_api.hpp).
#include "lib/weave/controller_api.hpp"

#include "lib/core/error.hpp"

namespace sandweave::weave {

namespace {

Error later(const std::string& what) {
    return Error(ErrorCode::runtime, what + " through a Weave controller is not built yet");
}

}  // namespace

std::unique_ptr<api::Api> make_controller_api(const ClusterConfig& cluster) {
    return std::make_unique<ControllerApi>(cluster);
}

api::VersionResult ControllerApi::version() {
    api::VersionResult v;
    v.version = SANDWEAVE_VERSION;
    return v;
}

SnapshotRecord ControllerApi::snapshot_create(const api::SnapshotCreateParams&) {
    throw later("snapshot create");
}
api::SnapshotList ControllerApi::snapshot_ls() {
    throw later("snapshot ls");
}
api::Removed ControllerApi::snapshot_rm(const api::IdParams&) {
    throw later("snapshot rm");
}
PoolInfo ControllerApi::pool_create(const api::PoolCreateParams&) {
    throw later("pools");
}
SandboxView ControllerApi::pool_acquire(const api::NameParams&) {
    throw later("pools");
}
api::PoolList ControllerApi::pool_ls() {
    throw later("pools");
}
PoolInfo ControllerApi::pool_resize(const api::PoolResizeParams&) {
    throw later("pools");
}
api::Removed ControllerApi::pool_rm(const api::NameParams&) {
    throw later("pools");
}
api::TemplateList ControllerApi::template_ls() {
    throw later("template ls");
}
api::TemplateShowResult ControllerApi::template_show(const api::TemplateShowParams&) {
    throw later("template show");
}
api::TemplateValidateResult ControllerApi::template_validate(const api::TemplateValidateParams&) {
    throw later("template validate");
}
api::Image ControllerApi::image_build(const api::ImageBuildParams&) {
    throw later("images");
}
api::ImageList ControllerApi::image_ls() {
    throw later("images");
}
api::RecipeList ControllerApi::image_recipes() {
    throw later("images");
}
api::Removed ControllerApi::image_rm(const api::NameParams&) {
    throw later("images");
}
api::Image ControllerApi::image_import(const api::ImageImportParams&) {
    throw later("images");
}
api::Image ControllerApi::image_inspect(const api::NameParams&) {
    throw later("images");
}
api::ScreenshotResult ControllerApi::desktop_screenshot(
    const api::IdParams&, const std::function<void(std::string_view)>&) {
    throw later("desktops");
}
api::Empty ControllerApi::desktop_click(const api::PointerParams&) {
    throw later("desktops");
}
api::Empty ControllerApi::desktop_move(const api::PointerParams&) {
    throw later("desktops");
}
api::Empty ControllerApi::desktop_type(const api::TypeParams&) {
    throw later("desktops");
}
api::Empty ControllerApi::desktop_key(const api::KeyParams&) {
    throw later("desktops");
}

}  // namespace sandweave::weave
