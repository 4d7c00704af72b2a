#include "lib/core/host.hpp"

#include <signal.h>
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <fstream>

#include "lib/core/cgroup.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/process.hpp"

namespace sandweave {

namespace fs = std::filesystem;

std::string overlay_options(const OverlayMount& m) {
    for (const auto& p : {m.lower, m.upper, m.work})
        if (p.string().find_first_of(",:") != std::string::npos)
            throw Error(ErrorCode::general, "overlay: path contains ',' or ':': " + p.string());
    return "lowerdir=" + m.lower.string() + ",upperdir=" + m.upper.string() +
           ",workdir=" + m.work.string() + (m.volatile_upper ? ",volatile" : "");
}

void LocalHost::mount_overlay(const OverlayMount& m) {
    auto mount = [&](const OverlayMount& o) {
        std::string opts = overlay_options(o);
        return ::mount("overlay", o.target.c_str(), "overlay", MS_NOSUID | MS_NODEV,
                       opts.c_str()) == 0;
    };
    if (mount(m)) return;
    if (m.volatile_upper && errno == EINVAL) {  // a kernel before 5.10: no `volatile`
        OverlayMount plain = m;
        plain.volatile_upper = false;
        if (mount(plain)) return;
    }
    throw_errno("mount overlay on " + m.target.string());
}

void LocalHost::unmount(const fs::path& target) {
    if (::umount2(target.c_str(), 0) == 0) return;
    // Busy (a gofer still exiting): detach it now, the kernel finishes later.
    if (::umount2(target.c_str(), MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
        throw_errno("unmount " + target.string());
}

bool LocalHost::is_mounted(const fs::path& target) {
    std::ifstream in("/proc/self/mountinfo");
    std::string line;
    std::string field = " " + target.string() + " ";
    while (std::getline(in, line)) {
        // Field 5 is the mount point; paths with spaces are octal-escaped and ours have none.
        std::size_t pos = 0;
        for (int i = 0; i < 4 && pos != std::string::npos; ++i) pos = line.find(' ', pos + 1);
        if (pos != std::string::npos && line.compare(pos, field.size(), field) == 0) return true;
    }
    return false;
}

std::vector<pid_t> LocalHost::processes_matching(const std::string& needle) {
    std::vector<pid_t> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
        std::string pid_text = e.path().filename().string();
        if (pid_text.empty() || !std::all_of(pid_text.begin(), pid_text.end(), ::isdigit)) continue;
        pid_t pid = static_cast<pid_t>(std::stol(pid_text));
        if (pid == ::getpid()) continue;
        std::string cmdline;
        try {
            cmdline = read_file(e.path() / "cmdline", 1 << 16);
        } catch (const Error&) {
            continue;  // exited while we looked
        }
        if (cmdline.find(needle) != std::string::npos) out.push_back(pid);
    }
    return out;
}

bool LocalHost::kill(pid_t pid, int signal) {
    return ::kill(pid, signal) == 0;
}

bool LocalHost::kill_and_wait(pid_t pid, const std::string& needle,
                              std::chrono::milliseconds patience) {
    auto process = PinnedProcess::open(pid);
    if (!process) return true;
    std::string cmdline;
    try {
        cmdline = read_file(fs::path("/proc") / std::to_string(pid) / "cmdline", 1 << 16);
    } catch (const Error&) {
        return true;  // exited while we looked
    }
    // Not (any more) the process asked for; a zombie's command line is empty.
    if (cmdline.find(needle) == std::string::npos) return true;
    if (!process->signal(SIGKILL)) return true;
    return process->wait_exit(patience);
}

bool LocalHost::rejoin_own_cgroup() {
    return sandweave::rejoin_own_cgroup().has_value();
}

bool LocalHost::remove_cgroups(const std::string& id, std::chrono::milliseconds patience) {
    return remove_top_cgroups(id, patience).empty();
}

std::vector<std::string> LocalHost::stale_cgroups(const std::string& prefix,
                                                  std::chrono::seconds min_age) {
    return stale_top_cgroups(prefix, min_age);
}

}  // namespace sandweave
