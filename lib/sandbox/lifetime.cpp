#include "lib/sandbox/lifetime.hpp"

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

// Ends the sandbox for `why` ("ttl" or "idle_timeout") and records it.
void end_sandbox(Context& ctx, const std::string& id, const std::string& why) {
    log().info("sandbox " + id + ": " + (why == "ttl" ? "ttl" : "idle timeout") +
               " passed, terminating");
    terminate_sandbox(ctx, id);
    auto lock = ctx.store.lock(id);
    if (auto r = ctx.store.try_load(id)) {
        r->ended_by = why;
        ctx.store.save(*r);
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
    HelperSpec spec;
    spec.argv = {self_exe().string(), lifetime_verb, "--state-dir", ctx.store.root().string(),
                 r.id};
    spec.log = ctx.store.sandbox_dir(r.id) / "logs/lifetime.log";
    spec.timeout = std::chrono::seconds(10);
    HelperReport report = launch_helper(spec);
    if (!report.ok())
        throw Error(ErrorCode::general,
                    "starting the lifetime watcher of " + r.id + ": " +
                        (report.detail.empty() ? "it exited without a word" : report.detail));
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
    Fd in(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!in || ::inotify_add_watch(in.get(), dir.c_str(),
                                   IN_MOVED_TO | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVE_SELF |
                                       IN_DELETE_SELF | IN_ONLYDIR) < 0) {
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
            if (left->ttl && left->ttl->count() <= 0) {
                end_sandbox(ctx, id, "ttl");
                return 0;
            }
            if (left->idle && !left->busy && left->idle->count() <= 0) {
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
        // Sleep until the next deadline; a busy sandbox's idle clock is not
        // running, so look again each second for the command's end (its
        // final activity mark also wakes us).
        milliseconds wait = std::chrono::minutes(10);
        if (left->ttl) wait = std::min(wait, *left->ttl);
        if (left->idle) wait = std::min(wait, left->busy ? milliseconds(1000) : *left->idle);
        wait = std::max(wait, milliseconds(10));
        pollfd pfd{in.get(), POLLIN, 0};
        int rc = ::poll(&pfd, 1, static_cast<int>(wait.count()));
        if (rc > 0) {
            alignas(inotify_event) char buf[4096];
            bool gone = false;
            ssize_t n;
            while ((n = ::read(in.get(), buf, sizeof buf)) > 0) {
                for (char* p = buf; p < buf + n;) {
                    auto* ev = reinterpret_cast<inotify_event*>(p);
                    if (ev->mask & (IN_MOVE_SELF | IN_DELETE_SELF | IN_IGNORED)) gone = true;
                    p += sizeof(inotify_event) + ev->len;
                }
            }
            if (gone) return 0;  // removed (rm renames the directory away)
        }
    }
}

}  // namespace sandweave
