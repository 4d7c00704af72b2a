#include "lib/core/cgroup.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <system_error>
#include <thread>

#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"

namespace sandweave {

namespace fs = std::filesystem;

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> out;
    while (true) {
        auto at = s.find(sep);
        out.push_back(s.substr(0, at));
        if (at == std::string_view::npos) return out;
        s.remove_prefix(at + 1);
    }
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\\' && i + 3 < s.size() &&
            std::all_of(s.begin() + i + 1, s.begin() + i + 4,
                        [](char c) { return c >= '0' && c <= '7'; })) {
            out +=
                static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
            i += 3;
        } else {
            out += s[i];
        }
    }
    return out;
}

struct CgroupMount {
    bool unified = false;
    std::vector<std::string_view> options;  // v1: the controllers, name=...
    std::string root, point;
};

std::vector<CgroupMount> cgroup_mounts(std::string_view mountinfo) {
    std::vector<CgroupMount> out;
    for (auto line : split(mountinfo, '\n')) {
        // ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
        auto f = split(line, ' ');
        auto dash = std::find(f.begin(), f.end(), "-");
        if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;
        CgroupMount m;
        if (dash[1] == "cgroup2") {
            m.unified = true;
        } else if (dash[1] == "cgroup") {
            m.options = split(dash[3], ',');
        } else {
            continue;
        }
        m.root = unescape(f[3]);
        m.point = unescape(f[4]);
        out.push_back(std::move(m));
    }
    return out;
}

// Lower is tried first: a move's attach work differs by controller, even
// when (as here) no task moves.
int rank(std::string_view controllers) {
    if (controllers.find("memory") != std::string_view::npos) return 3;
    if (controllers.find("cpuset") != std::string_view::npos) return 2;
    return 1;
}

}  // namespace

std::vector<fs::path> own_cgroup_procs_files(std::string_view cgroups, std::string_view mountinfo) {
    auto mounts = cgroup_mounts(mountinfo);
    std::vector<std::pair<int, fs::path>> found;
    for (auto line : split(cgroups, '\n')) {
        // HIERARCHY-ID:CONTROLLERS:PATH (cgroup2: 0::PATH)
        auto a = line.find(':');
        auto b = a == std::string_view::npos ? a : line.find(':', a + 1);
        if (b == std::string_view::npos) continue;
        std::string_view id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
        std::string_view path = line.substr(b + 1);
        if (path.empty() || path.front() != '/') continue;
        bool unified = id == "0" && controllers.empty();
        auto wanted = split(controllers, ',');
        for (const auto& m : mounts) {
            if (m.unified != unified) continue;
            if (!unified && !std::all_of(wanted.begin(), wanted.end(), [&](std::string_view c) {
                    return std::find(m.options.begin(), m.options.end(), c) != m.options.end();
                }))
                continue;
            // The mount shows the subtree at ROOT: the cgroup must lie under it.
            std::string_view rel = path;
            if (m.root != "/") {
                if (rel.substr(0, m.root.size()) != m.root ||
                    (rel.size() > m.root.size() && rel[m.root.size()] != '/'))
                    continue;
                rel.remove_prefix(m.root.size());
            }
            while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
            fs::path dir = m.point;
            if (!rel.empty()) dir /= fs::path(std::string(rel));
            found.emplace_back(unified ? 0 : rank(controllers), dir / "cgroup.procs");
            break;
        }
    }
    std::stable_sort(found.begin(), found.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    std::vector<fs::path> out;
    for (auto& [r, p] : found)
        if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(std::move(p));
    return out;
}

std::optional<fs::path> rejoin_own_cgroup() {
    std::string cgroups, mountinfo;
    try {
        cgroups = read_file("/proc/self/cgroup", 1 << 16);
        mountinfo = read_file("/proc/self/mountinfo", 1 << 22);
    } catch (...) {
        return std::nullopt;
    }
    std::string pid = std::to_string(::getpid());
    for (const auto& procs : own_cgroup_procs_files(cgroups, mountinfo)) {
        Fd fd(::open(procs.c_str(), O_WRONLY | O_CLOEXEC));
        if (fd.get() < 0) continue;
        if (::write(fd.get(), pid.data(), pid.size()) == static_cast<ssize_t>(pid.size()))
            return procs;
    }
    return std::nullopt;
}

namespace {

std::string self_mountinfo() {
    try {
        return read_file("/proc/self/mountinfo", 1 << 22);
    } catch (...) {
        return {};
    }
}

// The hierarchies mounted from their root, each once (a hierarchy may be
// mounted at several places).
std::vector<fs::path> hierarchy_roots(std::string_view mountinfo) {
    std::vector<fs::path> out;
    std::vector<std::vector<std::string_view>> seen;
    bool unified_seen = false;
    for (auto& m : cgroup_mounts(mountinfo)) {
        if (m.root != "/") continue;
        if (m.unified) {
            if (unified_seen) continue;
            unified_seen = true;
        } else {
            std::sort(m.options.begin(), m.options.end());
            if (std::find(seen.begin(), seen.end(), m.options) != seen.end()) continue;
            seen.push_back(m.options);
        }
        out.emplace_back(m.point);
    }
    return out;
}

}  // namespace

std::vector<fs::path> top_cgroup_dirs(std::string_view name, std::string_view mountinfo) {
    std::vector<fs::path> out;
    if (name.empty() || name.find('/') != std::string_view::npos || name == "." || name == "..")
        return out;
    for (const auto& root : hierarchy_roots(mountinfo)) out.push_back(root / std::string(name));
    return out;
}

std::vector<std::string> top_cgroup_names(std::string_view prefix, std::string_view mountinfo) {
    std::vector<std::string> out;
    for (const auto& root : hierarchy_roots(mountinfo)) {
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(root, ec)) {
            std::string n = e.path().filename().string();
            if (n.rfind(prefix, 0) == 0 && e.is_directory(ec) &&
                std::find(out.begin(), out.end(), n) == out.end())
                out.push_back(std::move(n));
        }
    }
    return out;
}

std::vector<fs::path> remove_top_cgroups(const std::string& name,
                                         std::chrono::milliseconds patience) {
    auto left = top_cgroup_dirs(name, self_mountinfo());
    auto deadline = std::chrono::steady_clock::now() + patience;
    while (true) {
        std::vector<fs::path> busy;
        for (const auto& dir : left)
            if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) busy.push_back(dir);
        if (busy.empty() || std::chrono::steady_clock::now() >= deadline) return busy;
        left = std::move(busy);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

std::vector<std::string> stale_top_cgroups(std::string_view prefix, std::chrono::seconds min_age) {
    std::string mountinfo = self_mountinfo();
    const auto now = std::chrono::system_clock::now();
    std::vector<std::string> out;
    for (const auto& name : top_cgroup_names(prefix, mountinfo)) {
        bool stale = true;
        for (const auto& dir : top_cgroup_dirs(name, mountinfo)) {
            struct stat st {};
            if (::stat(dir.c_str(), &st) != 0) continue;
            auto made = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
            bool empty = false;  // unreadable: not known to be empty
            try {
                empty = read_file(dir / "cgroup.procs", 1 << 16).empty();
            } catch (...) {
            }
            if (now - made < min_age || !empty) {
                stale = false;
                break;
            }
        }
        if (stale) out.push_back(name);
    }
    return out;
}

}  // namespace sandweave
