#include "lib/core/fault.hpp"

namespace sandweave {

FaultHook fault_hook = nullptr;

}  // namespace sandweave
