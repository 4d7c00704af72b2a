#pragma once
// Fault injection for the crash-consistency tests (tests/integration/crash.sh).
//
// SANDWEAVE_FAULT_POINT("create.mounted") marks a step after which a crash must
// leave a state that `ls` reports truthfully and `rm`/`prune` clean up. In the
// shipped binary the points do nothing: `fault_hook` is null. The test build's
// `sandweave-faults` (tests/faults/) is the same program plus a hook that kills
// the process with SIGKILL at the point named by $SANDWEAVE_FAULT, and
// appends every point it passes to $SANDWEAVE_FAULT_TRACE, so the test can
// list the points of an operation and then crash at each in turn.

namespace sandweave {

using FaultHook = void (*)(const char* point);
extern FaultHook fault_hook;

inline void fault_point(const char* point) {
    if (fault_hook) fault_hook(point);
}

}  // namespace sandweave

#define SANDWEAVE_FAULT_POINT(name) ::sandweave::fault_point(name)
