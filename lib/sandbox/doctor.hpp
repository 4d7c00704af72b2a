#pragma once
// `sandweave doctor`: what works on this host and what does not. Each check says
// whether the main job (create + run) needs it.

#include <string>
#include <vector>

#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

struct DoctorCheck {
    std::string name;
    bool ok = false;
    bool required = true;  // the main job cannot run without it
    std::string detail;
};

std::vector<DoctorCheck> run_doctor(Context& ctx);

}  // namespace sandweave
