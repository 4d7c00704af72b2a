#pragma once
// FakeHost: the host seam (lib/core/host.hpp) for unit tests. It keeps a mount
// table and a process table in memory and records what lifecycle code asked
// for, so create, terminate, rm and create's rollback can be checked without
// root, overlayfs or real processes.

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lib/core/error.hpp"
#include "lib/core/host.hpp"

namespace sandweave {

class FakeHost final : public Host {
  public:
    struct Process {
        pid_t pid;
        std::string cmdline;
    };

    std::set<std::filesystem::path> mounted;  // the mount table
    std::vector<OverlayMount> mount_calls;
    std::vector<std::filesystem::path> unmount_calls;
    std::vector<Process> processes;                 // the process table
    std::vector<std::pair<pid_t, int>> kill_calls;  // {pid, signal}
    // rejoin_own_cgroup calls (create makes its one from a thread of its own).
    std::atomic<int> cgroup_rejoins{0};
    // Thrown by the next mount_overlay (the overlay refused: no overlayfs, EPERM).
    std::optional<Error> fail_mount;

    void mount_overlay(const OverlayMount& m) override {
        overlay_options(m);  // the option syntax the real mount would reject
        mount_calls.push_back(m);
        if (fail_mount) {
            Error e = *fail_mount;
            fail_mount.reset();
            throw e;
        }
        if (!mounted.insert(m.target).second)
            throw Error(ErrorCode::general, "mount overlay on " + m.target.string() + ": busy");
    }
    void unmount(const std::filesystem::path& target) override {
        unmount_calls.push_back(target);
        mounted.erase(target);
    }
    bool is_mounted(const std::filesystem::path& target) override {
        return mounted.count(target) > 0;
    }
    std::vector<pid_t> processes_matching(const std::string& needle) override {
        std::vector<pid_t> out;
        for (const auto& p : processes)
            if (p.cmdline.find(needle) != std::string::npos) out.push_back(p.pid);
        return out;
    }
    bool kill(pid_t pid, int signal) override {
        kill_calls.emplace_back(pid, signal);
        auto it = std::find_if(processes.begin(), processes.end(),
                               [&](const Process& p) { return p.pid == pid; });
        if (it == processes.end()) return false;
        if (signal == SIGKILL || signal == SIGTERM) processes.erase(it);
        return true;
    }
    bool kill_and_wait(pid_t pid, const std::string& needle, std::chrono::milliseconds) override {
        auto it = std::find_if(processes.begin(), processes.end(), [&](const Process& p) {
            return p.pid == pid && p.cmdline.find(needle) != std::string::npos;
        });
        if (it == processes.end()) return true;
        kill_calls.emplace_back(pid, SIGKILL);
        processes.erase(it);
        return true;
    }
    bool rejoin_own_cgroup() override {
        ++cgroup_rejoins;
        return true;
    }
    // The host cgroups by id, and the stale ones among them (empty and old).
    std::set<std::string> cgroups, stale;
    std::vector<std::string> cgroup_removals;
    bool remove_cgroups(const std::string& id, std::chrono::milliseconds) override {
        cgroup_removals.push_back(id);
        cgroups.erase(id);
        stale.erase(id);
        return true;
    }
    std::vector<std::string> stale_cgroups(const std::string& prefix,
                                           std::chrono::seconds) override {
        std::vector<std::string> out;
        for (const auto& id : stale)
            if (id.rfind(prefix, 0) == 0) out.push_back(id);
        return out;
    }
};

}  // namespace sandweave
