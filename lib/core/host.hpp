#pragma once
// The host seam: what lifecycle code does to the machine itself (overlay
// mounts, the mount table, /proc scans, signals) goes through a Host, so
// create/terminate/rm and their rollback are unit-testable with a fake
// (tests/unit/fake_host.hpp) and without root. Programs are run through a
// CommandRunner (lib/core/process.hpp); this interface covers the rest.
//
// LocalHost is the real thing. It holds no state, so one instance may serve any
// number of Contexts and threads.

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace sandweave {

struct OverlayMount {
    std::filesystem::path lower, upper, work, target;
    // The upper layer is throwaway: overlayfs skips syncing it (`volatile`),
    // so neither the guest's fsyncs nor the unmount flush the host's whole
    // upper filesystem. Kernels without the option get a plain mount.
    bool volatile_upper = false;
};

// The overlay's mount options ("lowerdir=...,upperdir=...,workdir=..."); throws
// Error for a path the option syntax cannot carry (one with ',' or ':').
std::string overlay_options(const OverlayMount& m);

class Host {
  public:
    virtual ~Host() = default;
    // Mounts `m.upper` over `m.lower` on `m.target` (overlayfs, nosuid, nodev).
    // Throws Error("mount overlay on TARGET: <errno text>") on failure.
    virtual void mount_overlay(const OverlayMount& m) = 0;
    // Unmounts `target`, detaching it when busy (a gofer still exiting): the
    // kernel finishes later. One that is not mounted (any more) is not an error.
    virtual void unmount(const std::filesystem::path& target) = 0;
    virtual bool is_mounted(const std::filesystem::path& target) = 0;
    // Processes other than this one whose command line contains `needle`.
    virtual std::vector<pid_t> processes_matching(const std::string& needle) = 0;
    // Sends `signal` to `pid`; false when there is no such process (any more).
    virtual bool kill(pid_t pid, int signal) = 0;
    // SIGKILLs `pid` if its command line still contains `needle` (so a reused
    // pid is never hit) and waits up to `patience` for it to exit. True when
    // it is gone (or was not that process); false when it outlived patience.
    virtual bool kill_and_wait(pid_t pid, const std::string& needle,
                               std::chrono::milliseconds patience) = 0;
    // Moves this process into the cgroup it is in (lib/core/cgroup.hpp): a
    // no-op that blocks for the kernel's cgroup attach lock, so that the next
    // cgroup.procs write on the host (runsc's) finds the lock warm. False when
    // no cgroup took the write; never throws.
    virtual bool rejoin_own_cgroup() = 0;
    // Removes the host cgroups a sandbox's runtime made under its id, in
    // every hierarchy (lib/core/cgroup.hpp), waiting up to `patience` for
    // tasks that are still exiting. False when some could not go.
    virtual bool remove_cgroups(const std::string& id, std::chrono::milliseconds patience) = 0;
    // Ids (beginning with `prefix`) whose host cgroups are empty and older
    // than `min_age`: what a killed runtime left behind.
    virtual std::vector<std::string> stale_cgroups(const std::string& prefix,
                                                   std::chrono::seconds min_age) = 0;
};

class LocalHost final : public Host {
  public:
    void mount_overlay(const OverlayMount& m) override;
    void unmount(const std::filesystem::path& target) override;
    bool is_mounted(const std::filesystem::path& target) override;
    std::vector<pid_t> processes_matching(const std::string& needle) override;
    bool kill(pid_t pid, int signal) override;
    bool kill_and_wait(pid_t pid, const std::string& needle,
                       std::chrono::milliseconds patience) override;
    bool rejoin_own_cgroup() override;
    bool remove_cgroups(const std::string& id, std::chrono::milliseconds patience) override;
    std::vector<std::string> stale_cgroups(const std::string& prefix,
                                           std::chrono::seconds min_age) override;
};

}  // namespace sandweave
