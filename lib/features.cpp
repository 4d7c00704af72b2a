#include "lib/features.hpp"

#include "lib/error.hpp"
#include "lib/sandbox.hpp"

namespace sandweave {

void require_runtime_features(Context&, const SandboxSpec& spec, const std::filesystem::path& runsc) {
    if (spec.runtime.hidepid != 0)
        throw Error(ErrorCode::runtime, "hidepid " + std::to_string(spec.runtime.hidepid) +
                                            " is not available: runtime " + runsc.string() +
                                            " has no verified /proc hidepid support");
    if (spec.runtime.audit)
        throw Error(ErrorCode::runtime, "audit is not available yet in this build of sandweave");
}

}  // namespace sandweave
