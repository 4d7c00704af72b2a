// The controller's Api: its construction, version, and desktops routed to the
// sandbox's worker (lib/controller/controller_api.hpp).
#include "lib/controller/controller_api.hpp"

#include "lib/core/error.hpp"

namespace sandweave::controller {

std::unique_ptr<api::Api> make_controller_api(const ClusterConfig& cluster) {
    auto api = std::make_unique<ControllerApi>(cluster);
    api->rebuild_pools();
    return api;
}

api::VersionResult ControllerApi::version() {
    api::VersionResult v;
    v.version = SANDWEAVE_VERSION;
    return v;
}

api::ScreenshotResult ControllerApi::desktop_screenshot(
    const api::IdParams& p, const std::function<void(std::string_view)>& on_data) {
    auto [pl, q] = route(p.id);
    return on_link(pl, [&, q = q](api::Api& a) { return a.desktop_screenshot(q, on_data); });
}
api::Empty ControllerApi::desktop_click(const api::PointerParams& p) {
    return routed(p, &api::Api::desktop_click);
}
api::Empty ControllerApi::desktop_move(const api::PointerParams& p) {
    return routed(p, &api::Api::desktop_move);
}
api::Empty ControllerApi::desktop_type(const api::TypeParams& p) {
    return routed(p, &api::Api::desktop_type);
}
api::Empty ControllerApi::desktop_key(const api::KeyParams& p) {
    return routed(p, &api::Api::desktop_key);
}

}  // namespace sandweave::controller
