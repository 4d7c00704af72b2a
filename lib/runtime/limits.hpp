#pragma once
// The guest's resource limits: `resources` limit the guest, as a
// Docker user expects, and the sandbox survives reaching them.
//
// On the ptrace platform every guest process costs host processes (a stub
// process per address space, a stub thread per sentry thread that ran it) and
// the sentry's own memory. runsc puts an OCI spec's linux.resources on the host
// cgroup around the whole sandbox, so a guest limit there kills the sandbox
// (runsc's WaitPID fails with EOF) when the guest reaches it. Instead:
//   - pids and memory go to sandweave's patched sentry (runtime/limits.patch)
//     as annotations and are enforced inside the guest: fork/clone past
//     `pids` fail with EAGAIN; an allocation past `memory` fails with ENOMEM
//     and a page fault past it OOM-kills the faulting process;
//   - the host cgroup gets the guest's limit plus the runtime's overhead
//     (host_resources), a backstop the guest cannot reach;
//   - cpus is a CFS quota on the host cgroup: the sentry's work for the guest
//     is the guest's kernel time, as on Linux.
// docs/design.md ("Resource limits") explains the sizing.

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "lib/options/options.hpp"

namespace sandweave {

// Annotations read by the patched sentry (runsc/boot/guest_limits.go).
inline constexpr const char* guest_pids_annotation = "dev.sandweave.guest.pids-max";
inline constexpr const char* guest_memory_annotation = "dev.sandweave.guest.memory-max";

// Host cgroup sizing: the runtime's overhead on top of the guest's limits.
// Memory: the sentry's Go heap, the gofer and the stub processes' page tables
// (measured: about 60 MiB for an idle sandbox, 120 MiB with 50 busy processes)
// plus guest pages freed but not yet returned to the host.
inline constexpr std::uint64_t host_memory_headroom = 256ull << 20;
// Processes: the sentry's and gofer's threads, and per guest task a stub
// process or thread for each sentry thread that ran it.
inline constexpr std::int64_t host_pids_base = 512;
inline constexpr std::int64_t host_pids_per_guest_task = 32;

// The smallest limits a sandbox can start and run commands under; below them
// create refuses (ErrorCode::runtime) rather than start a sandbox that dies.
inline constexpr std::uint64_t min_guest_memory = 16ull << 20;
inline constexpr double min_guest_cpus = 0.01;  // a 1 ms CFS quota per 100 ms

// Throws ErrorCode::runtime (exit 5) with the reason when a limit cannot be
// enforced inside the guest: below the minimums, or more CPUs than the host
// has (`host_cpus`).
void check_limits_enforceable(const Resources& r, unsigned host_cpus);

// The OCI linux.resources for the host cgroup (see above).
nlohmann::json host_resources(const Resources& r);

// The annotations carrying the guest's own limits to the sentry.
std::map<std::string, std::string> guest_limit_annotations(const Resources& r);

bool has_guest_limits(const Resources& r);  // pids or memory

// What the limits counted, from `runsc events --stats` of the patched runtime.
struct LimitUsage {
    std::optional<std::uint64_t> pids_current;
    std::optional<std::uint64_t> pids_limit;
    std::optional<std::uint64_t> memory_usage;
    std::optional<std::uint64_t> memory_limit;
    std::optional<std::uint64_t> memory_max;
    std::uint64_t memory_failcnt = 0;  // allocations the limit refused
    std::uint64_t oom_kills = 0;       // processes it killed
};
// Parses runsc's stats event; throws ErrorCode::runtime when it is not one.
LimitUsage limit_usage_from_stats(const nlohmann::json& event);
nlohmann::json to_json(const LimitUsage& u);
LimitUsage limit_usage_from_json(const nlohmann::json& j);

}  // namespace sandweave
