#include "lib/sandbox/features.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/log.hpp"
#include "lib/runtime/bundle.hpp"
#include "lib/runtime/runsc.hpp"
#include "lib/sandbox/image.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A runtime binary's identity for the verdict cache: path, inode and mtime, so a
// rebuilt or replaced runsc is checked again.
std::string runtime_key(const fs::path& runsc) {
    struct stat st {};
    if (::stat(runsc.c_str(), &st) != 0) throw_errno("stat " + runsc.string());
    std::string id = runsc.string() + "|" + std::to_string(st.st_dev) + "|" +
                     std::to_string(st.st_ino) + "|" + std::to_string(st.st_size) + "|" +
                     std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(reinterpret_cast<const unsigned char*>(id.data()), id.size(), digest);
    static const char hex[] = "0123456789abcdef";
    std::string out;
    for (int i = 0; i < 16; ++i) {
        out.push_back(hex[digest[i] >> 4]);
        out.push_back(hex[digest[i] & 0xf]);
    }
    return out;
}

// Boots a throwaway sandbox whose /proc is mounted hidepid=2 and runs the guest
// init's probe: an unprivileged child must not see root's PID 1.
HidepidVerdict probe_hidepid(Context& ctx, const fs::path& runsc_path) {
    ImageStore images(ctx.store.images_dir(), ctx.runner);
    fs::path rootfs = images.ensure("base");
    fs::path dir = ctx.store.root() / "runtime" / ("probe-" + random_hex(8));
    make_dirs(dir / "bundle", 0700);
    std::string id = "swprobe-" + random_hex(8);
    SandboxSpec spec;
    spec.runtime.hidepid = 2;
    BundleInput in{spec, rootfs, find_guest_init(), "probe"};
    json config = build_oci_config(in);
    config["process"]["args"] = {guest_init_path, "--probe-hidepid"};
    config["root"]["readonly"] = true;
    config["process"]["capabilities"] = {{"bounding", {"CAP_SETUID", "CAP_SETGID"}},
                                         {"effective", {"CAP_SETUID", "CAP_SETGID"}},
                                         {"permitted", {"CAP_SETUID", "CAP_SETGID"}}};
    write_file_atomic(dir / "bundle/config.json", config.dump(), 0600);

    Runsc runsc(ctx.runner, runsc_path,
                Runsc::flags_for(dir / "runsc", "ptrace", "none", std::nullopt));
    auto r = runsc.run_to_exit(id, dir / "bundle", dir / "probe.log", std::chrono::seconds(60));
    std::string output;
    try {
        output = read_file(dir / "probe.log", 1 << 16);
    } catch (const Error&) {
    }
    try {
        if (runsc.state(id)) runsc.remove(id, true);
    } catch (const Error&) {
    }
    remove_tree(dir);

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

}  // namespace

namespace {

fs::path cache_file(Context& ctx, const fs::path& runsc) {
    return ctx.store.root() / "runtime" / (runtime_key(runsc) + ".json");
}

json load_cache(const fs::path& file) {
    try {
        // trace metadata alone is ~175 KB.
        json j = json::parse(read_file(file, 16u << 20));
        if (j.is_object()) return j;
    } catch (const std::exception&) {
        // Not recorded yet, or unreadable: treated as empty.
    }
    return json::object();
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
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    if (!md || EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr) != 1)
        throw Error(ErrorCode::general, "sha256: cannot initialise");
    read_chunks(file, [&](std::string_view chunk) {
        EVP_DigestUpdate(md.get(), chunk.data(), chunk.size());
        return true;
    });
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(md.get(), digest, &len);
    static const char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
        out.push_back(hex[digest[i] >> 4]);
        out.push_back(hex[digest[i] & 0xf]);
    }
    return out;
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
        m = json::parse(read_file(manifest, 1u << 20));
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
        return audit::parse_trace_metadata(j["trace_metadata"].get<std::string>());
    } catch (const Error& e) {
        throw Error(ErrorCode::runtime,
                    "audit refused: runtime " + runsc.string() + ": " + e.what());
    }
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
}

}  // namespace sandweave
