#pragma once
// The OCI bundle handed to runsc. PID 1 is sandweave's guest init, bind-mounted
// read-only from the host; the root filesystem is the sandbox's host overlay,
// and so is /tmp (guest_tmp_dir); the guest's /proc carries the hidepid policy
// (gVisor applies the mount options of the spec's /proc mount to the guest's
// initial procfs).

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "lib/options/options.hpp"

extern "C" {
#include "wire/agent_proto.h"
}

namespace sandweave {

inline constexpr const char* guest_init_path = SW_GUEST_INIT_PATH;
// How many unused dentries the guest's procfs caches. gVisor's procfs caches a
// /proc/PID directory until its cache is full, with the ~45 files of the
// directory made up front and the exited task behind it: about 80 KiB of the
// sentry's heap per process that ever looked at /proc/self (busybox reads
// /proc/self/exe at start-up, as many language runtimes do), so a sandbox that
// ran 1000 commands held 90 MiB more than an idle one under the default limit
// of 1000. Linux drops a task's /proc dentries when it exits; a small cache
// comes close. The price: a lookup of an uncached /proc/PID makes its directory
// again, about 0.1 ms (busybox ps over 23 processes: 12.1 ms instead of 9.8).
inline constexpr int proc_dentry_cache_limit = 16;
inline constexpr const char* default_path_env =
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct BundleInput {
    SandboxSpec spec;
    std::filesystem::path rootfs;
    std::filesystem::path init_binary;  // host path of sandweave-init
    std::string hostname;
    // Host directory bound at the guest's /tmp (guest_tmp_dir); empty: none,
    // and runsc puts an in-memory tmpfs there.
    std::filesystem::path tmp_dir;
    // The network namespace runsc joins (lib/sandbox/network.hpp); empty:
    // a new one of its own, which --network=none leaves without interfaces.
    std::filesystem::path netns;
    // Bound read-only at the guest's /etc/resolv.conf (a network whose
    // policy names domains: its resolver); empty: the image's own.
    std::filesystem::path resolv_conf;
};

nlohmann::json build_oci_config(const BundleInput& in);

// The guest's /tmp on disk, as Docker's: the root filesystem's own /tmp (in
// the sandbox's overlay, so it lands in its upper directory), bound at /tmp.
// Without an explicit /tmp mount runsc mounts a tmpfs of unbounded size there,
// whose files are host memory the sentry keeps until they are deleted.
// Creates rootfs/tmp (mode 1777) when the image has none. Returns an empty
// path, leaving /tmp to runsc, when the image's /tmp is not a directory (a
// symlink is never followed on the host).
std::filesystem::path guest_tmp_dir(const std::filesystem::path& rootfs);

// The OCI capability sets of a process run as `user`: Docker's default set for
// root, none for anyone else. The guest init gets root's, which its agent's
// commands keep (root) or drop with their uid (anyone else), plus
// CAP_SYS_ADMIN, which it uses once at start for the hierarchy that holds each
// command's processes and then drops for itself and every command
// (guest/command_group.h).
nlohmann::json capabilities_for(const UserSpec& user);
nlohmann::json init_capabilities();

// The environment a guest command gets: PATH, HOME, the template's env, then the
// caller's extra K=V entries (later wins).
std::vector<std::string> guest_env(const SandboxSpec& spec, const std::vector<std::string>& extra);

}  // namespace sandweave
