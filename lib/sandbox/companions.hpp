#pragma once
// What a sandbox's supervisor runs beside it (lib/runtime/shim.hpp's
// ShimCompanion, args: state directory and sandbox id): the lifetime watcher
// when the sandbox has a lifetime (lib/sandbox/lifetime.hpp), the resolver
// when its egress policy names domains (lib/sandbox/resolver.hpp), the
// publisher when it publishes ports (lib/sandbox/publish.hpp). A watcher
// that cannot start is left to ls/inspect; a resolver or publisher that
// cannot start throws, which fails the create.

#include <functional>
#include <string>
#include <vector>

#include "lib/options/options.hpp"

namespace sandweave {

std::vector<std::function<void(int stop_fd)>> shim_companions(const std::vector<std::string>& args);

// Whether a sandbox of `spec` needs companions in its supervisor.
bool needs_shim_companions(const SandboxSpec& spec);

}  // namespace sandweave
