#include "lib/sandbox/limit_usage.hpp"

#include "lib/core/error.hpp"
#include "lib/core/log.hpp"
#include "lib/runtime/runsc.hpp"

namespace sandweave {

std::optional<LimitUsage> live_limit_usage(Context& ctx, const SandboxRecord& r) {
    if (r.state != SandboxState::running || !has_guest_limits(r.spec.resources))
        return std::nullopt;
    try {
        auto event = Runsc(ctx.runner, r.runsc, r.runsc_flags).stats(r.id);
        if (!event) return std::nullopt;  // not running after all: the state says so
        return limit_usage_from_stats(*event);
    } catch (const Error& e) {
        // A listing is still truthful without the counts.
        log().warn("sandbox " + r.id + ": resource usage unavailable: " + e.what());
        return std::nullopt;
    }
}

}  // namespace sandweave
