#include "lib/sandbox/sandbox.hpp"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "lib/core/error.hpp"
#include "lib/core/fault.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/log.hpp"
#include "lib/runtime/bundle.hpp"
#include "lib/runtime/relay.hpp"
#include "lib/runtime/runsc.hpp"
#include "lib/sandbox/activity.hpp"
#include "lib/sandbox/agent_client.hpp"
#include "lib/sandbox/audit_glue.hpp"
#include "lib/sandbox/companions.hpp"
#include "lib/sandbox/desktop.hpp"
#include "lib/sandbox/features.hpp"
#include "lib/sandbox/image.hpp"
#include "lib/sandbox/limit_usage.hpp"
#include "lib/sandbox/network.hpp"
#include "lib/sandbox/snapshot.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Runsc runsc_for(Context& ctx, const SandboxRecord& r) {
    return Runsc(ctx.runner, r.runsc, r.runsc_flags);
}

// Kills every process whose arguments name this sandbox's bundle: what a
// launch that failed half-way (a timed-out runsc run, one whose creator was
// killed) leaves behind where `runsc delete` cannot see it. Looked for again
// until none is left: a runsc killed in its create may have started a
// gofer or sandbox process after the first look, which would keep its
// cgroups busy (and itself waiting for a parent that is gone).
void kill_leftover_processes(Context& ctx, const fs::path& bundle) {
    for (int round = 0; round < 100; ++round) {
        auto pids = ctx.host.processes_matching(bundle.string());
        if (pids.empty()) return;
        for (pid_t pid : pids) {
            log().debug("killing leftover process " + std::to_string(pid) + " of " +
                        bundle.string());
            ctx.host.kill(pid, SIGKILL);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    log().warn("processes naming " + bundle.string() + " are still there after SIGKILL");
}

// runsc's files in its root for a container: "<id>_sandbox:<id>.lock" and
// ".state"; a runsc killed in its create leaves the lock alone.
constexpr std::string_view runsc_file_infix = "_sandbox:";

// What a runsc killed before `runsc delete` could run leaves under the
// container's id: its host cgroups (one per hierarchy) and its files in the
// runtime's root (a lock without a state). The leftover processes must be
// killed first; a cgroup whose last task is still exiting gets a moment.
void remove_runtime_leftovers(Context& ctx, const std::string& id) {
    if (!ctx.host.remove_cgroups(id, std::chrono::seconds(2)))
        log().warn("sandbox " + id + ": some of its host cgroups still hold tasks");
    std::error_code ec;
    const std::string prefix = id + std::string(runsc_file_infix);
    for (const auto& e : fs::directory_iterator(ctx.store.runsc_root(), ec)) {
        std::string n = e.path().filename().string();
        if (n.rfind(prefix, 0) == 0 && e.path().extension() == ".lock") {
            fs::path state = e.path();
            state.replace_extension(".state");
            if (!fs::exists(state, ec)) fs::remove(e.path(), ec);
        }
    }
}

// `runsc delete --force` of a sandbox's container; already gone is fine.
void delete_with_runsc(Runsc& runsc, const SandboxRecord& r) {
    if (r.state == SandboxState::running || runsc.state(r.id)) {
        try {
            runsc.remove(r.id, true);
        } catch (const Error& e) {
            if (runsc.state(r.id)) throw;
        }
    }
}

constexpr auto runtime_exit_patience = std::chrono::seconds(5);

// What `runsc delete --force` does to a sandbox's own container
// (runsc/container Destroy), done here: under runsc's lock for the
// container, the sandbox and gofer processes SIGKILLed and waited for, its
// host cgroups and its state files removed. No runsc process, and no
// 100 ms polls for the sandbox's exit. Files runsc is writing right now
// (unreadable) are left to runsc delete. True when it accounted for the
// whole runtime: its record read, its processes gone, every cgroup removed
// (so no process of it can be left in them).
bool destroy_container(Context& ctx, Runsc& runsc, const SandboxRecord& r) {
    std::optional<ContainerFiles> c;
    try {
        c = runsc.container_files(r.id);
    } catch (const Error& e) {
        log().debug("sandbox " + r.id + ": " + e.what() + "; asking runsc delete");
        delete_with_runsc(runsc, r);
        return false;
    }
    if (!c) return false;  // runsc has no such container (any more)
    FileLock runtime_lock(c->lock_file);
    std::error_code ec;
    if (!fs::exists(c->state_file, ec)) return false;  // deleted while we waited for the lock
    std::string bundle = (ctx.store.sandbox_dir(r.id) / "bundle").string();
    for (pid_t pid : {c->state.pid, c->gofer_pid})
        if (pid > 0 && !ctx.host.kill_and_wait(pid, bundle, runtime_exit_patience))
            throw Error(ErrorCode::runtime, "process " + std::to_string(pid) + " of sandbox " +
                                                r.id + " is still there after SIGKILL");
    bool emptied = ctx.host.remove_cgroups(r.id, std::chrono::seconds(2));
    fs::remove(c->state_file, ec);
    fs::remove(c->lock_file, ec);
    return emptied && c->state.pid > 0;
}

// Deletes runsc's container (if any), then the mount. Tolerates partial state.
// What a launch that failed half-way may have left (processes runsc does not
// know, cgroups, a lock) is looked for unless the runtime was accounted for:
// destroyed whole now, or by the terminate that recorded `stopped`.
void stop_runtime(Context& ctx, const SandboxRecord& r) {
    bool accounted = r.state == SandboxState::stopped;
    if (!r.runsc.empty()) {
        Runsc runsc = runsc_for(ctx, r);
        if (destroy_container(ctx, runsc, r)) accounted = true;
    }
    if (!accounted) {
        kill_leftover_processes(ctx, ctx.store.sandbox_dir(r.id) / "bundle");
        remove_runtime_leftovers(ctx, r.id);
    }
    fs::path rootfs = ctx.store.sandbox_dir(r.id) / "rootfs";
    if (ctx.host.is_mounted(rootfs)) ctx.host.unmount(rootfs);
    // Its rules, namespace and veth, once nothing runs in it (cheap without).
    teardown_network(ctx, r.id);
}

SandboxState live_state(const SandboxRecord& r,
                        const std::map<std::string, ContainerState>& runtime,
                        const StateStore& store) {
    if (r.state == SandboxState::creating) {
        // The creator holds the lock for the whole create; a free lock means it died.
        auto lock = FileLock::try_lock(store.sandbox_dir(r.id) / "lock");
        return lock.locked() ? SandboxState::failed : SandboxState::creating;
    }
    if (r.state != SandboxState::running) return r.state;
    auto it = runtime.find(r.id);
    if (it != runtime.end() && it->second.status == "running") return SandboxState::running;
    return SandboxState::failed;
}

}  // namespace

namespace {

// A create whose process died (its lock is free, the record still says
// creating) is settled by whoever sees it first: what it started (runtime,
// writer, mount) is stopped and the record says failed and why, so nothing
// runs on behind a `failed` until prune. Its files stay for rm/prune.
void settle_abandoned_create(Context& ctx, SandboxRecord& r) {
    auto lock = FileLock::try_lock(ctx.store.sandbox_dir(r.id) / "lock");
    if (!lock.locked()) return;
    auto fresh = ctx.store.try_load(r.id);
    if (!fresh || fresh->state != SandboxState::creating) return;
    try {
        stop_runtime(ctx, *fresh);
        if (fresh->spec.runtime.audit && fs::exists(audit_dir(ctx.store, r.id)))
            audit::finish(audit_dir(ctx.store, r.id), std::nullopt);
    } catch (const std::exception& e) {
        log().warn("stopping what an interrupted create of " + r.id + " left: " + e.what());
    }
    fresh->state = SandboxState::failed;
    fresh->error = "its create was interrupted (the creating process died)";
    ctx.store.save(*fresh);
    r = *fresh;
}

// An audited sandbox whose writer is gone runs nothing more (it fails
// closed: require_audit_writer), and nothing unrecorded goes on in it
// either: whoever sees it first (ls, inspect) stops its runtime and records
// it failed and why, unless its lock's holder (a terminate under way) is at
// work on it. What the writer recorded stays for export.
void settle_dead_writer(Context& ctx, SandboxRecord& r, const std::string& why) {
    r.error = "its audit writer is gone (" + why +
              "), so it was stopped: export what it recorded, then rm it";
    auto lock = FileLock::try_lock(ctx.store.sandbox_dir(r.id) / "lock");
    if (!lock.locked()) return;
    auto fresh = ctx.store.try_load(r.id);
    if (!fresh || fresh->state != SandboxState::running) return;
    try {
        stop_runtime(ctx, *fresh);
    } catch (const std::exception& e) {
        log().warn("stopping sandbox " + r.id + " after its audit writer died: " + e.what());
    }
    fresh->state = SandboxState::failed;
    fresh->error = r.error;
    ctx.store.save(*fresh);
    r = *fresh;
}

}  // namespace

SandboxView sandbox_view(Context& ctx, SandboxRecord r, SandboxState live,
                         std::optional<LimitUsage> limits) {
    if (r.state == SandboxState::creating && live == SandboxState::failed)
        settle_abandoned_create(ctx, r);
    if (live == SandboxState::running && r.spec.runtime.audit) {
        if (std::string why = audit::writer_gone(audit_dir(ctx.store, r.id)); !why.empty()) {
            live = SandboxState::failed;
            settle_dead_writer(ctx, r, why);
        }
    }
    SandboxView v{std::move(r), live, std::nullopt, std::move(limits), std::nullopt};
    if (!v.limits && v.live != SandboxState::running && v.record.limits_at_stop) {
        try {
            v.limits = limit_usage_from_json(*v.record.limits_at_stop);
        } catch (const std::exception&) {
            // A record edited by hand: shown without its counts.
        }
    }
    if (v.live != SandboxState::running) return v;
    v.left = time_left(ctx.store, v.record, std::chrono::system_clock::now());
    if (v.left) {
        try {
            ensure_lifetime_watcher(ctx, v.record);
        } catch (const Error& e) {
            log().warn(e.what());
        }
    }
    return v;
}

fs::path find_guest_init() {
    std::error_code ec;
    fs::path beside = self_exe().parent_path() / "sandweave-init";
    if (fs::is_regular_file(beside, ec)) return beside;
    fs::path installed = fs::path(SANDWEAVE_INSTALLED_LIBEXEC) / "sandweave-init";
    if (fs::is_regular_file(installed, ec)) return installed;
    throw Error(ErrorCode::runtime, "guest init sandweave-init not found beside " +
                                        self_exe().string() +
                                        " or in " SANDWEAVE_INSTALLED_LIBEXEC);
}

namespace {

// What a create settles before it reserves anything: the settings (from a
// snapshot or a template), and the runtime and guest init they run on.
struct CreatePlan {
    std::optional<SnapshotRecord> snap;
    SandboxSpec spec;
    bool memory_restore = false;  // a memory snapshot: restored, not booted
    fs::path runsc;
    std::string runtime_version;
    fs::path init;
};

SandboxSpec spec_from_template(Context& ctx, const CreateRequest& req) {
    auto resolver = TemplateResolver::with_default_paths(ctx.store.root());
    ResolvedTemplate t = resolver.resolve(req.template_ref, req.template_source);
    if (!req.template_source.empty() && t.name == "inline") {
        t.name = req.template_source;
        for (auto& [ptr, from] : t.origin)
            if (from == "inline") from = req.template_source;
        if (!t.chain.empty()) t.chain.front() = req.template_source;
    }
    ImageStore(ctx.store.images_dir(), ctx.runner).apply_defaults(t);
    return resolve_spec(t, nullptr, "", req.flags);
}

CreatePlan plan_create(Context& ctx, const CreateRequest& req) {
    CreatePlan p;
    if (!req.from_snapshot.empty()) {
        if (req.template_given)
            throw Error(ErrorCode::usage,
                        "a template and a snapshot cannot be combined: a snapshot carries its "
                        "settings");
        p.snap = load_snapshot(ctx, req.from_snapshot);
        p.spec = spec_for_restore(*p.snap, req.flags);
    } else {
        p.spec = spec_from_template(ctx, req);
    }
    p.memory_restore = p.snap && p.snap->kind == SnapshotKind::memory;
    // A memory image only restores into the runtime that wrote it.
    p.runsc = p.memory_restore ? fs::path(p.snap->runsc) : find_runsc(ctx.runsc_flag);
    p.runtime_version = runtime_version(ctx, p.runsc);
    require_runtime_features(ctx, p.spec, p.runsc);
    p.init = find_guest_init();
    return p;
}

// The record of the sandbox `plan` describes, under the id reserved for it,
// in state creating.
SandboxRecord new_record(Context& ctx, const CreateRequest& req, const CreatePlan& plan,
                         const std::string& id) {
    SandboxRecord r;
    r.id = id;
    r.name = req.name;
    r.created_at = now_rfc3339();
    r.spec = plan.spec;
    r.runsc = plan.runsc.string();
    r.runtime_version = plan.runtime_version;
    // A memory image restores the init it saved: with a channel only if it had one.
    r.agent = plan.memory_restore ? plan.snap->agent : true;
    if (plan.snap) r.from_snapshot = plan.snap->id;
    if (!req.pool.empty()) {
        r.pool = req.pool;
        r.pool_state = req.pool_acquired ? "acquired" : "idle";
        if (req.pool_acquired) r.acquired_at = now_rfc3339();
    }
    r.runsc_flags = Runsc::flags_for(ctx.store.runsc_root(), plan.spec.runtime.platform,
                                     plan.spec.runtime.network, std::nullopt);
    return r;
}

void make_sandbox_dirs(const fs::path& dir) {
    for (const char* sub : {"rootfs", "upper", "work", "bundle", "logs", "tmp"})
        make_dirs(dir / sub, 0700);
    ::chmod((dir / "upper").c_str(), 0755);
}

// The supervisor starts up while the rest is prepared; it runs runsc at go(),
// and exits doing nothing if this create fails or dies first. It takes
// r.runsc_flags as they are now: with audit, only final once the writer runs.
Runsc::Launch prepare_launch(Context& ctx, const CreatePlan& plan, const SandboxRecord& r,
                             const fs::path& dir) {
    Runsc runsc(ctx.runner, plan.runsc, r.runsc_flags);
    fs::path agent_socket = r.agent ? agent_socket_path(ctx, r.id) : fs::path();
    // The shim watches the lifetime and runs the resolver: no process of their own.
    std::vector<std::string> companions;
    if (needs_shim_companions(plan.spec)) companions = {ctx.store.root().string(), r.id};
    if (plan.memory_restore)
        return runsc.prepare_restore_detached(r.id, dir / "bundle",
                                              snapshot_dir(ctx, plan.snap->id) / "checkpoint",
                                              dir / "logs/console.log", agent_socket, companions);
    return runsc.prepare_run_detached(r.id, dir / "bundle", dir / "logs/console.log", agent_socket,
                                      companions);
}

void save_creating_record(Context& ctx, const SandboxRecord& r) {
    // Not fsynced: after a host crash it is whole, empty or absent, and a
    // directory without a record (an empty one reads as none, state.cpp) is
    // an abandoned create that prune removes and doctor lists. An fsync here
    // was a journal commit on create's path.
    ctx.store.save(r, Durability::live);
    SANDWEAVE_FAULT_POINT("create.reserved");
}

// The image below, the sandbox's own layer above (a snapshot's, restored).
void mount_rootfs(Context& ctx, const CreatePlan& plan, const fs::path& dir) {
    fs::path lower = ImageStore(ctx.store.images_dir(), ctx.runner).ensure(plan.spec.image);
    if (plan.snap) {
        with_context("restoring the snapshot's layer", [&] {
            copy_tree(ctx, snapshot_dir(ctx, plan.snap->id) / "layer", dir / "upper");
        });
    }
    ctx.host.mount_overlay({lower, dir / "upper", dir / "work", dir / "rootfs", true});
    SANDWEAVE_FAULT_POINT("create.mounted");
}

// The writer listens before runsc exists: no guest event predates it, and a
// restored sandbox starts a new stream at seq 1. runsc's flags name it.
void start_audit_writer(Context& ctx, SandboxRecord& r) {
    fs::path pod_init = start_audit(ctx, r);
    r.runsc_flags = Runsc::flags_for(ctx.store.runsc_root(), r.spec.runtime.platform,
                                     r.spec.runtime.network, pod_init);
    // Not fsynced either (see save_creating_record): the writer it names is
    // a process, gone with the host.
    ctx.store.save(r, Durability::live);
    SANDWEAVE_FAULT_POINT("create.writer-started");
}

// Its namespace, veth and rules before runsc exists (lib/sandbox/network.hpp):
// the runtime starts in the namespace with the policy already in force.
void make_network(Context& ctx, SandboxRecord& r) {
    r.network = to_json(setup_network(ctx, r.id, *r.spec.runtime.egress,
                                      ctx.store.sandbox_dir(r.id), r.spec.runtime.audit));
    ctx.store.save(r, Durability::live);
    SANDWEAVE_FAULT_POINT("create.network");
}

void write_bundle_config(const CreatePlan& plan, const SandboxRecord& r, const fs::path& dir) {
    BundleInput in{
        plan.spec,
        dir / "rootfs",
        plan.init,
        "sandweave",
        guest_tmp_dir(dir / "rootfs"),
        r.network ? fs::path(netns_path(r.id)) : fs::path(),
        r.network && r.network->contains("resolver") ? dir / guest_resolv_conf : fs::path()};
    // Read once, by the runsc started next; a host crash ends what it describes.
    write_file_atomic(dir / "bundle/config.json", build_oci_config(in).dump(2), 0600,
                      Durability::live);
}

void save_running_record(Context& ctx, SandboxRecord& r) {
    r.state = SandboxState::running;
    start_lifetime_clock(ctx.store, r);
    // Not fsynced: after a host crash the "creating" record (with a free
    // lock) reads as failed, or its absence as an abandoned create, which
    // is then the truth.
    ctx.store.save(r, Durability::live);
}

// Everything a create does once its id is reserved, in order; what it has
// started when a step fails is undone by undo_create.
void build_sandbox(Context& ctx, const CreatePlan& plan, SandboxRecord& r) {
    const SandboxSpec& spec = plan.spec;
    fs::path dir = ctx.store.sandbox_dir(r.id);
    make_sandbox_dirs(dir);
    std::optional<Runsc::Launch> launch;
    if (!spec.runtime.audit) launch = prepare_launch(ctx, plan, r, dir);
    save_creating_record(ctx, r);
    mount_rootfs(ctx, plan, dir);
    // Before the writer, which holds the NFLOG group the policy logs to.
    if (spec.runtime.egress) make_network(ctx, r);
    if (spec.runtime.audit) {
        start_audit_writer(ctx, r);
        launch = prepare_launch(ctx, plan, r, dir);
    }
    write_bundle_config(plan, r, dir);
    launch->go();
    SANDWEAVE_FAULT_POINT("create.launched");
    save_running_record(ctx, r);
    // A memory restore brings its display back with its memory.
    if (spec.desktop && !plan.memory_restore) start_desktop(ctx, r);
    ensure_lifetime_watcher(ctx, r);
}

// Stops what a failed create started and removes the sandbox. A failure here
// is only logged: the create's own error is the one to report.
void undo_create(Context& ctx, const SandboxRecord& r, const SandboxSpec& spec) {
    try {
        stop_runtime(ctx, r);
        if (spec.runtime.audit && fs::exists(audit_dir(ctx.store, r.id)))
            audit::finish(audit_dir(ctx.store, r.id), std::nullopt);
        remove_audit_alias(r.id);
        // Renamed away first, like rm: a crash meanwhile leaves a
        // graveyard prune finishes, never a half-deleted sandbox.
        ctx.store.objects(sandbox_kind).remove(r.id, [&] { ctx.store.release_name(r.name, r.id); });
    } catch (const std::exception& e) {
        log().warn("cleaning up after a failed create of " + r.id + ": " + e.what());
    }
}

}  // namespace

SandboxRecord create_sandbox(Context& ctx, const CreateRequest& req) {
    // runsc's first cgroup write waits out an RCU grace period unless one has
    // just passed (lib/core/cgroup.hpp): let it pass now, beside the work
    // below, instead of on runsc's path. Joined when create returns or fails.
    std::jthread cgroup_warmup([&host = ctx.host] { host.rejoin_own_cgroup(); });
    CreatePlan plan = plan_create(ctx, req);
    // Its lock is held from the instant the directory exists (state.hpp).
    StateStore::Reservation reserved = ctx.store.reserve(req.name);
    if (req.on_reserved) req.on_reserved(reserved.id);
    SandboxRecord r = new_record(ctx, req, plan, reserved.id);
    try {
        with_context("creating sandbox " + r.id, [&] { build_sandbox(ctx, plan, r); });
        return r;
    } catch (...) {
        undo_create(ctx, r, plan.spec);
        throw;
    }
}

namespace {

// The sandbox's runtime is gone: say so in its terms.
[[noreturn]] void not_running(Runsc& runsc, const std::string& id) {
    auto st = runsc.state(id);
    throw Error(ErrorCode::general, "sandbox " + id + " is not running (failed: its runtime is " +
                                        (st ? st->status : std::string("gone")) + ")");
}

}  // namespace

fs::path agent_socket_path(Context& ctx, const std::string& id) {
    return ctx.store.sandbox_dir(id) / "agent.sock";
}

AgentClient connect_agent(Context& ctx, const SandboxRecord& r, const std::string& what) {
    if (r.state != SandboxState::running)
        throw Error(ErrorCode::general,
                    "sandbox " + r.id + " is not running (" + to_string(r.state) + ")");
    if (!r.agent)
        throw Error(ErrorCode::usage, "cannot " + what + ": sandbox " + r.id +
                                          " has no guest agent (created by an older sandweave)");
    if (auto c = AgentClient::try_connect(agent_socket_path(ctx, r.id), r.id)) return std::move(*c);
    Runsc runsc = runsc_for(ctx, r);
    auto st = runsc.state(r.id);
    if (!st || st->status != "running") not_running(runsc, r.id);
    throw Error(ErrorCode::general, "cannot " + what + ": the guest agent of sandbox " + r.id +
                                        " is unreachable (its supervisor is gone)");
}

RunOutcome run_in_sandbox(Context& ctx, const RunRequest& req, const AttachOptions& io) {
    std::string id = ctx.store.resolve_id(req.id);
    CommandActivity busy(ctx.store.sandbox_dir(id));  // before the state check (activity.hpp)
    SandboxRecord r = ctx.store.load(id);
    if (r.state != SandboxState::running)
        throw Error(ErrorCode::general,
                    "sandbox " + id + " is not running (" + to_string(r.state) + ")");
    if (req.attach) {
        RunOutcome out =
            connect_agent(ctx, r, "attach to a command").logs(*req.attach, req.follow, io);
        if (out.status == -1) {
            out.status = 0;
            out.running = true;
        }
        return out;
    }
    try {
        require_audit_writer(ctx, r, "run a command");
    } catch (const Error&) {
        // A sandbox whose runtime is gone too (a host restart) says that.
        Runsc gone = runsc_for(ctx, r);
        if (auto st = gone.state(id); !st || st->status != "running") not_running(gone, id);
        throw;
    }
    ExecRequest ex;
    ex.argv = command_line(r.spec, req.argv, req.entrypoint, "sandbox " + id);
    SANDWEAVE_FAULT_POINT("run.started");
    ex.user = req.user.value_or(r.spec.user);
    ex.cwd = req.cwd.value_or(r.spec.cwd);
    SandboxSpec env_spec = r.spec;
    env_spec.user = ex.user;
    ex.env = guest_env(env_spec, req.env);
    AttachOptions attach = io;
    attach.timeout = req.timeout;
    Runsc runsc = runsc_for(ctx, r);

    if (r.agent) {
        if (auto agent = AgentClient::try_connect(agent_socket_path(ctx, id), id)) {
            agent::ExecSpec spec;
            spec.uid = ex.user.uid;
            spec.gid = ex.user.gid;
            spec.cwd = ex.cwd;
            spec.argv = ex.argv;
            spec.env = ex.env;
            if (req.tty) spec.flags |= SW_EXEC_PTY;
            if (req.detach) {
                if (req.timeout) spec.timeout_ms = static_cast<std::uint32_t>(req.timeout->count());
                auto started = agent->start_detached(spec);
                RunOutcome out;
                out.status = 0;
                out.handle = started.handle;
                out.pid = started.pid;
                return out;
            }
            return agent->run(spec, attach);
        }
        // No supervisor: the sandbox died with it, or the supervisor alone did.
        auto st = runsc.state(id);
        if (!st || st->status != "running") not_running(runsc, id);
        log().warn("the guest agent of sandbox " + id +
                   " is unreachable (its supervisor is gone); running through runsc exec");
    } else {
        log().warn("sandbox " + id +
                   " has no guest agent (created by an older sandweave); running through runsc "
                   "exec");
    }
    if (req.tty || req.detach)
        throw Error(ErrorCode::usage, std::string(req.tty ? "a terminal (-t)" : "--detach") +
                                          " needs the guest agent, which sandbox " + id +
                                          " does not have");
    auto res = runsc.exec_attached(id, ex, ctx.store.sandbox_dir(id) / "tmp", attach);
    RunOutcome out;
    out.status = res.status;
    out.cancelled = res.cancelled;
    if (res.timed_out) {
        out.timed_out = true;
        out.status = 124;
        out.message = "command timed out after " + std::to_string(req.timeout->count()) +
                      " ms and was killed";
        return out;
    }
    if (res.runtime_error && res.status == 125) {
        // runsc could not exec at all: say why in the sandbox's terms when its
        // runtime is gone (checked only now, off the fast path).
        auto st = runsc.state(id);
        if (!st || st->status != "running") not_running(runsc, id);
    }
    if (res.runtime_error) {
        if (res.status == 127)
            out.message = "command not found in sandbox " + id + ": " + req.argv[0];
        else if (res.status == 126)
            out.message = "command not executable in sandbox " + id + ": " + req.argv[0];
        else
            out.message = "runsc exec failed: " + *res.runtime_error;
    }
    return out;
}

namespace {

// terminate's work, under the sandbox's lock: the final barrier, then the stop.
// `durability`: of the stopped record (live for one about to be removed);
// `ended_by`, when set, is saved with the stopped state, so no reader sees
// one without the other.
void terminate_locked(Context& ctx, SandboxRecord& r, Durability durability,
                      const std::optional<std::string>& ended_by = std::nullopt) {
    const std::string& id = r.id;
    with_context("terminating sandbox " + id, [&] {
        if (r.spec.runtime.audit) {
            // The final barrier comes before the stop, so an export after
            // terminate covers everything the guest did.
            auto status = finish_audit(ctx, r, runtime_running(ctx, r));
            if (!status.complete)
                log().warn("audit log of " + id +
                           " is incomplete at terminate: " + nlohmann::json(status.reasons).dump());
            SANDWEAVE_FAULT_POINT("terminate.barrier-done");
        }
        // The runtime's counts go with it: keep them for inspect and ls.
        if (auto u = live_limit_usage(ctx, r)) r.limits_at_stop = to_json(*u);
        stop_runtime(ctx, r);
        SANDWEAVE_FAULT_POINT("terminate.stopped");
    });
    r.state = SandboxState::stopped;
    r.stopped_at = now_rfc3339();
    if (ended_by) r.ended_by = ended_by;
    ctx.store.save(r, durability);
}

// rm's work, under the sandbox's lock.
void remove_locked(Context& ctx, const SandboxRecord& r) {
    const std::string& id = r.id;
    with_context("removing sandbox " + id, [&] {
        stop_runtime(ctx, r);
        SANDWEAVE_FAULT_POINT("rm.stopped");
        // Stop the writer (a no-op after terminate) before its directory goes.
        if (r.spec.runtime.audit && fs::exists(audit_dir(ctx.store, id)))
            audit::finish(audit_dir(ctx.store, id), std::nullopt);
        remove_audit_alias(id);
        // The store's removal rule: once renamed, the sandbox no longer exists
        // for other sandweave processes, even if removing the files is interrupted.
        ctx.store.objects(sandbox_kind).remove(id, [&] {
            SANDWEAVE_FAULT_POINT("rm.renamed");
            ctx.store.release_name(r.name, id);
        });
    });
}

}  // namespace

SandboxRecord terminate_sandbox(Context& ctx, const std::string& ref,
                                const std::optional<std::string>& ended_by) {
    std::string id = ctx.store.resolve_id(ref);
    auto lock = ctx.store.lock(id);
    SandboxRecord r = ctx.store.load(id);
    if (r.state != SandboxState::stopped) terminate_locked(ctx, r, Durability::durable, ended_by);
    return r;
}

void remove_sandbox(Context& ctx, const std::string& ref) {
    std::string id = ctx.store.resolve_id(ref);
    auto lock = ctx.store.lock(id);
    remove_locked(ctx, ctx.store.load(id));
}

std::optional<audit::Status> finish_sandbox(Context& ctx, const std::string& ref,
                                            const std::optional<fs::path>& audit_dest) {
    std::string id = ctx.store.resolve_id(ref);
    auto lock = ctx.store.lock(id);
    SandboxRecord r = ctx.store.load(id);
    if (audit_dest && !r.spec.runtime.audit)
        throw Error(ErrorCode::usage, "sandbox " + id +
                                          " was created without audit (create one with audit "
                                          "enabled)");
    // Not fsynced: after a host crash, a record that still says running reads
    // as failed, and the sandbox was on its way out anyway.
    if (r.state != SandboxState::stopped) terminate_locked(ctx, r, Durability::live);
    SANDWEAVE_FAULT_POINT("finish.terminated");
    std::optional<audit::Status> exported;
    // The writer has stopped: the export is of the whole log, and a failed
    // one leaves the sandbox stopped with its log, to export again.
    if (audit_dest) exported = export_audit(ctx, id, *audit_dest);
    SANDWEAVE_FAULT_POINT("finish.exported");
    remove_locked(ctx, r);
    return exported;
}

std::vector<SandboxView> list_sandboxes(Context& ctx) {
    recover_interrupted_snapshots(ctx);  // so a source a killed snapshot stopped is running again
    auto records = ctx.store.list();
    // Each relay that says its agent is ready answers for its sandbox; runsc
    // is started (once, for all) only for the ones no relay vouches for.
    std::map<std::string, ContainerState> runtime;
    bool need_runtime = false;
    for (const auto& r : records) {
        if (r.state != SandboxState::running) continue;
        if (agent_ready(ctx, r))
            runtime[r.id] = ContainerState{"running", 0};
        else
            need_runtime = true;
    }
    if (need_runtime) {
        fs::path runsc_path = find_runsc(ctx.runsc_flag);
        for (auto& [id, st] :
             Runsc(ctx.runner, runsc_path, {"--root=" + ctx.store.runsc_root().string()}).list())
            runtime.emplace(id, st);
    }
    std::vector<SandboxView> out;
    for (auto& r : records) {
        try {
            SandboxState s = live_state(r, runtime, ctx.store);
            auto limits = s == SandboxState::running ? live_limit_usage(ctx, r) : std::nullopt;
            out.push_back(sandbox_view(ctx, std::move(r), s, std::move(limits)));
        } catch (const Error&) {
            // Removed by another sandweave process while we looked: not listed.
            std::error_code ec;
            if (fs::exists(ctx.store.sandbox_dir(r.id), ec)) throw;
        }
    }
    return out;
}

bool agent_ready(Context& ctx, const SandboxRecord& r) {
    if (!r.agent) return false;
    fs::path socket = agent_socket_path(ctx, r.id);
    if (auto flag = agent_ready_flag(socket)) return *flag;
    try {
        if (auto agent = AgentClient::try_connect(socket, r.id))
            return agent->status().value("agent", "") == "ready";
    } catch (const Error& e) {
        log().debug("sandbox " + r.id + ": its relay: " + e.what());
    }
    return false;
}

bool runtime_running(Context& ctx, const SandboxRecord& r) {
    if (agent_ready(ctx, r)) return true;
    auto st = Runsc(ctx.runner, r.runsc, r.runsc_flags).state(r.id);
    return st && st->status == "running";
}

SandboxView inspect_sandbox(Context& ctx, const std::string& ref) {
    std::string id = ctx.store.resolve_id(ref);
    SandboxRecord r = ctx.store.load(id);
    std::map<std::string, ContainerState> runtime;
    if (r.state == SandboxState::running && runtime_running(ctx, r))
        runtime[id] = ContainerState{"running", 0};
    SandboxState s = live_state(r, runtime, ctx.store);
    auto limits = s == SandboxState::running ? live_limit_usage(ctx, r) : std::nullopt;
    return sandbox_view(ctx, std::move(r), s, std::move(limits));
}

json to_json(const SandboxView& v) {
    json j = to_json(v.record);
    j.erase("limits_at_stop");  // shown as `limits` (sandbox_view)
    j["state"] = to_string(v.live);
    if (v.left) {
        json& t = j["time_left"] = json{{"busy", v.left->busy}};
        if (v.left->ttl) t["ttl_ms"] = std::max<std::int64_t>(0, v.left->ttl->count());
        if (v.left->idle) t["idle_ms"] = std::max<std::int64_t>(0, v.left->idle->count());
    }
    if (v.limits) j["limits"] = to_json(*v.limits);
    if (v.worker) j["worker"] = *v.worker;
    return j;
}

std::vector<std::string> sandboxes_using_image(Context& ctx, const std::string& name) {
    std::vector<std::string> ids;
    for (const auto& r : ctx.store.list())
        if (r.spec.image == name && r.state != SandboxState::stopped) ids.push_back(r.id);
    return ids;
}

int sweep_abandoned_creates(Context& ctx) {
    int swept = 0;
    for (auto& a : ctx.store.abandoned_reservations()) {
        fs::path dir = ctx.store.sandbox_dir(a.id);
        try {
            // Nothing of it should run before its first record, but a
            // process naming its directory (shim, writer, gofer) or a mount
            // would outlive the directory unnoticed: stop them first.
            std::optional<fs::path> runsc_path;
            try {
                runsc_path = find_runsc(ctx.runsc_flag);
            } catch (const Error&) {
                // No runtime here: none of it can be running either.
            }
            if (runsc_path) {
                Runsc runsc(ctx.runner, *runsc_path, {"--root=" + ctx.store.runsc_root().string()});
                if (runsc.state(a.id)) runsc.remove(a.id, true);
            }
            kill_leftover_processes(ctx, dir.string() + "/");
            remove_runtime_leftovers(ctx, a.id);
            teardown_network(ctx, a.id);
            if (ctx.host.is_mounted(dir / "rootfs")) ctx.host.unmount(dir / "rootfs");
            ctx.store.objects(sandbox_kind).remove(a.id);
            ++swept;
        } catch (const Error& e) {
            log().warn("removing the abandoned sandbox directory " + dir.string() + ": " +
                       e.what());
        }
    }
    return swept;
}

namespace {

// Ids of this store's runtime root that have runsc's files (a lock, and a
// state if runsc got that far before it was killed: a refill killed in its
// create, a create whose cleanup died too) and no sandbox directory any
// more: no create of this store can still be making them (a create holds its
// directory from before runsc starts, rm removes these before the
// directory), so what they left goes at once.
// Whether runsc's files of `id`, a sandbox this store no longer has, belong
// to something alive: a state being written (unreadable), or a sandbox
// process that is alive and not one of this store's (a container someone
// runs with this root). A process of ours (it names the sandbox's bundle) is
// an orphan the sweep kills.
bool runtime_owned_elsewhere(Context& ctx, const std::string& id) {
    std::optional<ContainerFiles> c;
    try {
        c = read_container_files(ctx.store.runsc_root(), id);
    } catch (const Error&) {
        return true;
    }
    if (!c || !c->sandbox_alive) return false;
    auto ours = ctx.host.processes_matching((ctx.store.sandbox_dir(id) / "bundle").string());
    return std::find(ours.begin(), ours.end(), c->state.pid) == ours.end();
}

std::vector<std::string> orphan_runtime_ids(Context& ctx) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(ctx.store.runsc_root(), ec)) {
        std::string n = e.path().filename().string();
        auto at = n.find(runsc_file_infix);
        auto ext = e.path().extension();
        if (at == std::string::npos || (ext != ".lock" && ext != ".state")) continue;
        std::string id = n.substr(0, at);
        if (!is_sandbox_id(id) || fs::exists(ctx.store.sandbox_dir(id), ec) ||
            std::find(out.begin(), out.end(), id) != out.end() || runtime_owned_elsewhere(ctx, id))
            continue;
        out.push_back(std::move(id));
    }
    return out;
}

// runsc's files of a container whose sandbox this store no longer has, its
// state included, each removed under runsc's own lock for it: a runsc that
// still holds the lock is alive and owns them (left for the next prune).
void remove_orphan_runtime_files(Context& ctx, const std::string& id) {
    std::error_code ec;
    const std::string prefix = id + std::string(runsc_file_infix);
    std::vector<fs::path> locks;
    for (const auto& e : fs::directory_iterator(ctx.store.runsc_root(), ec)) {
        std::string n = e.path().filename().string();
        if (n.rfind(prefix, 0) != 0) continue;
        fs::path lock = e.path();
        lock.replace_extension(".lock");
        if (std::find(locks.begin(), locks.end(), lock) == locks.end()) locks.push_back(lock);
    }
    for (const auto& lock : locks) {
        FileLock held = FileLock::try_lock(lock);
        if (!held.locked()) {
            log().warn("sandbox " + id + ": a runsc still holds " + lock.string());
            continue;
        }
        fs::path state = lock;
        state.replace_extension(".state");
        fs::remove(state, ec);
        fs::remove(lock, ec);
    }
}

}  // namespace

std::vector<std::string> runtime_leftovers(Context& ctx) {
    std::vector<std::string> out = orphan_runtime_ids(ctx);
    for (auto& id : ctx.host.stale_cgroups(sandbox_kind.id_prefix, stale_cgroup_age)) {
        // Another program's cgroup that merely begins like an id is not
        // ours; a sandbox of this store (running, or failed and listed as
        // such) is left to rm and prune, which remove its leftovers with it.
        std::error_code ec;
        if (!is_sandbox_id(id) || std::find(out.begin(), out.end(), id) != out.end() ||
            fs::exists(ctx.store.sandbox_dir(id), ec))
            continue;
        out.push_back(std::move(id));
    }
    return out;
}

int sweep_runtime_leftovers(Context& ctx) {
    int n = 0;
    for (const auto& id : runtime_leftovers(ctx)) {
        // Nothing of it may run: a process naming its bundle is a runsc
        // killed in its create or one of its children.
        kill_leftover_processes(ctx, ctx.store.sandbox_dir(id) / "bundle");
        remove_runtime_leftovers(ctx, id);
        remove_orphan_runtime_files(ctx, id);
        ++n;
    }
    return n;
}

std::vector<std::string> prune_sandboxes(Context& ctx) {
    if (int n = sweep_abandoned_creates(ctx))
        log().info("removed " + std::to_string(n) +
                   " sandbox director(ies) of interrupted creates that had no record yet");
    // What an interrupted rm left behind (its record already gone) goes too.
    int swept = ctx.store.objects(sandbox_kind).sweep_graveyards([&](const fs::path& grave) {
        return ctx.host.is_mounted(grave / "rootfs");
    });
    if (swept)
        log().info("removed " + std::to_string(swept) + " half-removed sandbox director(ies)");
    if (int names = ctx.store.sweep_stale_names())
        log().info("freed " + std::to_string(names) + " name(s) of removed sandboxes");
    if (int n = sweep_runtime_leftovers(ctx))
        log().info("removed the host cgroups and runtime files of " + std::to_string(n) +
                   " sandbox(es) whose runtime was killed");
    if (int n = sweep_audit_aliases())
        log().info("removed " + std::to_string(n) + " audit socket alias(es) of removed sandboxes");
    if (int n = sweep_network_leftovers(ctx))
        log().info("removed the network namespaces, veths and rules of " + std::to_string(n) +
                   " sandbox(es) that no longer exist");
    std::vector<std::string> removed;
    for (const auto& v : list_sandboxes(ctx)) {
        if (v.live != SandboxState::stopped && v.live != SandboxState::failed) continue;
        try {
            remove_sandbox(ctx, v.record.id);
            removed.push_back(v.record.id);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::not_found) throw;
        }
    }
    return removed;
}

}  // namespace sandweave
