#include "lib/runtime/bundle.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <map>

#include "lib/core/error.hpp"
#include "lib/runtime/limits.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> guest_env(const SandboxSpec& spec, const std::vector<std::string>& extra) {
    std::map<std::string, std::string> env{{"PATH", std::string(default_path_env).substr(5)},
                                           {"HOME", spec.user.uid == 0 ? "/root" : "/"}};
    for (const auto& [k, v] : spec.env) env[k] = v;
    for (const auto& kv : extra) {
        auto eq = kv.find('=');
        env[kv.substr(0, eq)] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
    std::vector<std::string> out;
    for (const auto& [k, v] : env) out.push_back(k + "=" + v);
    return out;
}

json capabilities_for(const UserSpec& user) {
    std::vector<std::string> caps;
    if (user.uid == 0) {
        caps = {"CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
                "CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",           "CAP_SETUID",
                "CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
                "CAP_KILL",    "CAP_AUDIT_WRITE",  "CAP_SYS_PTRACE"};
    }
    return json{{"bounding", caps},
                {"effective", caps},
                {"inheritable", json::array()},
                {"permitted", caps},
                {"ambient", json::array()}};
}

fs::path guest_tmp_dir(const fs::path& rootfs) {
    fs::path tmp = rootfs / "tmp";
    struct stat st {};
    if (::lstat(tmp.c_str(), &st) != 0) {
        if (errno != ENOENT) throw_errno("lstat " + tmp.string());
        if (::mkdir(tmp.c_str(), 01777) != 0) throw_errno("mkdir " + tmp.string());
        // mkdir applies the umask.
        if (::chmod(tmp.c_str(), 01777) != 0) throw_errno("chmod " + tmp.string());
        return tmp;
    }
    return S_ISDIR(st.st_mode) ? tmp : fs::path();
}

json build_oci_config(const BundleInput& in) {
    // The guest's procfs keeps at most proc_dentry_cache_limit unused dentries
    // (bundle.hpp): the runtime's default of 1000 kept the /proc/PID
    // directories of ~1000 exited processes, 80 KiB each in the sentry.
    json proc_options =
        json::array({"dentry_cache_limit=" + std::to_string(proc_dentry_cache_limit)});
    if (in.spec.runtime.hidepid != 0)
        proc_options.push_back("hidepid=" + std::to_string(in.spec.runtime.hidepid));

    json mounts = json::array({
        {{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}, {"options", proc_options}},
        {{"destination", "/dev"},
         {"type", "tmpfs"},
         {"source", "tmpfs"},
         {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}},
        {{"destination", "/dev/pts"},
         {"type", "devpts"},
         {"source", "devpts"},
         {"options", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}}},
        {{"destination", "/dev/shm"},
         {"type", "tmpfs"},
         {"source", "shm"},
         {"options", {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}}},
        {{"destination", "/sys"},
         {"type", "sysfs"},
         {"source", "sysfs"},
         {"options", {"nosuid", "noexec", "nodev", "ro"}}},
        {{"destination", guest_init_path},
         {"type", "bind"},
         {"source", in.init_binary.string()},
         {"options", {"rbind", "ro"}}},
    });
    if (!in.tmp_dir.empty())
        mounts.push_back({{"destination", "/tmp"},
                          {"type", "bind"},
                          {"source", in.tmp_dir.string()},
                          {"options", {"rbind", "rw"}}});
    if (!in.resolv_conf.empty())
        mounts.push_back({{"destination", "/etc/resolv.conf"},
                          {"type", "bind"},
                          {"source", in.resolv_conf.string()},
                          {"options", {"rbind", "ro"}}});

    // The guest's limits go to the sentry, the host cgroup gets room for the
    // runtime too (lib/runtime/limits.hpp).
    json resources = host_resources(in.spec.resources);
    json annotations = json::object();
    for (const auto& [k, v] : guest_limit_annotations(in.spec.resources)) annotations[k] = v;

    json network_ns{{"type", "network"}};
    if (!in.netns.empty()) network_ns["path"] = in.netns.string();
    SandboxSpec root_spec = in.spec;
    root_spec.user = UserSpec{0, 0};
    return json{
        {"ociVersion", "1.0.0"},
        {"process",
         {{"terminal", false},
          {"user", {{"uid", 0}, {"gid", 0}}},
          {"args", {guest_init_path}},
          {"env", guest_env(root_spec, {})},
          {"cwd", "/"},
          {"capabilities", init_capabilities()},
          {"noNewPrivileges", false}}},
        {"root", {{"path", in.rootfs.string()}, {"readonly", false}}},
        {"hostname", in.hostname},
        {"annotations", annotations},
        {"mounts", mounts},
        {"linux",
         {{"namespaces", json::array({{{"type", "pid"}},
                                      network_ns,
                                      {{"type", "ipc"}},
                                      {{"type", "uts"}},
                                      {{"type", "mount"}}})},
          {"resources", resources}}},
    };
}

json init_capabilities() {
    json caps = capabilities_for(UserSpec{0, 0});
    for (const char* set : {"bounding", "effective", "permitted"})
        caps[set].push_back("CAP_SYS_ADMIN");
    return caps;
}

}  // namespace sandweave
