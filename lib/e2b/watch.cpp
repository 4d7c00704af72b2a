// envd's filesystem.Filesystem/WatchDir: a server stream of a directory's
// events. The watch itself is inotify in the guest, `/.sandweave/init --watch`
// (guest/watch.c), run through the Api as the caller's user like any command,
// so it works on every Api (local, ssh://, weave://) and the guest's own
// permissions decide what may be watched. Its output is untrusted and read by
// WatchReader (wire.hpp).
#include <httplib.h>

#include <chrono>

#include "lib/core/agent_wire.hpp"
#include "lib/core/error.hpp"
#include "lib/e2b/internal.hpp"
#include "lib/e2b/wire.hpp"

namespace sandweave::e2b {

using nlohmann::json;

namespace {

// Events a slow client may leave queued before the watcher waits for it.
constexpr std::size_t max_queued_events = 65536;
// How long the guest may take to put its watches in place.
constexpr auto ready_deadline = std::chrono::seconds(30);

const std::string watch_script =
    std::string("exec ") + SW_GUEST_INIT_PATH + " --watch ${2:+--recursive} ${3:+--entry} \"$p\"";

struct Watch {
    RunControl control;
    std::mutex mu;
    std::condition_variable cv;
    std::deque<WatchRecord> events;
    bool ready = false, ended = false, closed = false, timed_out = false;
    int exit_code = 0;
    std::string err, broken;
};

// The end of a watch that stopped by itself, as Connect's error (empty: a
// clean end, its directory removed).
std::pair<std::string, std::string> end_error(const Watch& w) {
    if (!w.broken.empty()) return {"internal", w.broken};
    if (w.timed_out) return {"deadline_exceeded", "the watch's deadline passed (timeoutMs)"};
    std::string why = w.err.substr(0, 500);
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    if (why.empty()) why = "the watch ended (exit " + std::to_string(w.exit_code) + ")";
    switch (w.exit_code) {
        case 0:
            return {"", ""};
        case 3:
            return {"not_found", why};
        case 4:
            return {"invalid_argument", why};
        case 5:
            return {"permission_denied", why};
        case 6:
            return {"resource_exhausted", why};
        default:
            return {"internal", why};
    }
}

}  // namespace

void Server::watch_dir(const SandboxView& sb, const std::optional<std::string>& user,
                       const httplib::Request& req, httplib::Response& res, const json& in) {
    std::string path = path_param(in, "path");
    bool recursive = in.value("recursive", false);
    // The file's EntryInfo with each event while the file exists (envd 0.6.3).
    bool include_entry = in.value("includeEntry", false);

    api::RunParams rp;
    rp.id = sb.record.id;
    rp.argv = path_script(watch_script, {path, recursive ? "1" : "", include_entry ? "1" : ""});
    rp.entrypoint = std::vector<std::string>{};
    rp.user = user;
    // Connect's deadline (the SDK's timeoutMs, 60 s by default) ends the watch.
    if (auto ms = connect_timeout_ms(req)) rp.timeout_ms = *ms;

    auto w = std::make_shared<Watch>();
    {
        std::lock_guard<std::mutex> lock(runners_mu);
        ++runners;
    }
    std::thread([this, w, rp] {
        WatchReader reader;
        api::RunIo io;
        io.out = OutputSink{
            -1, [w, &reader](std::string_view d) {
                std::unique_lock<std::mutex> lock(w->mu);
                if (!w->broken.empty() || w->closed) return;
                std::string bad;
                if (!reader.feed(d, bad)) {
                    w->broken = bad;
                    w->control.cancel();
                    w->cv.notify_all();
                    return;
                }
                w->ready = w->ready || reader.ready();
                for (auto& r : reader.take()) w->events.push_back(std::move(r));
                w->cv.notify_all();
                // Back pressure: the guest waits for a slow client.
                w->cv.wait(lock, [&] { return w->closed || w->events.size() < max_queued_events; });
            }};
        io.err = OutputSink{-1, [w](std::string_view d) {
                                std::lock_guard<std::mutex> lock(w->mu);
                                if (w->err.size() < 4096) w->err.append(d);
                            }};
        io.forward_own_signals = false;
        io.control = &w->control;
        int code = -1;
        bool timed_out = false;
        std::string failed;
        try {
            api::RunResult r = api.run(rp, io);
            code = r.exit_code;
            timed_out = r.timed_out;
        } catch (const Error& e) {
            failed = e.what();
        }
        {
            std::lock_guard<std::mutex> lock(w->mu);
            w->ended = true;
            w->exit_code = code;
            w->timed_out = timed_out;
            if (!failed.empty() && w->err.empty()) w->err = failed;
            w->cv.notify_all();
        }
        std::lock_guard<std::mutex> lock(runners_mu);
        --runners;
        runners_cv.notify_all();
    }).detach();

    // The start event goes out once the guest's watches are in place, so an
    // event right after watchDir() returns is seen; a watch that cannot start
    // is the call's error.
    {
        std::unique_lock<std::mutex> lock(w->mu);
        bool settled = w->cv.wait_for(lock, ready_deadline,
                                      [&] { return w->ready || w->ended || !w->broken.empty(); });
        if (!settled || !w->ready) {
            w->closed = true;
            w->cv.notify_all();
            lock.unlock();
            w->control.cancel();
            // The stream's end-of-stream frame (guarded, Plane::stream).
            auto [code, message] =
                settled ? end_error(*w)
                        : std::pair<std::string, std::string>{
                              "deadline_exceeded", "the guest did not start the watch in time"};
            if (code.empty()) code = "internal", message = "the watch ended before it started";
            fail(connect_http_status(code), "'" + path + "': " + message, code);
        }
    }

    res.status = 200;
    auto started = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "application/connect+json",
        [w, started](std::size_t, httplib::DataSink& sink) {
            std::string out;
            if (!*started) {
                *started = true;
                out = envelope({{"start", json::object()}});
            }
            std::deque<WatchRecord> batch;
            bool end = false;
            std::pair<std::string, std::string> error;
            {
                std::unique_lock<std::mutex> lock(w->mu);
                // In slices, so a client that went away ends the watch soon.
                for (int i = 0; out.empty() && i < 20; ++i) {
                    if (w->cv.wait_for(lock, std::chrono::seconds(1), [&] {
                            return !w->events.empty() || w->ended || !w->broken.empty();
                        }))
                        break;
                    lock.unlock();
                    bool gone = !sink.is_writable();
                    lock.lock();
                    if (gone) return false;
                }
                batch.swap(w->events);
                w->cv.notify_all();
                end = w->ended || !w->broken.empty();
                if (end) error = end_error(*w);
            }
            for (const auto& r : batch) {
                json ev = {{"name", r.name}, {"type", watch_event_type(r.type)}};
                if (r.entry)
                    ev["entry"] =
                        entry_info(r.entry->path, r.entry->mode, std::to_string(r.entry->size),
                                   r.entry->mtime, r.entry->owner, r.entry->group);
                out += envelope({{"filesystem", ev}});
            }
            if (out.empty() && !end) out = envelope({{"keepalive", json::object()}});
            if (!out.empty() && !sink.write(out.data(), out.size())) return false;
            if (end) {
                std::string fin = end_stream(error.first, error.second);
                sink.write(fin.data(), fin.size());
                sink.done();
            }
            return true;
        },
        [w](bool) {
            {
                std::lock_guard<std::mutex> lock(w->mu);
                w->closed = true;
                w->cv.notify_all();
            }
            // The client went away (or the stream ended): the guest's watch
            // ends with it.
            w->control.cancel();
        });
}

}  // namespace sandweave::e2b
