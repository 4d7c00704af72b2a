#include "lib/sandbox/companions.hpp"

#include "lib/sandbox/lifetime.hpp"
#include "lib/sandbox/publish.hpp"
#include "lib/sandbox/resolver.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

bool needs_shim_companions(const SandboxSpec& spec) {
    return spec.lifetime.any() || (spec.runtime.egress && spec.runtime.egress->has_names()) ||
           !spec.publish.empty();
}

std::vector<std::function<void(int)>> shim_companions(const std::vector<std::string>& args) {
    std::vector<std::function<void(int)>> out;
    if (args.size() != 2) return out;
    StateStore store(args[0]);
    auto r = store.try_load(args[1]);
    if (!r) return out;
    if (r->spec.lifetime.any()) {
        try {
            if (auto watch = shim_lifetime_watcher(args)) out.push_back(std::move(watch));
        } catch (const std::exception&) {
            // No watcher here: ls/inspect start one of their own.
        }
    }
    if (r->spec.runtime.egress && r->spec.runtime.egress->has_names())
        out.push_back(start_resolver(store, r->id));
    if (!r->spec.publish.empty()) out.push_back(start_publisher(store, r->id));
    return out;
}

}  // namespace sandweave
