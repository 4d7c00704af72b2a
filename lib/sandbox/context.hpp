#pragma once
// What every worker-side operation needs: the state store, the way to run
// programs, the host it acts on (mounts, processes), and the runtime the caller
// asked for. One Context serves one
// connection (a CLI invocation or a `serve` client); it is cheap to copy and
// holds no mutable state of its own, so concurrent requests may share it.

#include <optional>
#include <string>

#include "lib/core/host.hpp"
#include "lib/core/process.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

struct Context {
    StateStore& store;
    CommandRunner& runner;
    Host& host;
    std::optional<std::string> runsc_flag;  // an explicit runtime binary, if the caller chose one
};

}  // namespace sandweave
