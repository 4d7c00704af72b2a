// LocalApi: each method validates its params into the library's request and
// calls one lib/sandbox operation. Nothing here prints or knows about argv.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "lib/api/local.hpp"
#include "lib/api/methods.hpp"
#include "lib/core/build_info.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/log.hpp"
#include "lib/core/units.hpp"
#include "lib/options/create_options.hpp"
#include "lib/options/network.hpp"
#include "lib/options/template.hpp"
#include "lib/runtime/runsc.hpp"
#include "lib/sandbox/activity.hpp"
#include "lib/sandbox/audit_glue.hpp"
#include "lib/sandbox/doctor.hpp"
#include "lib/sandbox/features.hpp"
#include "lib/sandbox/filter.hpp"
#include "lib/sandbox/image.hpp"
#include "lib/sandbox/pool.hpp"
#include "lib/sandbox/snapshot.hpp"

namespace sandweave::api {

UserSpec parse_user_param(const std::string& text) {
    auto u = parse_user(text);
    if (!u)
        throw Error(ErrorCode::usage,
                    "user '" + text + "': expected UID[:GID] with numeric ids (e.g. 1001:1001)");
    return *u;
}

namespace {

// A call that acts on a sandbox counts as its activity for the idle timeout
// (lib/sandbox/activity.hpp); reading its state (ls, inspect, audit status)
// does not, so a dashboard does not keep everything alive. run marks its own.
void mark_activity(Context& ctx, const std::string& ref) {
    try {
        touch_activity(ctx.store.sandbox_dir(ctx.store.resolve_id(ref)));
    } catch (const Error&) {
        // The call itself reports an unknown sandbox.
    }
}

Image image_of(const ImageInfo& i) {
    Image out{i.name, i.rootfs.string(), i.bytes, i.built_at, i.source, {}, {}, {}, {}, {}};
    if (i.config) {
        out.created = i.created;
        out.digest = i.digest;
        out.layers = i.layers;
        out.platform = i.platform;
        const ImageConfig& c = *i.config;
        out.config = ImageConfigInfo{c.env, c.working_dir, c.user, c.uid_gid, c.entrypoint, c.cmd};
    }
    return out;
}

}  // namespace

CreateRequest to_create_request(const CreateParams& p) {
    CreateRequest req;
    if (p.template_ref) {
        if (p.template_ref->empty()) throw Error(ErrorCode::usage, "template: empty");
        req.template_ref = *p.template_ref;
        req.template_given = true;
    }
    if (p.from_snapshot) req.from_snapshot = *p.from_snapshot;
    if (p.template_source) {
        if (!p.template_ref || !is_inline_template(*p.template_ref))
            throw Error(ErrorCode::usage, "template_source: only for an inline template");
        if (p.template_source->size() > 4096 ||
            p.template_source->find_first_of("\n\r") != std::string::npos)
            throw Error(ErrorCode::usage, "template_source: one line of at most 4096 bytes");
        req.template_source = *p.template_source;
    }
    // The options' one codec (lib/options/create_options.hpp), on the params' own JSON.
    req.flags = create_options_from_json(to_json(p));
    if (p.name) req.name = *p.name;
    if (p.pool) {
        if (!valid_object_name(*p.pool))
            throw Error(ErrorCode::usage, "pool '" + *p.pool + "': not a valid pool name");
        if (p.name) throw Error(ErrorCode::usage, "pool members cannot be given a name");
        req.pool = *p.pool;
    }
    if (!req.flags.publish.empty() && p.pool)
        throw Error(ErrorCode::usage,
                    "pool members cannot publish ports (a host port is one sandbox's)");
    return req;
}

RunRequest to_run_request(const RunParams& p) {
    RunRequest req;
    req.id = p.id;
    req.tty = p.tty;
    req.detach = p.detach;
    req.follow = p.follow;
    if (p.attach) {
        if (!p.argv.empty() || p.entrypoint || p.detach || p.tty)
            throw Error(ErrorCode::usage, "attach: takes no argv, entrypoint, detach or tty");
        if (*p.attach <= 0 || *p.attach > UINT32_MAX)
            throw Error(ErrorCode::usage, "attach: not a process handle");
        req.attach = static_cast<std::uint32_t>(*p.attach);
        return req;
    }
    if (p.follow) throw Error(ErrorCode::usage, "follow: only with attach");
    if ((p.rows || p.cols) && !p.tty) throw Error(ErrorCode::usage, "rows, cols: only with tty");
    if (p.rows) (void)window_dimension(*p.rows, "rows");
    if (p.cols) (void)window_dimension(*p.cols, "cols");
    if (p.detach && p.stdin)
        throw Error(ErrorCode::usage, "detach: a detached command has no stdin");
    req.argv = p.argv;  // composed with the sandbox's entrypoint and cmd by run_in_sandbox
    req.entrypoint = p.entrypoint;
    if (p.user) req.user = parse_user_param(*p.user);
    if (p.cwd) {
        if (p.cwd->empty() || (*p.cwd)[0] != '/')
            throw Error(ErrorCode::usage, "cwd '" + *p.cwd + "': must be an absolute path");
        req.cwd = *p.cwd;
    }
    for (const auto& e : p.env) {
        auto eq = e.find('=');
        if (eq == std::string::npos || eq == 0)
            throw Error(ErrorCode::usage, "env '" + e + "': expected KEY=VALUE");
    }
    req.env = p.env;
    if (p.timeout_ms) {
        if (*p.timeout_ms <= 0)
            throw Error(ErrorCode::usage,
                        "timeout_ms " + std::to_string(*p.timeout_ms) + ": must be positive");
        req.timeout = std::chrono::milliseconds(*p.timeout_ms);
    }
    return req;
}

VersionResult LocalApi::version() {
    VersionResult v;
    v.version = build_version();
    v.revision = build_revision();
    try {
        auto path = find_runsc(ctx_.runsc_flag);
        v.runtime = RuntimeInfo{path.string(), runtime_version(ctx_, path), {}, {}};
        RuntimeBuild b = runtime_build(ctx_, path);
        if (b.known)
            v.runtime->patches = b.patches;
        else
            v.runtime->patches_detail = b.detail;
    } catch (const Error& e) {
        log().debug("version: no runtime: " + std::string(e.what()));
    }
    return v;
}

TemplateResolver LocalApi::templates() const {
    auto r = TemplateResolver::with_default_paths(ctx_.store.root());
    if (caller_ == Caller::remote) r.refuse_caller_paths();
    return r;
}

void LocalApi::check_caller_template(const CreateParams& p) const {
    // Resolved now, before anything is made or stored (a pool keeps the
    // reference for its refills): the worker-side create resolves it again.
    if (caller_ == Caller::remote && p.template_ref && !p.template_ref->empty())
        (void)templates().resolve(*p.template_ref, p.template_source.value_or(""));
}

SandboxView LocalApi::create(const CreateParams& p) {
    if (p.reservation || p.slot) no_reservations();
    check_caller_template(p);
    SandboxRecord r = create_sandbox(ctx_, to_create_request(p));
    return sandbox_view(ctx_, r, r.state);
}

namespace {

RunResult to_result(const RunOutcome& o) {
    RunResult r;
    r.exit_code = o.status;
    r.timed_out = o.timed_out;
    r.message = o.message;
    return r;
}

}  // namespace

RunResult LocalApi::run(const RunParams& p, const RunIo& io) {
    RunRequest req = to_run_request(p);
    AttachOptions attach;
    attach.stdin_fd = io.stdin_fd;
    attach.out = io.out;
    attach.err = io.err;
    attach.forward_own_signals = io.forward_own_signals;
    attach.control = io.control;
    if (p.rows && p.cols) {
        attach.rows = window_dimension(*p.rows, "rows");
        attach.cols = window_dimension(*p.cols, "cols");
    }
    RunOutcome o = run_in_sandbox(ctx_, req, attach);
    RunResult r = to_result(o);
    if (o.handle) r.handle = *o.handle;
    if (o.pid) r.pid = *o.pid;
    r.running = o.running;
    return r;
}

namespace {

std::uint32_t handle_of(std::int64_t h) {
    if (h <= 0 || h > UINT32_MAX) throw Error(ErrorCode::usage, "handle: not a process handle");
    return static_cast<std::uint32_t>(h);
}

}  // namespace

ProcessList LocalApi::ps(const IdParams& p) {
    SandboxRecord r = ctx_.store.load(ctx_.store.resolve_id(p.id));
    nlohmann::json j = connect_agent(ctx_, r, "list its processes").list();
    ProcessList out;
    for (const auto& e : j.value("processes", nlohmann::json::array())) {
        ProcessInfo i;
        i.handle = e.value("handle", 0);
        i.pid = e.value("pid", 0);
        i.user = e.value("user", "");
        i.command = e.value("command", "");
        i.state = e.value("state", "");
        i.detached = e.value("detached", false);
        i.started_at = e.value("started_at", "");
        if (e.contains("exit_code") && e["exit_code"].is_number_integer())
            i.exit_code = e["exit_code"].get<std::int64_t>();
        out.processes.push_back(std::move(i));
    }
    return out;
}

KillResult LocalApi::kill(const KillParams& p) {
    int sig = parse_signal(p.signal);
    SandboxRecord r = ctx_.store.load(ctx_.store.resolve_id(p.id));
    return KillResult{connect_agent(ctx_, r, "signal a command").kill(handle_of(p.handle), sig)};
}

RunResult LocalApi::wait(const HandleParams& p) {
    SandboxRecord r = ctx_.store.load(ctx_.store.resolve_id(p.id));
    return to_result(connect_agent(ctx_, r, "wait for a command").wait(handle_of(p.handle)));
}

SandboxList LocalApi::ls(const LsParams& p) {
    SandboxFilter f = parse_filter(p.filter);
    SandboxList out;
    auto now = std::chrono::system_clock::now();
    for (auto& v : list_sandboxes(ctx_))
        if (f.matches(v, now)) out.sandboxes.push_back(std::move(v));
    return out;
}

SandboxView LocalApi::inspect(const IdParams& p) {
    return inspect_sandbox(ctx_, p.id);
}

SandboxView LocalApi::terminate(const IdParams& p) {
    SandboxRecord r = terminate_sandbox(ctx_, p.id);
    return sandbox_view(ctx_, r, r.state);
}

Removed LocalApi::rm(const IdParams& p) {
    std::string id = ctx_.store.resolve_id(p.id);
    remove_sandbox(ctx_, id);
    return Removed{id};
}

Finished LocalApi::finish(const FinishParams& p) {
    std::string id = ctx_.store.resolve_id(p.id);
    Finished out;
    out.audit = finish_sandbox(
        ctx_, id,
        p.audit_path ? std::optional<std::filesystem::path>(*p.audit_path) : std::nullopt);
    out.removed = id;
    return out;
}

RemovedList LocalApi::prune() {
    RemovedList out{prune_pools(ctx_)};  // their idle members go with them
    for (auto& id : prune_sandboxes(ctx_)) out.removed.push_back(std::move(id));
    return out;
}

audit::Status LocalApi::audit_export(const AuditExportParams& p) {
    if (p.path.empty()) throw Error(ErrorCode::usage, "path: empty");
    mark_activity(ctx_, p.id);
    return export_audit(ctx_, p.id, p.path);
}

audit::Status LocalApi::audit_fetch(const IdParams& p,
                                    const std::function<void(std::string_view)>& on_data) {
    std::string id = ctx_.store.resolve_id(p.id);
    mark_activity(ctx_, id);
    // Exported into the sandbox's private audit directory, streamed, removed.
    std::filesystem::path tmp = audit_dir(ctx_.store, id) / ("fetch-" + random_hex(12) + ".jsonl");
    struct Cleanup {
        std::filesystem::path a, b;
        ~Cleanup() {
            std::error_code ec;
            std::filesystem::remove(a, ec);
            std::filesystem::remove(b, ec);
        }
    } cleanup{tmp, tmp.string() + ".status.json"};
    audit::Status st = export_audit(ctx_, id, tmp);
    Fd fd(::open(tmp.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) throw_errno("open " + tmp.string());
    char buf[48 * 1024];  // base64 of it fits one 64 KiB protocol chunk
    std::uint64_t left = st.bytes;
    while (left > 0) {
        ssize_t n = ::read(fd.get(), buf, std::min<std::uint64_t>(sizeof buf, left));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw_errno("read " + tmp.string());
        if (n == 0)
            throw Error(ErrorCode::general,
                        "export " + tmp.string() + " is shorter than its status");
        on_data(std::string_view(buf, static_cast<std::size_t>(n)));
        left -= static_cast<std::uint64_t>(n);
    }
    st.path.clear();
    return st;
}

audit::Status LocalApi::audit_status(const IdParams& p) {
    return sandweave::audit_status(ctx_, p.id);
}

SnapshotRecord LocalApi::snapshot_create(const SnapshotCreateParams& p) {
    mark_activity(ctx_, p.sandbox);
    SnapshotRequest req;
    req.sandbox = p.sandbox;
    if (p.kind) req.kind = *p.kind;
    if (p.name) req.name = *p.name;
    return create_snapshot(ctx_, req);
}

SnapshotList LocalApi::snapshot_ls() {
    return SnapshotList{list_snapshots(ctx_)};
}

Removed LocalApi::snapshot_rm(const IdParams& p) {
    return Removed{remove_snapshot(ctx_, p.id)};
}

PoolInfo LocalApi::pool_create(const PoolCreateParams& p) {
    if (p.options.name) throw Error(ErrorCode::usage, "pool members cannot be given a name");
    check_caller_template(p.options);
    return create_pool(ctx_, p.name, p.size, to_create_request(p.options));
}

SandboxView LocalApi::pool_acquire(const PoolAcquireParams& p) {
    SandboxRecord r =
        p.id ? claim_pool_member(ctx_, p.name, *p.id) : acquire_from_pool(ctx_, p.name);
    return sandbox_view(ctx_, r, r.state);
}

PoolList LocalApi::pool_ls() {
    return PoolList{list_pools(ctx_)};
}

PoolInfo LocalApi::pool_resize(const PoolResizeParams& p) {
    return resize_pool(ctx_, p.name, p.size);
}

Removed LocalApi::pool_rm(const NameParams& p) {
    remove_pool(ctx_, p.name);
    return Removed{p.name};
}

bool LocalApi::offers(const std::string& method) const {
    const auto& only = controller_only_methods();
    return std::find(only.begin(), only.end(), method) == only.end();
}

TemplateList LocalApi::template_ls() {
    TemplateList out;
    for (const auto& t : TemplateResolver::with_default_paths(ctx_.store.root()).list())
        out.templates.push_back(TemplateEntry{t.name, t.file.string(), t.description, t.builtin});
    return out;
}

TemplateShowResult LocalApi::template_show(const TemplateShowParams& p) {
    auto t = templates().resolve(p.template_ref);
    ImageStore(ctx_.store.images_dir(), ctx_.runner).apply_defaults(t);
    return TemplateShowResult{t.name, t.chain, t.doc, t.origin};
}

TemplateValidateResult LocalApi::template_validate(const TemplateValidateParams& p) {
    if (caller_ == Caller::remote)
        throw Error(ErrorCode::usage,
                    "template.validate: a template file is not read for a remote client; "
                    "validate it where it is (the CLI does so for a remote connection)");
    auto t = TemplateResolver::with_default_paths(ctx_.store.root()).validate_file(p.file);
    return TemplateValidateResult{true, p.file, t.chain};
}

namespace {

void refuse_if_in_use(Context& ctx, const std::string& image, const char* what) {
    auto users = sandboxes_using_image(ctx, image);
    if (users.empty()) return;
    std::string list;
    for (std::size_t i = 0; i < users.size() && i < 3; ++i) list += (i ? ", " : "") + users[i];
    if (users.size() > 3) list += ", ...";
    throw Error(ErrorCode::usage, std::string("cannot ") + what + " image '" + image + "': " +
                                      std::to_string(users.size()) + " sandbox(es) run on it (" +
                                      list + "); terminate or remove them first");
}

}  // namespace

Image LocalApi::image_build(const ImageBuildParams& p) {
    if (p.force) refuse_if_in_use(ctx_, p.name, "rebuild");
    return image_of(ImageStore(ctx_.store.images_dir(), ctx_.runner).build(p.name, p.force));
}

ImageList LocalApi::image_ls() {
    ImageList out;
    for (const auto& i : ImageStore(ctx_.store.images_dir(), ctx_.runner).list())
        out.images.push_back(image_of(i));
    return out;
}

RecipeList LocalApi::image_recipes() {
    return {ImageStore::recipes()};
}

Removed LocalApi::image_rm(const NameParams& p) {
    refuse_if_in_use(ctx_, p.name, "remove");
    ImageStore(ctx_.store.images_dir(), ctx_.runner).remove(p.name);
    return Removed{p.name};
}

Image LocalApi::image_import(const ImageImportParams& p) {
    if (p.force) refuse_if_in_use(ctx_, p.name, "replace");
    return image_of(
        ImageStore(ctx_.store.images_dir(), ctx_.runner).import(p.name, p.source, p.force));
}

Image LocalApi::image_inspect(const NameParams& p) {
    auto info = ImageStore(ctx_.store.images_dir(), ctx_.runner).find(p.name);
    if (!info) throw Error(ErrorCode::not_found, "no such image: '" + p.name + "'");
    return image_of(*info);
}

DoctorResult LocalApi::doctor() {
    DoctorResult out;
    out.ok = true;
    for (const auto& c : run_doctor(ctx_)) {
        out.checks.push_back(Check{c.name, c.ok, c.required, c.detail});
        out.ok = out.ok && (c.ok || !c.required);
    }
    return out;
}

}  // namespace sandweave::api
