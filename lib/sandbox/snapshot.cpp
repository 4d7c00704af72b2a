#include "lib/sandbox/snapshot.hpp"

#include <sys/stat.h>

#include <chrono>
#include <thread>

#include "lib/core/error.hpp"
#include "lib/core/fault.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/runtime/runsc.hpp"
#include "lib/sandbox/sandbox.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path snapshots_root(Context& ctx) {
    return ctx.store.objects(snapshot_kind).path();
}

// Everything a restore needs must be there and parse.
SnapshotRecord read_and_verify(const fs::path& dir) {
    SnapshotRecord s;
    std::string name = dir.filename().string();
    try {
        s = snapshot_from_json(parse_untrusted_json(read_file(dir / "snapshot.json", 4u << 20)));
    } catch (const json::exception& e) {
        throw Error(ErrorCode::general, "snapshot " + name + " is corrupt: " + e.what());
    } catch (const Error& e) {
        throw Error(ErrorCode::general, "snapshot " + name + " is corrupt: " + e.what());
    }
    std::error_code ec;
    if (!fs::is_directory(dir / "layer", ec))
        throw Error(ErrorCode::general, "snapshot " + s.id + " is corrupt: its layer is missing");
    if (s.kind == SnapshotKind::memory) {
        auto size = fs::file_size(dir / "checkpoint/checkpoint.img", ec);
        if (ec || size == 0)
            throw Error(ErrorCode::general,
                        "snapshot " + s.id + " is corrupt: its checkpoint image is missing");
    }
    return s;
}

// How long a sandbox whose checkpoint image is written gets to stop.
constexpr std::chrono::seconds checkpoint_exit_wait{10};

// A memory snapshot's builder died between the checkpoint (which stops the
// source) and the in-place restore: restore the source from the checkpoint it
// left, so the sandbox keeps running as if the snapshot had failed cleanly.
// Returns false when it cannot be decided now (the source is locked, or the
// orphaned `runsc checkpoint` still runs): the temporary directory stays.
bool recover_checkpointed_source(Context& ctx, const fs::path& tmp, const std::string& id) {
    if (!ctx.host.processes_matching(tmp.string()).empty()) return false;
    auto lock = FileLock::try_lock(ctx.store.sandbox_dir(id) / "lock");
    if (!lock.locked()) return false;
    auto r = ctx.store.try_load(id);
    if (!r || r->state != SandboxState::running) return true;
    Runsc runsc(ctx.runner, r->runsc, r->runsc_flags);
    std::error_code ec;
    const bool image_written = fs::file_size(tmp / "checkpoint/checkpoint.img", ec) > 0 && !ec;
    auto st = runsc.state(id);
    // A sandbox whose checkpoint was written stops by itself, but `runsc
    // checkpoint` returns before its sentry has exited: right after the
    // builder's death it may still say running. Wait for that exit rather
    // than take it for a sandbox the checkpoint never reached (whose image
    // would then be dropped and the sandbox lost a moment later).
    for (auto deadline = std::chrono::steady_clock::now() + checkpoint_exit_wait;
         image_written && st && st->status == "running" &&
         std::chrono::steady_clock::now() < deadline;
         st = runsc.state(id))
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (st && st->status == "running") return true;  // the checkpoint did not stop it: it runs on
    fs::path sdir = ctx.store.sandbox_dir(id);
    try {
        if (st) runsc.remove(id, true);
        if (!image_written) throw Error(ErrorCode::general, "the checkpoint image is incomplete");
        runsc.restore_detached(id, sdir / "bundle", tmp / "checkpoint", sdir / "logs/console.log",
                               r->agent ? sdir / "agent.sock" : fs::path());
        log().warn("restored sandbox " + id +
                   ", stopped by an interrupted memory snapshot, from its checkpoint");
    } catch (const Error& e) {
        r->state = SandboxState::failed;
        r->error =
            std::string("an interrupted memory snapshot stopped it and restoring it failed: ") +
            e.what();
        ctx.store.save(*r);
        log().warn("sandbox " + id + ": " + *r->error);
    }
    return true;
}

// Removes temporary snapshot directories whose builder is gone, resuming a
// source sandbox that the builder had paused (or restoring one it had
// checkpointed).
void sweep_abandoned(Context& ctx, const fs::path& root) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root, ec)) {
        std::string n = e.path().filename().string();
        if (n.rfind(".tmp-", 0) != 0 && n.rfind(".rm-", 0) != 0) continue;
        // A builder's (or remover's) lock file, not an entry: removing it would
        // let the next pass take the lock of a build that is still running.
        if (n.size() >= 5 && n.compare(n.size() - 5, 5, ".lock") == 0) continue;
        auto lock = FileLock::try_lock(root / (n + ".lock"));
        if (!lock.locked()) continue;
        try {
            std::string source = read_file(e.path() / "checkpointed-source", 256);
            if (!recover_checkpointed_source(ctx, e.path(), source)) continue;
        } catch (const Error&) {
            // Not a memory snapshot's, or nothing to recover.
        }
        try {
            std::string paused = read_file(e.path() / "paused-source", 256);
            if (auto r = ctx.store.try_load(paused)) {
                Runsc(ctx.runner, r->runsc, r->runsc_flags).raw({"resume", r->id});
                log().warn("resumed sandbox " + r->id + ", left paused by an interrupted snapshot");
            }
        } catch (const Error&) {
            // No paused source recorded.
        }
        remove_tree(e.path());
        std::error_code ec2;
        fs::remove(root / (n + ".lock"), ec2);
    }
}

}  // namespace

void recover_interrupted_snapshots(Context& ctx) {
    sweep_abandoned(ctx, snapshots_root(ctx));
}

void copy_tree(Context& ctx, const fs::path& from, const fs::path& to) {
    make_dirs(to, 0755);
    Command c;
    c.argv = {"cp", "-a", "--reflink=auto", "--", (from / ".").string(), to.string()};
    auto r = ctx.runner.run(c);
    if (!r.ok())
        throw Error(ErrorCode::general,
                    "copy " + from.string() + " to " + to.string() + ": " + r.describe());
}

std::string to_string(SnapshotKind k) {
    return k == SnapshotKind::fs ? "fs" : "memory";
}

SnapshotRecord snapshot_from_json(const json& j) {
    SnapshotRecord s;
    s.id = j.at("id").get<std::string>();
    s.name = j.value("name", std::string());
    std::string kind = j.at("kind").get<std::string>();
    if (kind != "fs" && kind != "memory")
        throw Error(ErrorCode::general, "unknown snapshot kind '" + kind + "'");
    s.kind = kind == "fs" ? SnapshotKind::fs : SnapshotKind::memory;
    s.source = j.value("source", std::string());
    s.created_at = j.value("created_at", std::string());
    s.bytes = j.value("bytes", std::uint64_t{0});
    s.spec = spec_from_json(j.at("spec"));
    s.runsc = j.value("runsc", std::string());
    s.runtime_version = j.value("runtime_version", std::string());
    s.agent = j.value("agent", false);
    return s;
}

json to_json(const SnapshotRecord& s) {
    return json{{"id", s.id},
                {"name", s.name},
                {"kind", to_string(s.kind)},
                {"source", s.source},
                {"created_at", s.created_at},
                {"bytes", s.bytes},
                {"settings",
                 {{"template", s.spec.template_name},
                  {"hidepid", s.spec.runtime.hidepid},
                  {"audit", s.spec.runtime.audit}}},
                {"spec", to_json(s.spec)},
                {"runsc", s.runsc},
                {"runtime_version", s.runtime_version},
                {"agent", s.agent}};
}

fs::path snapshot_dir(Context& ctx, const std::string& id) {
    return snapshots_root(ctx) / id;
}

namespace {

bool known_kind(const std::string& k) {
    return k == "fs" || k == "memory" || k == "auto";
}

Error unknown_kind(const std::string& k) {
    return Error(ErrorCode::usage, "snapshot kind '" + k + "': expected fs, memory or auto");
}

}  // namespace

SnapshotKind choose_snapshot_kind(const std::string& requested, bool audit,
                                  const std::string& sandbox_id, bool network) {
    if (!known_kind(requested)) throw unknown_kind(requested);
    SnapshotKind kind = requested == "fs"       ? SnapshotKind::fs
                        : requested == "memory" ? SnapshotKind::memory
                        : audit || network      ? SnapshotKind::fs
                                                : SnapshotKind::memory;
    if (kind == SnapshotKind::memory && audit)
        throw Error(ErrorCode::usage,
                    "snapshot: sandbox " + sandbox_id +
                        " has audit on, which rejects memory snapshots (trace continuity "
                        "across a live restore is not supported); take an fs snapshot");
    if (kind == SnapshotKind::memory && network)
        throw Error(ErrorCode::usage,
                    "snapshot: sandbox " + sandbox_id +
                        " has a network, whose stack a memory snapshot cannot restore; take an "
                        "fs snapshot");
    return kind;
}

namespace {

void require_running(Runsc& runsc, const SandboxRecord& r) {
    auto st = r.state == SandboxState::running ? runsc.state(r.id) : std::nullopt;
    if (!st || st->status != "running")
        throw Error(ErrorCode::general,
                    "snapshot: sandbox " + r.id + " is not running (" +
                        (r.state == SandboxState::running ? "failed" : to_string(r.state)) + ")");
}

// Held until the snapshot is in place, so two snapshots given the same name
// at once cannot both pass the check. Nothing to hold for an unnamed one.
std::optional<FileLock> claim_snapshot_name(Context& ctx, const fs::path& root,
                                            const std::string& name) {
    std::optional<FileLock> name_lock;
    if (name.empty()) return name_lock;
    if (!valid_object_name(name))
        throw Error(ErrorCode::usage,
                    "snapshot name '" + name + "': 1-64 letters, digits, '-', '_' or '.'");
    name_lock.emplace(root / (".name-" + name + ".lock"));
    for (const auto& other : list_snapshots(ctx))
        if (other.name == name)
            throw Error(ErrorCode::usage, "snapshot name '" + name + "' is already in use");
    return name_lock;
}

// An fs snapshot: the layer, copied while the guest is held still.
void copy_layer_paused(Context& ctx, Runsc& runsc, const std::string& id, const fs::path& sdir,
                       const fs::path& tmp) {
    // Flush the guest's dirty file data through the gofer, then hold the
    // guest still while the layer is copied. Named capabilities: without
    // any, runsc exec gives the process the init's, CAP_SYS_ADMIN included;
    // sync needs none of them.
    auto sync = runsc.raw({"exec", "--user", "0:0", "--cap", "CAP_KILL", id, "/bin/sync"});
    if (!sync.ok()) log().warn("guest sync before snapshot failed: " + sync.describe());
    // Recorded first: if we die while it is paused, the next snapshot
    // command (sweep_abandoned) resumes it.
    write_file_atomic(tmp / "paused-source", id, 0600);
    runsc.pause(id);
    SANDWEAVE_FAULT_POINT("snapshot.paused");
    try {
        copy_tree(ctx, sdir / "upper", tmp / "layer");
    } catch (...) {
        runsc.raw({"resume", id});  // best effort: the copy's error is the one to report
        throw;
    }
    runsc.resume(id);
    fs::remove(tmp / "paused-source");
}

// The source, stopped by its checkpoint, restored in place from it; a source
// that cannot be is recorded as failed.
void restore_source(Context& ctx, Runsc& runsc, SandboxRecord& r, const fs::path& sdir,
                    const fs::path& tmp) {
    try {
        // checkpoint stops the sandbox, but its sentry may still be on
        // its way out (a loaded host): a plain delete then refuses a
        // container "not stopped", and the leftover makes the restore
        // fail with "already exists". --force waits for it.
        runsc.remove(r.id, true);
        SANDWEAVE_FAULT_POINT("snapshot.deleted");
        runsc.restore_detached(r.id, sdir / "bundle", tmp / "checkpoint", sdir / "logs/console.log",
                               r.agent ? sdir / "agent.sock" : fs::path());
    } catch (const Error& e) {
        r.state = SandboxState::failed;
        r.error = std::string("restore after memory snapshot failed: ") + e.what();
        ctx.store.save(r);
        throw Error(ErrorCode::runtime,
                    "sandbox " + r.id + " could not be resumed after its checkpoint: " + e.what());
    }
}

// A memory snapshot: checkpoint stops the sandbox; the layer is copied at
// that instant, then the source is restored in place and keeps running.
void checkpoint_and_copy_layer(Context& ctx, Runsc& runsc, SandboxRecord& r, const fs::path& sdir,
                               const fs::path& tmp) {
    make_dirs(tmp / "checkpoint", 0700);
    // Recorded first: if we die once the checkpoint has stopped the
    // source, the next ls or snapshot command restores it from here.
    write_file_atomic(tmp / "checkpointed-source", r.id, 0600);
    runsc.checkpoint(r.id, tmp / "checkpoint");
    SANDWEAVE_FAULT_POINT("snapshot.checkpointed");
    std::optional<Error> copy_error;
    try {
        copy_tree(ctx, sdir / "upper", tmp / "layer");
    } catch (const Error& e) {
        copy_error = e;
    }
    restore_source(ctx, runsc, r, sdir, tmp);
    fs::remove(tmp / "checkpointed-source");
    if (copy_error) throw *copy_error;
}

// The record written beside what was copied, read back, and the whole
// directory renamed into place.
void seal_snapshot(SnapshotRecord& s, const fs::path& tmp, const fs::path& root) {
    s.created_at = now_rfc3339();
    s.bytes = tree_bytes(tmp);
    write_file_atomic(tmp / "snapshot.json", to_json(s).dump(2) + "\n", 0600);
    read_and_verify(tmp);
    SANDWEAVE_FAULT_POINT("snapshot.verified");
    fs::rename(tmp, root / s.id);
    fsync_dir(root);
}

}  // namespace

SnapshotRecord create_snapshot(Context& ctx, const SnapshotRequest& req) {
    if (!known_kind(req.kind)) throw unknown_kind(req.kind);  // before touching the sandbox
    std::string id = ctx.store.resolve_id(req.sandbox);
    auto sandbox_lock = ctx.store.lock(id);
    SandboxRecord r = ctx.store.load(id);
    Runsc runsc(ctx.runner, r.runsc, r.runsc_flags);
    require_running(runsc, r);
    SnapshotKind kind =
        choose_snapshot_kind(req.kind, r.spec.runtime.audit, id, r.spec.runtime.egress.has_value());

    fs::path root = snapshots_root(ctx);
    sweep_abandoned(ctx, root);
    SnapshotRecord s;
    s.id = "snap-" + random_hex(12);
    s.name = req.name;
    std::optional<FileLock> name_lock = claim_snapshot_name(ctx, root, s.name);
    s.kind = kind;
    s.source = id;
    s.spec = r.spec;
    s.runsc = r.runsc;
    s.runtime_version = r.runtime_version;
    s.agent = r.agent;
    fs::path tmp = root / (".tmp-" + s.id);
    fs::path build_lock_file = root / (".tmp-" + s.id + ".lock");
    FileLock build_lock(build_lock_file);
    fs::path sdir = ctx.store.sandbox_dir(id);
    std::error_code ec;
    try {
        make_dirs(tmp, 0700);
        if (kind == SnapshotKind::fs)
            copy_layer_paused(ctx, runsc, id, sdir, tmp);
        else
            checkpoint_and_copy_layer(ctx, runsc, r, sdir, tmp);
        seal_snapshot(s, tmp, root);
    } catch (...) {
        remove_tree(tmp);
        fs::remove(build_lock_file, ec);
        throw;
    }
    fs::remove(build_lock_file, ec);
    return s;
}

std::vector<SnapshotRecord> list_snapshots(Context& ctx) {
    std::vector<SnapshotRecord> out;
    sweep_abandoned(ctx, snapshots_root(ctx));
    for (const auto& id : ctx.store.objects(snapshot_kind).ids()) {
        try {
            out.push_back(read_and_verify(snapshot_dir(ctx, id)));
        } catch (const Error& err) {
            log().warn("skipping " + id + ": " + err.what());
        }
    }
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.created_at < b.created_at; });
    return out;
}

SnapshotRecord load_snapshot(Context& ctx, const std::string& ref) {
    return read_and_verify(snapshot_dir(ctx, ctx.store.objects(snapshot_kind).resolve(ref)));
}

std::string remove_snapshot(Context& ctx, const std::string& ref) {
    // Resolving reads no record, so a corrupt snapshot is removable too.
    ObjectDir snapshots = ctx.store.objects(snapshot_kind);
    std::string id = snapshots.resolve(ref);
    snapshots.remove(id);
    return id;
}

SandboxSpec spec_for_restore(const SnapshotRecord& snap, const FlagOverrides& flags) {
    if (snap.kind == SnapshotKind::memory) {
        // The saved network stack names a namespace and addresses that went
        // with the source; a restore gets new ones.
        if (snap.spec.runtime.egress)
            throw Error(ErrorCode::usage,
                        "snapshot " + snap.id +
                            " is a memory snapshot of a sandbox with a network: restoring "
                            "its network stack is not supported; take a filesystem snapshot");
        if (flags.audit && *flags.audit)
            throw Error(ErrorCode::usage,
                        "snapshot " + snap.id +
                            " is a memory snapshot: audit rejects live restores (trace "
                            "continuity across a live restore is not supported)");
        if (flags.hidepid && *flags.hidepid != snap.spec.runtime.hidepid)
            throw Error(ErrorCode::usage, "snapshot " + snap.id +
                                              " is a memory snapshot taken with hidepid " +
                                              std::to_string(snap.spec.runtime.hidepid) +
                                              "; a restore cannot change hidepid: use a fresh "
                                              "launch or a filesystem snapshot");
    }
    // The snapshot's own settings become the template layer; its hidepid and
    // audit form the snapshot layer, which only explicit flags override.
    ResolvedTemplate t;
    t.name = snap.spec.template_name;
    json doc = to_json(snap.spec);
    t.doc = json{{"image", doc["image"]},
                 {"user", doc["user"]},
                 {"env", doc["env"]},
                 {"cwd", doc["cwd"]},
                 {"labels", doc["labels"]},
                 {"resources", doc["resources"]},
                 {"runtime_options",
                  {{"audit_max_bytes", doc["runtime_options"]["audit_max_bytes"]},
                   {"platform", doc["runtime_options"]["platform"]},
                   {"network", doc["runtime_options"]["network"]}}}};
    if (doc.contains("desktop")) t.doc["desktop"] = doc["desktop"];  // restarted at restore
    // The source's lifetime carries over (from the restore's own start).
    if (snap.spec.lifetime.ttl)
        t.doc["ttl"] = std::to_string(snap.spec.lifetime.ttl->count()) + "ms";
    if (snap.spec.lifetime.idle_timeout)
        t.doc["idle_timeout"] = std::to_string(snap.spec.lifetime.idle_timeout->count()) + "ms";
    for (const auto& [ptr, origin] : snap.spec.origin)
        t.origin[ptr] = origin.rfind("template ", 0) == 0 ? origin.substr(9) : origin;
    json settings{{"hidepid", snap.spec.runtime.hidepid}, {"audit", snap.spec.runtime.audit}};
    SandboxSpec spec = resolve_spec(t, &settings, snap.name.empty() ? snap.id : snap.name, flags);
    spec.template_name = snap.spec.template_name;
    // Values from the saved settings keep the origin they had in the source.
    for (auto& [ptr, origin] : spec.origin) {
        if (origin.rfind("template ", 0) != 0) continue;
        auto it = snap.spec.origin.find(ptr);
        if (it != snap.spec.origin.end()) origin = it->second;
    }
    return spec;
}

}  // namespace sandweave
