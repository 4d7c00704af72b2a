#include "lib/sandbox/pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "lib/core/after_answer.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fault.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/helper.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/core/progress.hpp"
#include "lib/core/units.hpp"
#include "lib/options/create_options.hpp"
#include "lib/runtime/runsc.hpp"
#include "lib/sandbox/agent_client.hpp"
#include "lib/sandbox/audit_glue.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// A pool's directory; an invalid name is a usage error (the store's pool kind).
fs::path pool_dir(Context& ctx, const std::string& name) {
    return ctx.store.objects(pool_kind).object_dir(name);
}

std::optional<json> read_pool(Context& ctx, const std::string& name) {
    fs::path file = pool_dir(ctx, name) / pool_kind.record;
    std::error_code ec;
    if (!fs::exists(file, ec)) return std::nullopt;
    return parse_untrusted_json(read_file(file, 1 << 20));
}

// By the store's lookup rule: for pools, the exact name.
json require_pool(Context& ctx, const std::string& name) {
    auto p = read_pool(ctx, ctx.store.objects(pool_kind).resolve(name));
    if (!p) throw Error(ErrorCode::not_found, "no such pool: " + name);  // removed meanwhile
    return *p;
}

std::vector<SandboxRecord> members(Context& ctx, const std::string& name) {
    std::vector<SandboxRecord> out;
    for (auto& r : ctx.store.list())
        if (r.pool == name) out.push_back(std::move(r));
    return out;
}

// Sandbox `id`'s record as it is now, when it is a member of pool `name`.
std::optional<SandboxRecord> member_record(Context& ctx, const std::string& id,
                                           const std::string& name) {
    try {
        auto r = ctx.store.try_load(id);
        if (r && r->pool == name) return r;
    } catch (const Error&) {
        // removed under us, or being written for the first time
    }
    return std::nullopt;
}

// Whether a member is idle and running (as its record says now; the caller
// checks again under its lock).
bool idle(const SandboxRecord& m) {
    return m.pool_state == "idle" && m.state == SandboxState::running;
}

// A member still "creating" whose creator no longer holds its lock was
// abandoned (a refill killed mid-create): it will never become warm.
bool abandoned(Context& ctx, const SandboxRecord& r) {
    if (r.state != SandboxState::creating) return false;
    try {
        return FileLock::try_lock(ctx.store.sandbox_dir(r.id) / "lock").locked();
    } catch (const Error&) {
        return true;
    }
}

// Reads away what an inotify descriptor (non-blocking) has queued.
void drain_events(int fd) {
    char buf[4096];
    while (::read(fd, buf, sizeof buf) > 0) {
    }
}

// Whether a member is one a live refill is still creating.
bool starting(Context& ctx, const SandboxRecord& m) {
    return m.pool_state == "idle" && m.state == SandboxState::creating && !abandoned(ctx, m);
}

// The pool's index of its members: pools/NAME/members/ID, an empty file
// made as each member's create reserves its id. An acquire looks there
// first, so it reads the pool's own records, not every sandbox's on the host
// (27 us a sandbox on a small VM: a few hundred sandboxes alive were
// milliseconds). Only a hint: the record decides, entries that can never be
// idle again are dropped where they are seen, the refill makes it whole
// after each wake, and when it names no member idle or on its way every
// sandbox is looked at as before.
fs::path member_index(Context& ctx, const std::string& name) {
    return pool_dir(ctx, name) / "members";
}

void index_member(const fs::path& index, const std::string& id) {
    std::error_code ec;
    fs::create_directory(index, ec);
    Fd f(::open((index / id).c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!f) log().debug("indexing pool member " + id + ": " + std::strerror(errno));
}

// A member request whose creates index themselves.
CreateRequest member_request(Context& ctx, const json& request, const std::string& name) {
    CreateRequest req = pool_request_from_json(request, name);
    req.on_reserved = [index = member_index(ctx, name)](const std::string& id) {
        index_member(index, id);
    };
    return req;
}

// The ids the index names, or none when the pool has no index (made by an
// older sandweave).
std::optional<std::vector<std::string>> indexed_members(Context& ctx, const std::string& name) {
    std::error_code ec;
    fs::directory_iterator it(member_index(ctx, name), ec);
    if (ec) return std::nullopt;
    std::vector<std::string> ids;
    for (const auto& e : it) {
        std::string id = e.path().filename().string();
        if (is_sandbox_id(id)) ids.push_back(id);
    }
    return ids;
}

// Whether a member's index entry can go: its sandbox is gone, or its record
// says it will never be idle and running again.
bool spent(Context& ctx, const std::string& id, const std::optional<SandboxRecord>& member) {
    if (!member) {
        std::error_code ec;
        return !fs::exists(ctx.store.sandbox_dir(id), ec) && !ec;
    }
    return member->pool_state != "idle" ||
           (member->state != SandboxState::running && member->state != SandboxState::creating);
}

// Makes the index name exactly the members `m` that are idle or on their way
// (the refill's look at every member, after each wake).
void reconcile_index(Context& ctx, const std::string& name, const std::vector<SandboxRecord>& m) {
    const fs::path dir = member_index(ctx, name);
    std::set<std::string> want, have;
    for (const auto& r : m)
        if (idle(r) || starting(ctx, r)) want.insert(r.id);
    for (auto& id : indexed_members(ctx, name).value_or(std::vector<std::string>{}))
        have.insert(std::move(id));
    for (const auto& id : want)
        if (!have.count(id)) index_member(dir, id);
    for (const auto& id : have)
        if (!want.count(id) && spent(ctx, id, member_record(ctx, id, name)))
            ::unlink((dir / id).c_str());
}

// How long an acquire waits for members on their way before it creates its
// own (a create that slow is stuck, or the host is overloaded).
constexpr auto starting_wait = std::chrono::seconds(20);

PoolInfo info_from(const std::string& name, const json& j, const std::vector<SandboxRecord>& m) {
    PoolInfo p;
    p.name = name;
    p.size = j.value("size", 0);
    p.request = j.value("request", json::object());
    p.created_at = j.value("created_at", std::string());
    if (j.contains("last_error")) p.last_error = j["last_error"].get<std::string>();
    for (const auto& r : m) {
        if (r.pool_state == "acquired")
            ++p.in_use;
        else if (r.state == SandboxState::running)
            ++p.warm;
        else if (r.state == SandboxState::creating)
            ++p.starting;
    }
    return p;
}

void write_pool(Context& ctx, const std::string& name, const json& j) {
    write_file_atomic(pool_dir(ctx, name) / "pool.json", j.dump(2) + "\n", 0600);
}

void set_last_error(Context& ctx, const std::string& name, const std::optional<std::string>& err) {
    FileLock lock(pool_dir(ctx, name) / "lock");
    auto j = read_pool(ctx, name);
    if (!j) return;
    if (err)
        (*j)["last_error"] = *err;
    else
        j->erase("last_error");
    write_pool(ctx, name, *j);
}

// A refill that has filled its pool stays, waiting for a change in the pool's
// directory; acquire and resize touch this file (a new time: an attribute
// change) to wake it. Starting a new process per acquire (two forks and an
// exec, ~5 ms of a loaded machine's scheduling) was most of an acquire.
constexpr const char* refill_wake_file = "refill.wake";

// What wakes a refill: the wake file's new time, pool.json replaced (resize,
// last_error), the directory's removal (pool rm). Not the closing of a file
// opened for writing: every flock of the pool's `lock` does that, and a
// refill woken at the release of an acquire's lock took the CPU from that
// acquire's answer (~0.4 ms of a 2-CPU host).
constexpr std::uint32_t refill_watch_events =
    IN_ATTRIB | IN_MOVED_TO | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF;

bool touch_wake_file(const fs::path& dir) {
    fs::path wake = dir / refill_wake_file;
    if (::utimensat(AT_FDCWD, wake.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) == 0) return true;
    if (errno != ENOENT) return false;
    Fd created(::open(wake.c_str(), O_RDONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    return created && ::futimens(created.get(), nullptr) == 0;
}

// Wakes the standing refill, or starts `sandweave __pool-refill` in the
// background when none runs. Ready as soon as it was exec'd: acquire must not
// wait for a process to start up; what the refill itself runs into is
// recorded in pool.json (last_error) for the next acquire. Done after the
// answer where one is pending: a woken refill scans the pool at once and
// took the CPU from the answer of the acquire that woke it.
void start_refill(Context& ctx, const std::string& name) {
    HelperSpec spec;
    spec.argv = {self_exe().string(), pool_refill_verb, "--state-dir", ctx.store.root().string(),
                 name};
    if (ctx.runsc_flag) {
        spec.argv.push_back("--runsc");
        spec.argv.push_back(*ctx.runsc_flag);
    }
    fs::path dir = pool_dir(ctx, name);
    spec.log = dir / "refill.log";
    spec.readiness = HelperSpec::Readiness::exec;
    spec.timeout = std::chrono::seconds(10);
    after_answer([dir, name, spec] {
        if (!FileLock::try_lock(dir / "refill.lock").locked()) {
            // It watches the directory before it counts members, so a change
            // saved before this touch is seen either way.
            if (touch_wake_file(dir)) return;
            log().debug("pool " + name + ": waking the refill: " + std::strerror(errno));
        }
        try {
            HelperReport report = launch_helper(spec);
            if (!report.ok())
                log().warn("pool " + name + ": the background refill did not start" +
                           (report.detail.empty() ? "" : ": " + report.detail));
        } catch (const Error& e) {
            // The caller's sandbox is already handed out; the pool refills on the next call.
            log().warn("pool " + name + ": starting the background refill: " + e.what());
        }
    });
}

// Where the caller's episode starts in the member's audit log: nothing of the
// caller's has run in it before the answer. The written position is the
// tighter cut (the durable prefix may lag what is already written). Asked
// under the pool's lock, so a writer that does not answer within a second
// holds up the pool's other acquirers no longer: its persisted position is
// then the cut (earlier, never later, than the episode's start).
constexpr auto audit_position_timeout = std::chrono::seconds(1);

// Asked before the member's agent check and read after it: a writer that
// publishes no position (an older sandweave's) is asked over its socket, and
// that round trip then overlaps the relay's.
std::optional<audit::PositionQuery> ask_audit_position(Context& ctx, const SandboxRecord& r) {
    if (!r.spec.runtime.audit) return std::nullopt;
    return audit::PositionQuery(audit_dir(ctx.store, r.id));
}

std::optional<std::uint64_t> audit_position(const SandboxRecord& r,
                                            std::optional<audit::PositionQuery> asked) {
    if (!asked) return std::nullopt;
    try {
        return asked->get(audit_position_timeout);
    } catch (const Error& e) {
        log().warn("audit position of " + r.id + ": " + e.what());
        return std::nullopt;
    }
}

// Under the member's lock: it is the caller's from now on, with its audit
// position, and its lifetime clock starts. One save, not a claim and then
// the position: each rename over the record costs a block free on the
// host's filesystem (a synchronous discard where it is mounted so).
void mark_acquired(Context& ctx, SandboxRecord& r, std::optional<audit::PositionQuery> asked) {
    r.pool_state = "acquired";
    r.acquired_at = now_rfc3339();
    r.acquired_audit_seq = audit_position(r, std::move(asked));
    start_lifetime_clock(ctx.store, r);
    // A host crash ends the member too, so the claim need not outlive one.
    ctx.store.save(r, Durability::live);
    // No longer the pool's to hand out; an entry left behind is dropped
    // where the next acquire sees it.
    after_answer([entry = member_index(ctx, r.pool) / r.id] { ::unlink(entry.c_str()); });
}

// After the claim: its lifetime watcher.
void hand_over(Context& ctx, const SandboxRecord& r) {
    try {
        ensure_lifetime_watcher(ctx, r);
    } catch (const Error& e) {
        log().warn(e.what());  // started again by the next ls or inspect
    }
}

}  // namespace

json pool_request_to_json(const CreateRequest& r) {
    json j = create_options_to_json(r.flags);
    j["template"] = r.template_ref;
    if (!r.from_snapshot.empty()) j["from_snapshot"] = r.from_snapshot;
    return j;
}

CreateRequest pool_request_from_json(const json& j, const std::string& pool) {
    CreateRequest r;
    r.template_ref = j.value("template", std::string("base"));
    r.template_given = j.contains("template") && !j.contains("from_snapshot");
    r.flags = create_options_from_json(j);
    r.from_snapshot = j.value("from_snapshot", std::string());
    r.pool = pool;
    return r;
}

json to_json(const PoolInfo& p) {
    json j{{"name", p.name},
           {"size", p.size},
           {"warm", p.warm},
           {"in_use", p.in_use},
           {"starting", p.starting},
           {"options", p.request},
           {"created_at", p.created_at}};
    if (p.last_error) j["last_error"] = *p.last_error;
    return j;
}

PoolInfo pool_info_from_json(const json& j) {
    PoolInfo p;
    p.name = j.at("name").get<std::string>();
    p.size = j.at("size").get<int>();
    p.warm = j.value("warm", 0);
    p.in_use = j.value("in_use", 0);
    p.starting = j.value("starting", 0);
    p.request = j.value("options", json::object());
    p.created_at = j.value("created_at", std::string());
    if (j.contains("last_error")) p.last_error = j.at("last_error").get<std::string>();
    return p;
}

PoolInfo create_pool(Context& ctx, const std::string& name, int size, const CreateRequest& req) {
    if (size < 0 || size > 1000)
        throw Error(ErrorCode::usage, "pool size " + std::to_string(size) + ": expected 0 to 1000");
    fs::path dir = pool_dir(ctx, name);
    json j{{"name", name},
           {"size", size},
           {"request", pool_request_to_json(req)},
           {"created_at", now_rfc3339()}};
    // Made whole beside, then renamed into place: the name is taken atomically
    // and a pool directory never lacks its record unless a pool rm was
    // killed half-way (which prune_pools then finishes).
    fs::path tmp = dir.parent_path() / (".new-" + name + "-" + random_hex(8));
    make_dirs(tmp, 0700);
    write_file_atomic(tmp / pool_kind.record, j.dump(2) + "\n", 0600);
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
        int err = errno;
        remove_tree(tmp);
        if (err == EEXIST || err == ENOTEMPTY)
            throw Error(ErrorCode::usage, "pool '" + name + "' already exists");
        throw_errno("create " + dir.string(), err);
    }
    fsync_dir(dir.parent_path());
    std::vector<std::string> made;
    try {
        SANDWEAVE_FAULT_POINT("pool.created");
        CreateRequest member = member_request(ctx, j["request"], name);
        member.template_given = req.template_given;
        Progress progress("creating pool " + name);
        if (size > 0) progress.step("starting sandboxes", static_cast<std::uint64_t>(size));
        for (int i = 0; i < size; ++i) {
            made.push_back(create_sandbox(ctx, member).id);
            progress.set(static_cast<std::uint64_t>(i + 1));
            SANDWEAVE_FAULT_POINT("pool.member-made");
            // Progress, not a log line: quiet when stderr is not a terminal.
            log().debug("pool " + name + ": " + std::to_string(i + 1) + "/" + std::to_string(size) +
                        " warm");
        }
    } catch (const Error& e) {
        // A pool whose sandboxes cannot start is reported, not left spinning.
        for (const auto& id : made) {
            try {
                remove_sandbox(ctx, id);
            } catch (const Error&) {
            }
        }
        try {
            ctx.store.objects(pool_kind).remove(name);
        } catch (const Error& cleanup) {
            log().warn("removing the failed pool " + name + ": " + cleanup.what());
        }
        throw e.wrap("creating pool " + name);
    }
    return info_from(name, j, members(ctx, name));
}

namespace {

// Takes the first idle, running member of pool `name` among `ids`, under the
// pool's lock, or none. Also names the members a live refill is still
// creating (`on_way`). With `index`, the ids are the index's: spent entries
// are dropped.
std::optional<SandboxRecord> take_from(Context& ctx, const std::string& name,
                                       const std::vector<std::string>& ids,
                                       std::vector<std::string>& on_way, bool index) {
    // First pass: a member whose agent is ready (the common case, its relay's
    // flag); then any other idle one, checked with runsc (one that is still
    // connecting, or lost its supervisor). Records are read one at a time up
    // to the first member taken.
    for (int pass = 0; pass < 2; ++pass)
        for (const auto& id : ids) {
            auto member = member_record(ctx, id, name);
            if (index && pass == 0 && spent(ctx, id, member)) {
                ::unlink((member_index(ctx, name) / id).c_str());
                continue;
            }
            if (!member) continue;
            if (!idle(*member)) {
                if (pass == 0 && starting(ctx, *member)) on_way.push_back(id);
                continue;
            }
            auto sandbox_lock = ctx.store.lock(id);
            auto fresh = ctx.store.try_load(id);
            if (!fresh || fresh->pool != name || !idle(*fresh)) continue;
            auto asked = ask_audit_position(ctx, *fresh);
            if (pass == 0 && !agent_ready(ctx, *fresh)) continue;
            // Never hand out a member whose runtime died while it waited
            // (a host restart, a killed sandbox): mark it for the refill.
            if (pass == 1 && !runtime_running(ctx, *fresh)) {
                fresh->state = SandboxState::failed;
                fresh->error = "its runtime died while it waited in the pool";
                ctx.store.save(*fresh);
                continue;
            }
            mark_acquired(ctx, *fresh, std::move(asked));
            return std::move(*fresh);
        }
    return std::nullopt;
}

// Takes the first idle, running member of pool `name`, or none; names the
// members a live refill is still creating (`on_way`). From the pool's index;
// every sandbox on the host is looked at only when the index has neither (a
// pool of an older sandweave, an index a crash left short: the refill makes
// it whole again).
std::optional<SandboxRecord> take_idle_member(Context& ctx, const std::string& name,
                                              std::vector<std::string>& on_way) {
    on_way.clear();
    FileLock lock(pool_dir(ctx, name) / "lock");
    if (auto ids = indexed_members(ctx, name)) {
        if (auto picked = take_from(ctx, name, *ids, on_way, true)) return picked;
        if (!on_way.empty()) return std::nullopt;
    }
    return take_from(ctx, name, ctx.store.objects(sandbox_kind).ids(), on_way, false);
}

// Waits until none of `ids` is a member on its way any more (ready, failed,
// removed or abandoned), or until `deadline`. Their directories are watched
// for renames (a record is saved by one; not closes, which the lock checks
// here cause themselves); a look every 50 ms catches a creator that died
// without a word.
void wait_for_starting(Context& ctx, const std::vector<std::string>& ids, const std::string& name,
                       std::chrono::steady_clock::time_point deadline) {
    Fd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!watch) throw_errno("inotify_init1");
    for (const auto& id : ids)
        ::inotify_add_watch(watch.get(), ctx.store.sandbox_dir(id).c_str(),
                            IN_MOVED_TO | IN_DELETE_SELF);
    auto on_way = [&] {
        return std::any_of(ids.begin(), ids.end(), [&](const auto& id) {
            auto member = member_record(ctx, id, name);
            return member && starting(ctx, *member);
        });
    };
    while (on_way()) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) return;
        pollfd p{watch.get(), POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 50))) < 0 &&
            errno != EINTR)
            throw_errno("poll");
        drain_events(watch.get());
    }
}

}  // namespace

SandboxRecord acquire_from_pool(Context& ctx, const std::string& name) {
    json j = require_pool(ctx, name);
    std::vector<std::string> on_way;
    auto picked = take_idle_member(ctx, name, on_way);
    // Nothing warm but members on their way: wait for one rather than start a
    // create of our own beside them. The refill's create has a head start, and
    // two creates on the same CPUs both finish later than one. When none of
    // those members is on its way any more and none is idle (others took
    // them, they failed), or after a long wait, the caller gets a new sandbox
    // of its own as before.
    auto give_up = std::chrono::steady_clock::now() + starting_wait;
    while (!picked && !on_way.empty() && std::chrono::steady_clock::now() < give_up) {
        wait_for_starting(ctx, on_way, name, give_up);
        picked = take_idle_member(ctx, name, on_way);
    }
    if (picked) {
        SANDWEAVE_FAULT_POINT("pool.acquired");
        hand_over(ctx, *picked);
        start_refill(ctx, name);
        return *picked;
    }
    // Nothing warm: the caller gets a new one now, the pool refills behind.
    CreateRequest req = pool_request_from_json(j["request"], name);
    req.pool_acquired = true;
    SandboxRecord r;
    try {
        r = create_sandbox(ctx, req);
    } catch (const Error& e) {
        set_last_error(ctx, name, std::string(e.what()));
        throw e.wrap("acquiring from pool " + name);
    }
    r.acquired_audit_seq = audit_position(r, ask_audit_position(ctx, r));
    if (r.acquired_audit_seq) {
        // Informative, and moot after a host crash as the claim is.
        auto sandbox_lock = ctx.store.lock(r.id);
        ctx.store.save(r, Durability::live);
    }
    start_refill(ctx, name);
    return r;
}

SandboxRecord claim_pool_member(Context& ctx, const std::string& name, const std::string& id) {
    if (!is_sandbox_id(id))
        throw Error(ErrorCode::usage, "pool.acquire: id '" + id + "' is not a sandbox id");
    SandboxRecord r;
    {
        auto sandbox_lock = ctx.store.lock(id);
        auto fresh = ctx.store.try_load(id);
        if (!fresh || fresh->pool != name)
            throw Error(ErrorCode::not_found, "no member " + id + " in pool " + name);
        if (fresh->pool_state != "idle" || fresh->state != SandboxState::running)
            throw Error(ErrorCode::general,
                        "member " + id + " of pool " + name + " is not idle and running (" +
                            (fresh->pool_state.empty() ? std::string("-") : fresh->pool_state) +
                            ")");
        auto asked = ask_audit_position(ctx, *fresh);
        if (!agent_ready(ctx, *fresh) && !runtime_running(ctx, *fresh)) {
            fresh->state = SandboxState::failed;
            fresh->error = "its runtime died while it waited in the pool";
            ctx.store.save(*fresh);
            throw Error(ErrorCode::general,
                        "member " + id + " of pool " + name + ": " + *fresh->error);
        }
        mark_acquired(ctx, *fresh, std::move(asked));
        r = std::move(*fresh);
    }
    hand_over(ctx, r);
    return r;
}

std::vector<PoolInfo> list_pools(Context& ctx) {
    std::vector<PoolInfo> out;
    auto all = ctx.store.list();
    for (const auto& n : ctx.store.objects(pool_kind).ids()) {
        auto j = read_pool(ctx, n);
        if (!j) continue;
        std::vector<SandboxRecord> m;
        for (const auto& r : all)
            if (r.pool == n) m.push_back(r);
        out.push_back(info_from(n, *j, m));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
    return out;
}

PoolInfo pool_info(Context& ctx, const std::string& name) {
    return info_from(name, require_pool(ctx, name), members(ctx, name));
}

PoolInfo resize_pool(Context& ctx, const std::string& name, int size) {
    if (size < 0 || size > 1000)
        throw Error(ErrorCode::usage, "size " + std::to_string(size) + ": expected 0 to 1000");
    std::vector<std::string> excess;
    require_pool(ctx, name);
    {
        FileLock lock(pool_dir(ctx, name) / "lock");
        json j = require_pool(ctx, name);
        j["size"] = size;
        j.erase("last_error");
        write_pool(ctx, name, j);
        int idle = 0;
        for (auto& r : members(ctx, name)) {
            if (r.pool_state != "idle" && r.pool_state != "removing") continue;
            // A claim a killed resize left behind is finished here.
            if (r.pool_state == "removing") {
                excess.push_back(r.id);
                continue;
            }
            if (++idle > size) {
                // Claimed under the lock so no acquirer takes it meanwhile.
                auto sandbox_lock = ctx.store.lock(r.id);
                r.pool_state = "removing";
                ctx.store.save(r);
                excess.push_back(r.id);
            }
        }
    }
    SANDWEAVE_FAULT_POINT("pool.resize-claimed");
    for (const auto& id : excess) {
        try {
            remove_sandbox(ctx, id);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::not_found) throw;  // a refill cleared it first
        }
    }
    start_refill(ctx, name);
    return pool_info(ctx, name);
}

void remove_pool(Context& ctx, const std::string& name) {
    ObjectDir pools = ctx.store.objects(pool_kind);
    fs::path dir = pools.object_dir(name);
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) pools.resolve(name);  // throws the kind's not-found error
    {
        // A directory without its record is a pool rm that was killed half-way:
        // this one finishes it.
        FileLock lock(dir / "lock");
        // Without its record the pool is gone for everyone, a refill included.
        fs::remove(dir / "pool.json");
    }
    SANDWEAVE_FAULT_POINT("pool.rm-record-gone");
    // Wait for a refill in flight to notice and stop.
    FileLock refill(dir / "refill.lock");
    for (auto& r : members(ctx, name)) {
        if (r.pool_state == "acquired") continue;  // the caller's now
        try {
            remove_sandbox(ctx, r.id);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::not_found) throw;
        }
    }
    ctx.store.objects(pool_kind).remove(name);
}

std::vector<std::string> prune_pools(Context& ctx) {
    std::vector<std::string> out;
    ObjectDir pools = ctx.store.objects(pool_kind);
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(pools.path(), ec)) {
        std::string name = e.path().filename().string();
        if (!valid_object_name(name) || pools.exists(name) || !e.is_directory()) continue;
        remove_pool(ctx, name);
        out.push_back(name);
    }
    return out;
}

namespace {

constexpr int max_parallel_refill = 4;

// How long a full pool's refill waits after a wake before it starts a create,
// while the pool still has warm members. A woken refill starts a create at
// once (records parsed, processes forked); on a small host it took the CPU
// from the acquire that woke it, whose answer was then ~2 ms later. With
// nothing warm left it starts at once: the next acquire waits for this very
// create (and the one that woke it has taken its member already).
constexpr auto refill_settle = std::chrono::milliseconds(5);

struct Made {
    std::vector<SandboxRecord> records;
    std::optional<std::string> error;  // the first create that failed
};

// `n` creates side by side (each mostly waits on runsc and its sandbox's
// start); what was made and the first failure.
Made create_members(Context& ctx, const CreateRequest& req, int n) {
    Made made;
    std::mutex mu;
    auto one = [&] {
        try {
            SandboxRecord r = create_sandbox(ctx, req);
            std::lock_guard<std::mutex> g(mu);
            made.records.push_back(std::move(r));
        } catch (const std::exception& e) {
            std::lock_guard<std::mutex> g(mu);
            if (!made.error) made.error = e.what();
        }
    };
    std::vector<std::thread> threads;
    for (int i = 1; i < n; ++i) threads.emplace_back(one);
    one();
    for (auto& t : threads) t.join();
    return made;
}

}  // namespace

int pool_refill_main(Context& ctx, const std::string& name) {
    fs::path dir = pool_dir(ctx, name);
    auto refill = FileLock::try_lock(dir / "refill.lock");
    if (!refill.locked()) return 0;  // another refill is at work
    // Watched before each count, so a change made after the count wakes us.
    Fd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!watch) throw_errno("inotify_init1");
    if (::inotify_add_watch(watch.get(), dir.c_str(), refill_watch_events) < 0)
        throw_errno("inotify_add_watch " + dir.string());
    bool woken = false;
    for (int created = 0; created < 1000;) {
        drain_events(watch.get());
        auto j = read_pool(ctx, name);
        if (!j) return 0;
        auto m = members(ctx, name);
        // Clear what an earlier, killed refill left half-made, so it neither
        // counts as starting nor leaks.
        for (const auto& r : m) {
            if (r.pool_state == "acquired" ||
                (!abandoned(ctx, r) && r.state != SandboxState::failed))
                continue;
            try {
                remove_sandbox(ctx, r.id);
            } catch (const Error& e) {
                log().warn("pool " + name + ": removing abandoned member " + r.id + ": " +
                           e.what());
            }
        }
        m = members(ctx, name);
        reconcile_index(ctx, name, m);
        PoolInfo info = info_from(name, *j, m);
        if (info.warm + info.starting >= info.size) {
            // Full: wait for an acquire, a resize or the pool's removal (or
            // a minute, for members that died meanwhile).
            pollfd p{watch.get(), POLLIN, 0};
            int n = ::poll(&p, 1, 60'000);
            if (n < 0 && errno != EINTR) throw_errno("poll");
            woken = n > 0;
            continue;
        }
        if (std::exchange(woken, false) && info.warm > 0) {
            // Woken by an acquire, whose answer is still on its way: its last
            // steps go first, not beside a create's burst of CPU.
            std::this_thread::sleep_for(refill_settle);
            continue;
        }
        // The whole deficit at once (a few at a time): eight consumers
        // draining the pool must not wait for one create after another.
        int batch = std::min(info.size - info.warm - info.starting, max_parallel_refill);
        created += batch;
        CreateRequest req = member_request(ctx, (*j)["request"], name);
        auto made = create_members(ctx, req, batch);
        auto now = read_pool(ctx, name);
        for (const auto& r : made.records)
            if (!now) remove_sandbox(ctx, r.id);  // the pool was removed meanwhile
        if (!now) return 0;
        if (made.error) {
            log().error("pool " + name + ": refill failed: " + *made.error);
            set_last_error(ctx, name, *made.error);
            return 1;
        }
        // It works again: an earlier failure is no longer the pool's state.
        if (now->contains("last_error")) set_last_error(ctx, name, std::nullopt);
    }
    return 0;
}

}  // namespace sandweave
