#include "lib/sandbox/doctor.hpp"

#include <unistd.h>

#include <fstream>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/runtime/runsc.hpp"
#include "lib/sandbox/features.hpp"
#include "lib/sandbox/network.hpp"

namespace sandweave {

namespace fs = std::filesystem;

namespace {

bool filesystem_known(const std::string& name) {
    std::ifstream in("/proc/filesystems");
    std::string line;
    while (std::getline(in, line))
        if (line.size() >= name.size() &&
            line.compare(line.size() - name.size(), name.size(), name) == 0)
            return true;
    return false;
}

DoctorCheck overlay_check(Host& host, const fs::path& state) {
    DoctorCheck c{"overlayfs", false, true, ""};
    if (!filesystem_known("overlay")) {
        c.detail = "the kernel has no overlay filesystem (modprobe overlay)";
        return c;
    }
    fs::path t = state / ("doctor-" + random_hex(6));
    try {
        for (const char* d : {"lower", "upper", "work", "merged"}) make_dirs(t / d, 0700);
        try {
            host.mount_overlay({t / "lower", t / "upper", t / "work", t / "merged"});
            c.ok = true;
            c.detail = "mounts in " + state.string();
        } catch (const Error& e) {
            // Said of the state directory, not of our scratch mount point.
            std::string cause = e.what();
            std::string ours = "mount overlay on " + (t / "merged").string() + ": ";
            if (cause.rfind(ours, 0) == 0) cause.erase(0, ours.size());
            c.detail = "mount overlay in " + state.string() + ": " + cause;
        }
        if (c.ok) host.unmount(t / "merged");
    } catch (const Error& e) {
        c.detail = e.what();
    }
    remove_tree(t);
    return c;
}

}  // namespace

// What crashes and host restarts leave in the state directory: sandboxes
// whose runtime died (failed), creates killed before their first record,
// removals and pool removals cut short, names of removed sandboxes. All of
// it is what `prune` clears.
namespace {

// Sandboxes with an egress policy (lib/sandbox/network.hpp): optional, as
// `network: none` needs none of it.
DoctorCheck network_check() {
    NetworkStatus st = network_status();
    return DoctorCheck{"network", st.ok, false, st.detail};
}

// Namespaces, veths and rules of sandboxes that no longer exist.
DoctorCheck network_leftovers_check(Context& ctx) {
    DoctorCheck c{"network-leftovers", true, false, ""};
    try {
        auto ids = network_leftovers(ctx);
        c.ok = ids.empty();
        c.detail = ids.empty()
                       ? "none"
                       : "the network namespace, veth or rules of " + std::to_string(ids.size()) +
                             " removed sandbox(es) (" + ids.front() +
                             (ids.size() > 1 ? ", ..." : "") + "): `sandweave prune` removes them";
    } catch (const std::exception& e) {
        c.ok = false;
        c.detail = std::string("could not check: ") + e.what();
    }
    return c;
}

DoctorCheck leftovers_check(Context& ctx) {
    DoctorCheck c{"leftovers", true, false, ""};
    std::vector<std::string> found;
    auto some = [](const std::vector<std::string>& ids) {
        std::string s;
        for (std::size_t i = 0; i < ids.size() && i < 3; ++i) s += (i ? ", " : "") + ids[i];
        return s + (ids.size() > 3 ? ", ..." : "");
    };
    try {
        std::vector<std::string> failed;
        for (const auto& v : list_sandboxes(ctx))
            if (v.live == SandboxState::failed) failed.push_back(v.record.id);
        if (!failed.empty())
            found.push_back(std::to_string(failed.size()) + " failed sandbox(es) (" + some(failed) +
                            ")");
        std::vector<std::string> abandoned;
        for (const auto& a : ctx.store.abandoned_reservations()) abandoned.push_back(a.id);
        if (!abandoned.empty())
            found.push_back(std::to_string(abandoned.size()) +
                            " director(ies) of interrupted creates without a record (" +
                            some(abandoned) + ")");
        std::vector<std::string> graves, pools, names;
        std::error_code ec;
        for (const char* kind : {"sandboxes", "snapshots"})
            for (const auto& e : fs::directory_iterator(ctx.store.root() / kind, ec))
                if (e.path().filename().string().rfind(".rm-", 0) == 0 &&
                    e.path().extension() != ".lock")
                    graves.push_back(e.path().filename().string());
        if (!graves.empty())
            found.push_back(std::to_string(graves.size()) + " half-removed director(ies) (" +
                            some(graves) + ")");
        ObjectDir pool_dirs = ctx.store.objects(pool_kind);
        for (const auto& e : fs::directory_iterator(pool_dirs.path(), ec)) {
            std::string n = e.path().filename().string();
            if (valid_object_name(n) && !pool_dirs.exists(n)) pools.push_back(n);
        }
        if (!pools.empty())
            found.push_back(std::to_string(pools.size()) + " half-removed pool(s) (" + some(pools) +
                            ")");
        for (const auto& e : fs::directory_iterator(ctx.store.root() / "names", ec)) {
            std::string n = e.path().filename().string();
            auto target = fs::read_symlink(e.path(), ec);
            if (n[0] != '.' && !ec && !fs::exists(ctx.store.sandbox_dir(target.string()), ec))
                names.push_back(n);
        }
        if (!names.empty())
            found.push_back(std::to_string(names.size()) + " name(s) of removed sandboxes (" +
                            some(names) + ")");
        auto runtimes = runtime_leftovers(ctx);
        if (!runtimes.empty())
            found.push_back("the host cgroups or runtime files of " +
                            std::to_string(runtimes.size()) +
                            " sandbox(es) whose runtime was killed (" + some(runtimes) + ")");
    } catch (const std::exception& e) {
        c.ok = false;
        c.detail = std::string("could not check: ") + e.what();
        return c;
    }
    if (found.empty()) {
        c.detail = "none in " + ctx.store.root().string();
        return c;
    }
    c.ok = false;
    for (const auto& f : found) c.detail += (c.detail.empty() ? "" : "; ") + f;
    c.detail += ": `sandweave prune` removes them (export audit logs of failed sandboxes first)";
    return c;
}

}  // namespace

std::vector<DoctorCheck> run_doctor(Context& ctx) {
    std::vector<DoctorCheck> out;

    DoctorCheck runsc{"runsc", false, true, ""};
    std::optional<fs::path> runsc_path;
    try {
        runsc_path = find_runsc(ctx.runsc_flag);
        runsc.detail = runsc_path->string() + ": " + Runsc(ctx.runner, *runsc_path, {}).version();
        runsc.ok = true;
    } catch (const Error& e) {
        runsc_path.reset();
        runsc.detail = e.what();
    }
    out.push_back(runsc);

    DoctorCheck patched{"patched runtime", ::access(patched_runsc_path, X_OK) == 0, false, ""};
    patched.detail = patched.ok ? std::string(patched_runsc_path)
                                : std::string("not installed at ") + patched_runsc_path +
                                      " (runtime/build-runsc.sh)";
    out.push_back(patched);

    DoctorCheck root{"root", ::geteuid() == 0, true,
                     ::geteuid() == 0 ? "running as root" : "runsc and overlay mounts need root"};
    out.push_back(root);

    DoctorCheck state{"state directory", ::access(ctx.store.root().c_str(), W_OK) == 0, true,
                      ctx.store.root().string()};
    if (!state.ok) state.detail += ": not writable";
    out.push_back(state);

    out.push_back(overlay_check(ctx.host, ctx.store.root()));

    DoctorCheck cgroups{"cgroups", fs::exists("/sys/fs/cgroup"), false, ""};
    cgroups.detail = fs::exists("/sys/fs/cgroup/cgroup.controllers") ? "cgroup v2"
                     : fs::exists("/sys/fs/cgroup/memory")
                         ? "cgroup v1"
                         : "not mounted: resource limits unavailable";
    cgroups.ok = cgroups.ok && cgroups.detail.rfind("not", 0) != 0;
    out.push_back(cgroups);

    DoctorCheck init{"guest init", false, true, ""};
    try {
        init.detail = find_guest_init().string();
        init.ok = true;
    } catch (const Error& e) {
        init.detail = e.what();
    }
    out.push_back(init);

    // Checked only when everything a guest needs is there (the probe boots one).
    DoctorCheck hidepid{"hidepid", false, false, ""};
    bool can_boot = runsc_path && ::geteuid() == 0 && out[out.size() - 1].ok;
    for (const auto& c : out) can_boot = can_boot && (c.ok || !c.required);
    if (!can_boot) {
        hidepid.detail = "not checked: sandboxes cannot run here";
    } else {
        try {
            HidepidVerdict v = hidepid_support(ctx, *runsc_path);
            hidepid.ok = v.supported;
            hidepid.detail = (v.supported ? "enforced by " : "NOT enforced by ") +
                             runsc_path->string() + ": " + v.detail +
                             (v.supported ? "" : " (hidepid 1 and 2 will be refused)");
        } catch (const Error& e) {
            hidepid.detail = std::string("could not check: ") + e.what();
        }
    }
    out.push_back(hidepid);

    DoctorCheck busybox{"busybox-static", fs::exists("/bin/busybox"), false, ""};
    busybox.detail = busybox.ok
                         ? "/bin/busybox (image base)"
                         : "missing: image base cannot be built (apt-get install busybox-static)";
    out.push_back(busybox);

    DoctorCheck deboot{"debootstrap", ::access("/usr/sbin/debootstrap", X_OK) == 0, false, ""};
    deboot.detail = deboot.ok
                        ? "/usr/sbin/debootstrap (image coding)"
                        : "missing: image coding cannot be built (apt-get install debootstrap)";
    out.push_back(deboot);
    out.push_back(leftovers_check(ctx));
    out.push_back(network_check());
    out.push_back(network_leftovers_check(ctx));
    return out;
}

}  // namespace sandweave
