#pragma once
// Runtime features sandweave must never pretend to have. Before a sandbox is
// created with hidepid 1/2 or audit, the chosen runsc must be known to support
// it; otherwise create fails with exit 5 and says why.

#include <filesystem>

#include "lib/options.hpp"

namespace sandweave {

struct Context;

void require_runtime_features(Context& ctx, const SandboxSpec& spec, const std::filesystem::path& runsc);

}  // namespace sandweave
