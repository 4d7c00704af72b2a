#include "lib/sandbox/audit_glue.hpp"

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/log.hpp"
#include "lib/sandbox/features.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

namespace fs = std::filesystem;

namespace {

// sockaddr_un holds 108 bytes; the sink socket's path must fit.
constexpr std::size_t max_socket_path = 100;

SandboxRecord audited_record(Context& ctx, const std::string& ref) {
    std::string id = ctx.store.resolve_id(ref);
    SandboxRecord r = ctx.store.load(id);
    if (!r.spec.runtime.audit)
        throw Error(ErrorCode::usage,
                    "sandbox " + id + " was created without audit (create one with audit enabled)");
    return r;
}

}  // namespace

fs::path audit_dir(const StateStore& store, const std::string& id) {
    return store.sandbox_dir(id) / "audit";
}

fs::path start_audit(Context& ctx, const SandboxRecord& r) {
    fs::path dir = audit_dir(ctx.store, r.id);
    fs::path socket = audit::sink_socket_path(dir);
    if (socket.string().size() > max_socket_path)
        throw Error(ErrorCode::usage, "audit socket path " + socket.string() + " is longer than " +
                                          std::to_string(max_socket_path) +
                                          " bytes; use a state directory with a shorter path");
    audit::WriterOptions w;
    w.dir = dir;
    w.sandbox_id = r.id;
    w.max_bytes = r.spec.runtime.audit_max_bytes;
    w.runtime_version = r.runtime_version;
    w.points = audit::default_selection(trace_metadata(ctx, r.runsc));
    with_context("starting audit writer", [&] { audit::start_writer(helper_exe(), w); });
    fs::path config = ctx.store.sandbox_dir(r.id) / "pod-init-config.json";
    // Read once, by the runsc started next; a host crash ends what it configures.
    write_file_atomic(config, audit::pod_init_config(w.points, socket), 0600, Durability::live);
    return config;
}

std::optional<std::uint64_t> sentry_dropped(Runsc& runsc, const std::string& id) {
    // Asked of the sandbox's control server directly (no runsc process);
    // `runsc trace list` is the fallback, and the judge when they disagree
    // on whether there is an answer.
    if (auto sessions = runsc.control_call(id, "containerManager.ListTraceSessions"))
        if (auto n = audit::trace_sessions_dropped(*sessions)) return n;
    auto r = runsc.raw({"trace", "list", id});
    if (!r.ok()) {
        log().debug("runsc trace list " + id + ": " + r.describe());
        return std::nullopt;
    }
    return audit::parse_trace_list_dropped(r.out + r.err);
}

audit::Status finish_audit(Context& ctx, const SandboxRecord& r, bool sandbox_running) {
    std::optional<std::uint64_t> dropped;
    if (sandbox_running) {
        Runsc runsc(ctx.runner, r.runsc, r.runsc_flags);
        dropped = sentry_dropped(runsc, r.id);
    }
    return audit::finish(audit_dir(ctx.store, r.id), dropped);
}

audit::Status export_audit(Context& ctx, const std::string& ref, const fs::path& dest) {
    SandboxRecord r = audited_record(ctx, ref);
    std::optional<std::uint64_t> dropped;
    if (r.state == SandboxState::running) {
        Runsc runsc(ctx.runner, r.runsc, r.runsc_flags);
        dropped = sentry_dropped(runsc, r.id);
    }
    return with_context("exporting the audit log of " + r.id, [&] {
        return audit::export_log(audit_dir(ctx.store, r.id), dest, dropped,
                                 to_json(r.spec)["runtime_options"]["network"]);
    });
}

audit::Status audit_status(Context& ctx, const std::string& ref) {
    SandboxRecord r = audited_record(ctx, ref);
    return audit::live_status(audit_dir(ctx.store, r.id));
}

}  // namespace sandweave
