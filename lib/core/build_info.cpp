#include "lib/core/build_info.hpp"

#include "sandweave_revision.h"

namespace sandweave {

const char* build_version() {
    return SANDWEAVE_BUILD_VERSION;
}

const char* build_revision() {
    return SANDWEAVE_GIT_REVISION;
}

}  // namespace sandweave
