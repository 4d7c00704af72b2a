#include "lib/sandbox/lifetime.hpp"

#include <malloc.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/helper.hpp"
#include "lib/core/log.hpp"
#include "lib/core/process.hpp"
#include "lib/sandbox/activity.hpp"
#include "lib/sandbox/filter.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using Clock = std::chrono::system_clock;

namespace {

std::int64_t epoch_ms(Clock::time_point t) {
    return std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count();
}

bool clock_started(const SandboxRecord& r) {
    return r.spec.lifetime.any() && r.pool_state != "idle" && r.pool_state != "removing";
}

fs::path watcher_lock(const StateStore& store, const std::string& id) {
    return store.sandbox_dir(id) / "lifetime.lock";
}

// Ends the sandbox for `why` ("ttl", "idle_timeout" or "slurm_job") and records it.
void end_sandbox(Context& ctx, const std::string& id, const std::string& why) {
    log().info("sandbox " + id + ": " +
               (why == "ttl"         ? "ttl passed"
                : why == "slurm_job" ? "its Slurm job ended"
                                     : "idle timeout passed") +
               ", terminating");
    terminate_sandbox(ctx, id, why);
}

// Starts a detached `__lifetime` for `id`. Throws when it cannot start.
void launch_watcher(const StateStore& store, const std::string& id) {
    HelperSpec spec;
    // main_exe: the shim, which calls this when a ttl passes, runs from sandweave-helper.
    spec.argv = {main_exe().string(), lifetime_verb, "--state-dir", store.root().string(), id};
    spec.log = store.sandbox_dir(id) / "logs/lifetime.log";
    spec.timeout = std::chrono::seconds(10);
    HelperReport report = launch_helper(spec);
    if (!report.ok())
        throw Error(ErrorCode::general,
                    "starting the lifetime watcher of " + id + ": " +
                        (report.detail.empty() ? "it exited without a word" : report.detail));
}

// An inotify watch of the sandbox's directory: a new record, an activity
// mark, the directory renamed away or deleted. Invalid when it cannot be set.
Fd watch_directory(const fs::path& dir) {
    Fd in(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (in && ::inotify_add_watch(in.get(), dir.c_str(),
                                  IN_MOVED_TO | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVE_SELF |
                                      IN_DELETE_SELF | IN_ONLYDIR) < 0)
        in.reset();
    return in;
}

// Sleeps until `wait` passes or the directory changes; false when it went
// away (rm renames it) or `stop_fd` (when >= 0) became readable.
bool wait_for_change(int in, milliseconds wait, int stop_fd = -1) {
    pollfd pfd[2] = {{in, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    int rc = ::poll(pfd, stop_fd >= 0 ? 2 : 1, static_cast<int>(wait.count()));
    if (rc <= 0) return true;
    if (stop_fd >= 0 && (pfd[1].revents & POLLIN)) return false;
    alignas(inotify_event) char buf[4096];
    bool gone = false;
    ssize_t n;
    while ((n = ::read(in, buf, sizeof buf)) > 0) {
        for (char* p = buf; p < buf + n;) {
            auto* ev = reinterpret_cast<inotify_event*>(p);
            if (ev->mask & (IN_MOVE_SELF | IN_DELETE_SELF | IN_IGNORED)) gone = true;
            p += sizeof(inotify_event) + ev->len;
        }
    }
    return !gone;
}

// Until the next deadline; a busy sandbox's idle clock is not running, so
// look again each second for the command's end (its final activity mark
// also wakes the watcher).
milliseconds next_wait(const TimeLeft& left) {
    milliseconds wait = std::chrono::minutes(10);
    if (left.ttl) wait = std::min(wait, *left.ttl);
    if (left.idle) wait = std::min(wait, left.busy ? milliseconds(1000) : *left.idle);
    return std::max(wait, milliseconds(10));
}

bool ttl_passed(const TimeLeft& left) {
    return left.ttl && left.ttl->count() <= 0;
}
bool idle_passed(const TimeLeft& left) {
    return left.idle && !left.busy && left.idle->count() <= 0;
}

// The shim's watcher (shim_lifetime_watcher): waits, and hands over to a
// `__lifetime` once a deadline passed.
void watch_in_shim(const StateStore& store, const std::string& id, std::optional<FileLock> lock,
                   int stop_fd) {
    Fd in = watch_directory(store.sandbox_dir(id));
    if (!in) return;  // ls/inspect start a watcher of their own
    for (;;) {
        if (!lock || !lock->locked()) {
            lock.reset();
            lock.emplace(FileLock::try_lock(watcher_lock(store, id)));
        }
        auto r = store.try_load(id);
        if (!r) return;
        // Being created (the record says running once the shim is ready) or
        // watched by another watcher: look again in a second.
        milliseconds wait(1000);
        if (r->state != SandboxState::creating) {
            if (r->state != SandboxState::running) return;
            if (lock->locked()) {
                // Without a clock yet (a warm pool member) the acquire that
                // starts it saves the record, which wakes us.
                wait = std::chrono::minutes(10);
                if (auto left = time_left(store, *r, Clock::now())) {
                    if (ttl_passed(*left) || idle_passed(*left)) {
                        lock.reset();  // the watcher started now takes it
                        launch_watcher(store, id);
                        return;
                    }
                    wait = next_wait(*left);
                }
            }
        }
        // The shim idles for the sandbox's life: the load's garbage goes back
        // to the host before every wait, not only the shim's start-up's.
        ::malloc_trim(0);
        if (!wait_for_change(in.get(), wait, stop_fd)) return;
    }
}

}  // namespace

std::optional<milliseconds> TimeLeft::soonest() const {
    std::optional<milliseconds> out = ttl;
    if (idle && !busy && (!out || *idle < *out)) out = idle;
    return out;
}

std::optional<TimeLeft> time_left(const StateStore& store, const SandboxRecord& r,
                                  Clock::time_point now) {
    if (r.state != SandboxState::running || !clock_started(r)) return std::nullopt;
    TimeLeft t;
    if (r.spec.lifetime.ttl && r.expires_at_ms)
        t.ttl = milliseconds(*r.expires_at_ms - epoch_ms(now));
    if (r.spec.lifetime.idle_timeout) {
        ActivityInfo a = read_activity(store.sandbox_dir(r.id));
        t.busy = a.busy;
        Clock::time_point since = a.last.value_or(now);
        t.idle =
            std::chrono::duration_cast<milliseconds>(since - now) + *r.spec.lifetime.idle_timeout;
    }
    return t;
}

void start_lifetime_clock(const StateStore& store, SandboxRecord& r) {
    if (!clock_started(r)) return;
    auto now = Clock::now();
    if (r.spec.lifetime.ttl) r.expires_at_ms = epoch_ms(now) + r.spec.lifetime.ttl->count();
    touch_activity(store.sandbox_dir(r.id));
}

void ensure_lifetime_watcher(Context& ctx, const SandboxRecord& r) {
    if (r.state != SandboxState::running || !clock_started(r)) return;
    if (!FileLock::try_lock(watcher_lock(ctx.store, r.id)).locked()) return;  // one watches
    launch_watcher(ctx.store, r.id);
}

std::function<void(int)> shim_lifetime_watcher(const std::vector<std::string>& args) {
    if (args.size() != 2) return {};
    auto store = std::make_shared<StateStore>(args[0]);
    std::string id = args[1];
    // Taken now, before the shim reports ready: the create that started it
    // then finds the lock held and starts no watcher process.
    auto lock = std::make_shared<FileLock>(FileLock::try_lock(watcher_lock(*store, id)));
    return [store, id, lock](int stop_fd) { watch_in_shim(*store, id, std::move(*lock), stop_fd); };
}

int lifetime_watch_main(Context& ctx, const std::string& id) {
    ReadinessReporter ready = ReadinessReporter::inherited();
    fs::path dir = ctx.store.sandbox_dir(id);
    if (::chdir("/") != 0) {
        // Not fatal: only keeps us from pinning the caller's directory.
    }
    FileLock lock = FileLock::try_lock(watcher_lock(ctx.store, id));
    if (!lock.locked()) {
        ready.ready("already watched");
        return 0;
    }
    Fd in = watch_directory(dir);
    if (!in) {
        ready.error("watching " + dir.string() + ": " + std::strerror(errno));
        return 1;
    }
    ready.ready();
    int failures = 0;
    for (;;) {
        auto r = ctx.store.try_load(id);
        if (!r || r->state != SandboxState::running) return 0;
        auto left = time_left(ctx.store, *r, Clock::now());
        if (!left) return 0;
        try {
            if (ttl_passed(*left)) {
                end_sandbox(ctx, id, "ttl");
                return 0;
            }
            if (idle_passed(*left)) {
                // Held while terminating: a command that starts now waits,
                // then finds the sandbox stopped.
                FileLock idle = try_lock_idle(dir);
                if (idle.locked()) {
                    auto again = time_left(ctx.store, *r, Clock::now());
                    if (again && again->idle && again->idle->count() <= 0) {
                        end_sandbox(ctx, id, "idle_timeout");
                        return 0;
                    }
                }
                continue;  // a command started or activity came in meanwhile
            }
        } catch (const Error& e) {
            log().warn("sandbox " + id + ": ending it failed: " + e.what());
            if (++failures >= 5) return 1;
            std::this_thread::sleep_for(std::chrono::seconds(2 * failures));
            continue;
        }
        if (!wait_for_change(in.get(), next_wait(*left))) return 0;  // removed (rm)
    }
}

int end_job_sandboxes(Context& ctx, const std::string& job) {
    int ended = 0;
    for (const auto& r : ctx.store.list()) {
        auto l = r.spec.labels.find("slurm_job");
        if (l == r.spec.labels.end() || l->second != job) continue;
        if (r.state == SandboxState::stopped || r.state == SandboxState::failed) continue;
        try {
            end_sandbox(ctx, r.id, "slurm_job");
            ++ended;
        } catch (const std::exception& e) {
            log().warn("sandbox " + r.id + ": ending it with Slurm job " + job + ": " + e.what());
        }
    }
    return ended;
}

std::vector<std::string> remove_retained_job_sandboxes(Context& ctx, std::chrono::seconds retain,
                                                       std::chrono::system_clock::time_point now) {
    std::vector<std::string> removed;
    for (const auto& r : ctx.store.list()) {
        if (!r.spec.labels.count("slurm_job")) continue;
        if (r.state != SandboxState::stopped && r.state != SandboxState::failed) continue;
        auto at = parse_rfc3339(r.stopped_at.value_or(r.created_at));
        if (!at || now - *at < retain) continue;
        try {
            remove_sandbox(ctx, r.id);
            removed.push_back(r.id);
        } catch (const std::exception& e) {
            log().warn("sandbox " + r.id + ": removing it after its retention: " + e.what());
        }
    }
    return removed;
}

}  // namespace sandweave
