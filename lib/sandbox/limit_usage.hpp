#pragma once
// What a running sandbox's resource limits counted (lib/runtime/limits.hpp):
// tasks against `pids`, guest memory against `memory`, refused allocations and
// OOM kills. Asked of the runtime (`runsc events --stats`) only for a running
// sandbox that has pids or memory limits, so `ls` costs nothing more otherwise.

#include <optional>

#include "lib/runtime/limits.hpp"
#include "lib/sandbox/context.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

std::optional<LimitUsage> live_limit_usage(Context& ctx, const SandboxRecord& r);

}  // namespace sandweave
