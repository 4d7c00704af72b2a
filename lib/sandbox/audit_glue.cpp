#include "lib/sandbox/audit_glue.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/log.hpp"
#include "lib/sandbox/features.hpp"
#include "lib/sandbox/network.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

namespace fs = std::filesystem;

namespace {

// sockaddr_un holds 108 bytes; the sink socket's path must fit.
constexpr std::size_t max_socket_path = 100;

// short_audit_root, made 0700 if missing; refused unless it is a directory
// of ours that no one else may write (its symlinks lead runsc's connect).
fs::path own_alias_root() {
    fs::path root = short_audit_root;
    make_dirs(root, 0700);
    struct stat st {};
    if (::lstat(root.c_str(), &st) != 0) throw_errno("stat " + root.string());
    if (!S_ISDIR(st.st_mode) || st.st_uid != ::geteuid() || (st.st_mode & 0077) != 0)
        throw Error(ErrorCode::general, root.string() +
                                            " is not a directory of this user that only it may "
                                            "use (0700); remove it or fix its mode");
    return root;
}

fs::path alias_path(const std::string& id) {
    return fs::path(short_audit_root) / id;
}

// The sink socket's path as runsc must see it: the socket itself, or its
// directory through the sandbox's short alias.
fs::path runsc_endpoint(const fs::path& dir, const std::string& id) {
    fs::path socket = audit::sink_socket_path(dir);
    if (socket.string().size() <= max_socket_path) return socket;
    fs::path alias = own_alias_root() / id;
    std::error_code ec;
    fs::remove(alias, ec);  // an earlier try of this very create
    if (::symlink(fs::absolute(dir).c_str(), alias.c_str()) != 0)
        throw_errno("symlink " + alias.string());
    fs::path endpoint = alias / socket.filename();
    if (endpoint.string().size() > max_socket_path)
        throw Error(ErrorCode::general, "audit socket alias " + endpoint.string() +
                                            " is longer than " + std::to_string(max_socket_path) +
                                            " bytes");
    return endpoint;
}

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

void require_audit_writer(Context& ctx, const SandboxRecord& r, const std::string& what) {
    if (!r.spec.runtime.audit || r.state != SandboxState::running) return;
    std::string why = audit::writer_gone(audit_dir(ctx.store, r.id));
    if (why.empty()) return;
    throw Error(ErrorCode::general, "cannot " + what + ": the audit writer of sandbox " + r.id +
                                        " is gone (" + why +
                                        "), and an audited sandbox runs nothing unaudited "
                                        "(what it recorded can still be exported)");
}

fs::path start_audit(Context& ctx, const SandboxRecord& r) {
    fs::path dir = audit_dir(ctx.store, r.id);
    audit::WriterOptions w;
    w.dir = dir;
    w.sandbox_id = r.id;
    w.max_bytes = r.spec.runtime.audit_max_bytes;
    w.runtime_version = r.runtime_version;
    w.points = audit::default_selection(trace_metadata(ctx, r.runsc));
    if (r.network)
        if (auto group = network_log_group(*r.network))
            w.egress_log_group = static_cast<std::uint16_t>(*group);
    with_context("starting audit writer", [&] { audit::start_writer(helper_exe(), w); });
    fs::path socket = with_context("audit socket", [&] { return runsc_endpoint(dir, r.id); });
    fs::path config = ctx.store.sandbox_dir(r.id) / "pod-init-config.json";
    // Read once, by the runsc started next; a host crash ends what it configures.
    write_file_atomic(config, audit::pod_init_config(w.points, socket), 0600, Durability::live);
    return config;
}

void remove_audit_alias(const std::string& id) {
    std::error_code ec;
    fs::remove(alias_path(id), ec);
}

int sweep_audit_aliases() {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(short_audit_root, ec)) {
        // Dangling: the sandbox directory it led to is gone.
        std::error_code st;
        if (!e.is_symlink(st) || fs::exists(e.path(), st)) continue;
        if (fs::remove(e.path(), st)) ++n;
    }
    return n;
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
    // export_log names the export and its destination; this adds whose log.
    return with_context("sandbox " + r.id, [&] {
        return audit::export_log(audit_dir(ctx.store, r.id), dest, dropped,
                                 to_json(r.spec)["runtime_options"]["network"]);
    });
}

audit::Status audit_status(Context& ctx, const std::string& ref) {
    SandboxRecord r = audited_record(ctx, ref);
    return audit::live_status(audit_dir(ctx.store, r.id));
}

}  // namespace sandweave
