#include "lib/sandbox/features.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/core/sha256.hpp"
#include "lib/runtime/bundle.hpp"
#include "lib/runtime/limits.hpp"
#include "lib/runtime/runsc.hpp"
#include "lib/sandbox/image.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Which version of a file this is (device, inode, size, mtime): a replaced
// file is a new version. Empty when the file cannot be seen.
std::string file_version(const fs::path& file) {
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) return {};
    return std::to_string(st.st_dev) + "|" + std::to_string(st.st_ino) + "|" +
           std::to_string(st.st_size) + "|" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec);
}

// A runtime binary's identity for the verdict cache: path and version, so a
// rebuilt or replaced runsc is checked again.
std::string runtime_key(const fs::path& runsc) {
    std::string version = file_version(runsc);
    if (version.empty()) throw_errno("stat " + runsc.string());
    return sha256_hex(runsc.string() + "|" + version).substr(0, 32);
}

// What a probe sandbox did: how runsc ended, what the guest printed.
struct ProbeRun {
    CommandResult result;
    std::string output;
};

// Boots a throwaway sandbox of `spec` on the base image, its bundle adjusted
// by `adjust`, read-only root; runs it to exit (60 s at most) and removes
// everything of it.
ProbeRun run_probe(Context& ctx, const fs::path& runsc_path, const SandboxSpec& spec,
                   const std::function<void(json&)>& adjust) {
    ImageStore images(ctx.store.images_dir(), ctx.runner);
    fs::path rootfs = images.ensure("base");
    fs::path dir = ctx.store.root() / "runtime" / ("probe-" + random_hex(8));
    make_dirs(dir / "bundle", 0700);
    std::string id = "swprobe-" + random_hex(8);
    // The image itself is the read-only root: /tmp stays runsc's tmpfs.
    BundleInput in{spec, rootfs, find_guest_init(), "probe", {}, {}, {}};
    json config = build_oci_config(in);
    config["root"]["readonly"] = true;
    adjust(config);
    write_file_atomic(dir / "bundle/config.json", config.dump(), 0600);

    Runsc runsc(ctx.runner, runsc_path,
                Runsc::flags_for(dir / "runsc", "ptrace", "none", std::nullopt));
    ProbeRun out;
    out.result = runsc.run_to_exit(id, dir / "bundle", dir / "probe.log", std::chrono::seconds(60));
    try {
        out.output = read_file(dir / "probe.log", 1 << 16);
    } catch (const Error&) {
    }
    try {
        if (runsc.state(id)) runsc.remove(id, true);
    } catch (const Error&) {
    }
    remove_tree(dir);
    return out;
}

// Boots a throwaway sandbox whose /proc is mounted hidepid=2 and runs the guest
// init's probe: an unprivileged child must not see root's PID 1.
HidepidVerdict probe_hidepid(Context& ctx, const fs::path& runsc_path) {
    SandboxSpec spec;
    spec.runtime.hidepid = 2;
    auto [r, output] = run_probe(ctx, runsc_path, spec, [](json& config) {
        config["process"]["args"] = {guest_init_path, "--probe-hidepid"};
        config["process"]["capabilities"] = {{"bounding", {"CAP_SETUID", "CAP_SETGID"}},
                                             {"effective", {"CAP_SETUID", "CAP_SETGID"}},
                                             {"permitted", {"CAP_SETUID", "CAP_SETGID"}}};
    });

    HidepidVerdict v;
    v.supported = r.ok();
    while (!output.empty() && output.back() == '\n') output.pop_back();
    auto nl = output.rfind('\n');
    v.detail = output.empty() ? r.describe() : output.substr(nl == std::string::npos ? 0 : nl + 1);
    // Only the probe's own answer is a verdict (exit 0 enforced, 1 not, with
    // its line); a launch that timed out or failed says nothing about
    // hidepid and must not be remembered as "unsupported".
    v.conclusive = !r.timed_out && r.term_signal == 0 &&
                   (r.exit_status == 0 || r.exit_status == 1) &&
                   output.find("probe: as uid 1001") != std::string::npos;
    return v;
}

// ---- guest limits (lib/runtime/limits.hpp) -----------------------------------
// Boots a throwaway sandbox limited to one task and 64 MiB, whose PID 1 is a
// shell using builtins only: the runtime enforces the limits in the guest when
// the shell's fork fails and /proc/meminfo reports the memory limit. Debian's
// stock runsc ignores the annotations: the fork works.
struct LimitsVerdict {
    bool supported = false;
    bool conclusive = true;
    std::string detail;
};

LimitsVerdict probe_limits(Context& ctx, const fs::path& runsc_path) {
    SandboxSpec spec;
    spec.resources.pids = 1;
    spec.resources.memory = 64ull << 20;
    auto [r, output] = run_probe(ctx, runsc_path, spec, [](json& config) {
        // stderr: busybox sh loses buffered stdout when a failed fork ends it.
        config["process"]["args"] = {
            "/bin/sh", "-c",
            "while read -r k v u; do [ \"$k\" = MemTotal: ] && echo \"probe: memtotal $v\" >&2; "
            "done </proc/meminfo; if /bin/true; then echo 'probe: fork allowed' >&2; fi"};
    });

    LimitsVerdict v;
    bool refused = output.find("can't fork: Resource temporarily unavailable") != std::string::npos;
    bool allowed = output.find("probe: fork allowed") != std::string::npos;
    bool memtotal = output.find("probe: memtotal 65536") != std::string::npos;
    v.conclusive = !r.timed_out && (refused || allowed);
    v.supported = refused && memtotal;
    v.detail = v.supported ? "enforced"
               : allowed   ? "a fork past pids 1 succeeded in the probe sandbox"
               : !memtotal ? "the guest does not see its memory limit"
                           : r.describe();
    return v;
}

}  // namespace

namespace {

fs::path cache_file(Context& ctx, const fs::path& runsc) {
    return ctx.store.root() / "runtime" / (runtime_key(runsc) + ".json");
}

// Parsed once per version of the file and process: a long-lived process
// (serve, a pool's refill) creates one sandbox after another, and the entry
// (~175 KB, trace metadata mostly) took more CPU to parse than the rest of
// the create's own work. The version is read before the file, so a file
// replaced in between is parsed again on the next call, never served stale.
json load_cache(const fs::path& file) {
    static std::mutex mu;
    static std::map<fs::path, std::pair<std::string, json>> parsed;
    std::string version = file_version(file);
    if (version.empty()) return json::object();  // not recorded yet
    {
        std::lock_guard lock(mu);
        auto it = parsed.find(file);
        if (it != parsed.end() && it->second.first == version) return it->second.second;
    }
    try {
        json j = parse_untrusted_json(read_file(file, 16u << 20));
        if (!j.is_object()) return json::object();
        std::lock_guard lock(mu);
        parsed[file] = {version, j};
        return j;
    } catch (const std::exception&) {
        return json::object();  // unreadable: treated as empty
    }
}

void store_cache(Context& ctx, const fs::path& file, json j) {
    make_dirs(ctx.store.root() / "runtime", 0700);
    write_file_atomic(file, j.dump(2), 0600);
}

}  // namespace

// Adds fields to a runtime's cache entry; the lock keeps concurrent sandweave
// processes from overwriting each other's findings.
void update_cache(Context& ctx, const fs::path& file, const fs::path& runsc, const json& fields) {
    make_dirs(ctx.store.root() / "runtime", 0700);
    FileLock lock(fs::path(file.string() + ".lock"));
    json j = load_cache(file);
    j["runsc"] = runsc.string();
    for (const auto& [k, v] : fields.items()) j[k] = v;
    store_cache(ctx, file, j);
}

std::string runtime_version(Context& ctx, const fs::path& runsc) {
    fs::path file = cache_file(ctx, runsc);
    json j = load_cache(file);
    if (j.contains("version")) return j["version"].get<std::string>();
    std::string v = Runsc(ctx.runner, runsc, {}).version();
    update_cache(ctx, file, runsc, {{"version", v}});
    return v;
}

namespace {

std::string file_sha256(const fs::path& file) {
    Sha256 h;
    read_chunks(file, [&](std::string_view chunk) {
        h.update(chunk);
        return true;
    });
    return h.hex_digest();
}

}  // namespace

RuntimeBuild runtime_build(Context& ctx, const fs::path& runsc) {
    RuntimeBuild b;
    fs::path manifest = runsc.string() + ".build.json";
    std::error_code ec;
    if (!fs::exists(manifest, ec)) {
        b.detail = "not recorded (no " + manifest.filename().string() +
                   " beside it: not built by runtime/build-runsc.sh, or by an older one)";
        return b;
    }
    json m;
    try {
        m = parse_untrusted_json(read_file(manifest, 1u << 20));
        if (!m.is_object() || !m.contains("sha256") || !m["sha256"].is_string() ||
            !m.contains("patches") || !m["patches"].is_array())
            throw std::runtime_error("expected sha256 and patches");
    } catch (const std::exception& e) {
        b.detail = "not known: " + manifest.string() + " is unreadable (" + e.what() + ")";
        return b;
    }
    // The digest costs a read of the whole binary: once per binary identity.
    fs::path file = cache_file(ctx, runsc);
    json cache = load_cache(file);
    std::string digest;
    if (cache.contains("sha256") && cache["sha256"].is_string()) {
        digest = cache["sha256"].get<std::string>();
    } else {
        digest = file_sha256(runsc);
        update_cache(ctx, file, runsc, {{"sha256", digest}});
    }
    if (m["sha256"].get<std::string>() != digest) {
        b.detail = "not known: " + manifest.string() +
                   " describes another binary (sha256 differs; rebuild with "
                   "runtime/build-runsc.sh)";
        return b;
    }
    for (const auto& p : m["patches"])
        if (p.is_object() && p.contains("name") && p["name"].is_string())
            b.patches.push_back(p["name"].get<std::string>());
    b.known = true;
    b.detail = manifest.string();
    return b;
}

HidepidVerdict hidepid_support(Context& ctx, const fs::path& runsc) {
    fs::path file = cache_file(ctx, runsc);
    json j = load_cache(file);
    if (j.contains("hidepid") && j["hidepid"].is_object())
        return HidepidVerdict{j["hidepid"].value("supported", false),
                              j["hidepid"].value("detail", std::string()), true};
    log().info("checking that " + runsc.string() + " enforces hidepid (once per runtime)");
    HidepidVerdict v = probe_hidepid(ctx, runsc);
    if (!v.conclusive)
        throw Error(ErrorCode::runtime, "could not check whether " + runsc.string() +
                                            " enforces hidepid: the probe sandbox failed (" +
                                            v.detail + "); nothing was cached, try again");
    update_cache(
        ctx, file, runsc,
        {{"hidepid",
          {{"supported", v.supported}, {"detail", v.detail}, {"checked_at", now_rfc3339()}}}});
    return v;
}

audit::TraceMetadata trace_metadata(Context& ctx, const fs::path& runsc) {
    fs::path file = cache_file(ctx, runsc);
    json j = load_cache(file);
    if (!j.contains("trace_metadata")) {
        auto r = Runsc(ctx.runner, runsc, {}).raw({"trace", "metadata"});
        if (!r.ok())
            throw Error(ErrorCode::runtime,
                        "audit refused: runtime " + runsc.string() +
                            " cannot list its trace points (runsc trace metadata: " + r.describe() +
                            ")");
        update_cache(ctx, file, runsc, {{"trace_metadata", r.out}});
        j["trace_metadata"] = r.out;
    }
    try {
        // Parsed once per text and process, as the entry is (load_cache).
        static std::mutex mu;
        static std::map<fs::path, std::pair<std::string, audit::TraceMetadata>> parsed;
        const auto& text = j["trace_metadata"].get_ref<const std::string&>();
        std::lock_guard lock(mu);
        auto it = parsed.find(file);
        if (it == parsed.end() || it->second.first != text)
            it = parsed.insert_or_assign(file, std::pair{text, audit::parse_trace_metadata(text)})
                     .first;
        return it->second.second;
    } catch (const Error& e) {
        throw Error(ErrorCode::runtime,
                    "audit refused: runtime " + runsc.string() + ": " + e.what());
    }
}

void require_limit_support(Context& ctx, const SandboxSpec& spec, const fs::path& runsc) {
    check_limits_enforceable(spec.resources, std::thread::hardware_concurrency());
    if (!has_guest_limits(spec.resources)) return;
    fs::path file = cache_file(ctx, runsc);
    json j = load_cache(file);
    LimitsVerdict v;
    if (j.contains("guest_limits") && j["guest_limits"].is_object()) {
        v.supported = j["guest_limits"].value("supported", false);
        v.detail = j["guest_limits"].value("detail", std::string());
    } else {
        log().info("checking that " + runsc.string() +
                   " enforces pids and memory limits in the guest (once per runtime)");
        v = probe_limits(ctx, runsc);
        if (!v.conclusive)
            throw Error(ErrorCode::runtime, "could not check whether " + runsc.string() +
                                                " enforces resource limits: the probe sandbox "
                                                "failed (" +
                                                v.detail + "); nothing was cached, try again");
        update_cache(
            ctx, file, runsc,
            {{"guest_limits",
              {{"supported", v.supported}, {"detail", v.detail}, {"checked_at", now_rfc3339()}}}});
    }
    if (!v.supported)
        throw Error(ErrorCode::runtime,
                    std::string("resources.") + (spec.resources.pids ? "pids" : "memory") +
                        " refused: runtime " + runsc.string() +
                        " cannot enforce it inside the guest (" + v.detail +
                        "), and a limit on the sandbox's host cgroup would kill the whole "
                        "sandbox; use sandweave's patched runsc (runtime/build-runsc.sh)");
}

void require_runtime_features(Context& ctx, const SandboxSpec& spec, const fs::path& runsc) {
    if (spec.runtime.platform == "kvm" && ::access("/dev/kvm", R_OK | W_OK) != 0)
        throw Error(ErrorCode::runtime,
                    "platform kvm refused: /dev/kvm is not available on this host (use ptrace)");
    if (spec.runtime.hidepid != 0) {
        HidepidVerdict v = hidepid_support(ctx, runsc);
        if (!v.supported)
            throw Error(ErrorCode::runtime,
                        "hidepid " + std::to_string(spec.runtime.hidepid) + " refused: runtime " +
                            runsc.string() + " does not enforce hidepid in the guest's /proc (" +
                            v.detail + "); use sandweave's patched runsc (runtime/build-runsc.sh)");
    }
    if (spec.runtime.audit) trace_metadata(ctx, runsc);
    require_limit_support(ctx, spec, runsc);
}

}  // namespace sandweave
