// The batch runner: worker threads, each with its own connection, take the
// next episode and run it as a chain of named steps (create, files in, run,
// files out, audit, remove); the folder is written only when a try ends
// without an infrastructure failure. See lib/batch/batch.hpp for the contract.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "lib/audit/audit.hpp"
#include "lib/batch/batch.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/log.hpp"
#include "lib/core/progress.hpp"

namespace sandweave::batch {
namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// UTC with milliseconds: two episodes' start times can be compared.
std::string now_text() {
    auto now = std::chrono::system_clock::now();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
    std::time_t t = static_cast<std::time_t>(ms.count() / 1000);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    char out[48];
    std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms.count() % 1000));
    return out;
}

// Progress reported by the steps of an episode (a copy) is not shown: the
// batch's own line says enough.
class Silent final : public ProgressSink {
  public:
    void update(const ProgressUpdate&) override {}
};

// One output stream of the command, kept up to a limit, counted in full.
class Capture {
  public:
    Capture(const fs::path& path, std::uint64_t limit) : path_(path), limit_(limit) {
        fd_ = Fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
        if (!fd_.valid()) throw_errno("create " + path.string());
    }
    void write(std::string_view chunk) {
        total_ += chunk.size();
        std::string_view keep = chunk.substr(0, limit_ > kept_ ? limit_ - kept_ : 0);
        kept_ += keep.size();
        while (!keep.empty()) {
            ssize_t w = ::write(fd_.get(), keep.data(), keep.size());
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) throw_errno("write " + path_.string());
            keep.remove_prefix(static_cast<std::size_t>(w));
        }
    }
    OutputSink sink() {
        return OutputSink{-1, [this](std::string_view c) { write(c); }};
    }
    json to_json() const {
        return {{"bytes", total_}, {"kept", kept_}, {"truncated", total_ > kept_}};
    }

  private:
    fs::path path_;
    std::uint64_t limit_;
    Fd fd_;
    std::uint64_t total_ = 0, kept_ = 0;
};

// Files 0600, folders 0700 (a copy out keeps the guest's modes otherwise),
// every one fsynced, so the rename publishes a durable folder.
void seal_tree(const fs::path& root) {
    std::vector<fs::path> dirs{root};
    for (auto it = fs::recursive_directory_iterator(root); it != fs::end(it); ++it) {
        const auto st = it->symlink_status();
        if (fs::is_symlink(st)) continue;
        if (fs::is_directory(st)) {
            ::chmod(it->path().c_str(), 0700);
            dirs.push_back(it->path());
        } else if (fs::is_regular_file(st)) {
            ::chmod(it->path().c_str(), 0600);
            Fd fd(::open(it->path().c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
            if (!fd.valid() || ::fsync(fd.get()) != 0) throw_errno("fsync " + it->path().string());
        }
    }
    ::chmod(root.c_str(), 0700);
    for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) fsync_dir(*d);
}

std::string status_of(const json& result) {
    return result.value("status", std::string("failed"));
}

}  // namespace

// ---- the summary -------------------------------------------------------------

json Summary::to_json() const {
    json j = {{"out", out},
              {"batch", key},
              {"total", total},
              {"skipped", skipped},
              {"done", done},
              {"failed", failed},
              {"infrastructure", infrastructure},
              {"not_run", not_run},
              {"audit",
               {{"complete", audit_complete},
                {"incomplete", audit_incomplete},
                {"off", audit_off},
                {"reasons", audit_reasons}}},
              {"failed_ids", failed_ids},
              {"incomplete_ids", incomplete_ids},
              {"infrastructure_ids", infrastructure_ids},
              {"infrastructure_errors", infrastructure_errors},
              {"seconds", seconds},
              {"exit_code", exit_code}};
    if (stopped_by) j["stopped_by"] = stopped_by;
    return j;
}

std::string Summary::to_text() const {
    auto ids = [](const std::vector<std::string>& v) {
        std::string s;
        for (std::size_t i = 0; i < v.size() && i < 10; ++i) s += " " + v[i];
        if (v.size() > 10) s += " ... (" + std::to_string(v.size() - 10) + " more)";
        return s;
    };
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f", seconds);
    std::string t = "batch: " + std::to_string(total) + " episodes in " + secs + " s";
    if (skipped) t += " (" + std::to_string(skipped) + " finished by an earlier run)";
    if (stopped_by)
        t += "; stopped by signal " + std::to_string(stopped_by) + ", " + std::to_string(not_run) +
             " not run";
    t += "\n  done " + std::to_string(done) + ", failed " + std::to_string(failed) +
         " (non-zero exit, timeout or a missing file out), infrastructure failures " +
         std::to_string(infrastructure) + "\n  audit: " + std::to_string(audit_complete) +
         " complete, " + std::to_string(audit_incomplete) + " incomplete";
    std::string reasons;
    for (const auto& [r, n] : audit_reasons)
        reasons += (reasons.empty() ? "" : ", ") + r + ": " + std::to_string(n);
    if (!reasons.empty()) t += " (" + reasons + ")";
    if (audit_off) t += ", " + std::to_string(audit_off) + " without audit";
    if (!failed_ids.empty()) t += "\n  failed:" + ids(failed_ids);
    if (!incomplete_ids.empty()) t += "\n  audit incomplete:" + ids(incomplete_ids);
    std::size_t shown = 0;
    for (const auto& [id, err] : infrastructure_errors)
        if (shown++ < 5) t += "\n  infrastructure: " + id + ": " + err;
    return t;
}

// ---- the runner ----------------------------------------------------------------

struct Runner::State {
    std::vector<Episode> episodes;
    Options o;
    std::string key;
    std::optional<std::string> pool;  // the warm pool episodes are taken from
    std::size_t pool_size = 0;
    // Through a controller: the Slurm job array whose slot i the i-th
    // episode of `todo` is created in (its first try; a retry is a create of
    // its own), and how many slots it has.
    std::optional<std::string> reservation;
    std::size_t slots = 0;
    std::atomic<int> stop_signal{0};

    std::mutex mu;
    std::condition_variable changed;
    std::set<RunControl*> running_commands;
    std::vector<std::size_t> todo;
    std::size_t next = 0, running = 0, finished = 0, workers_left = 0;
    Summary sum;

    bool stopping() const { return stop_signal.load() != 0; }
    void count(const json& result);
    void event(json ev);
};

// One try of one episode.
struct Try {
    json record = json::object();
    std::optional<std::string> infra;  // what failed, when the machinery did
    bool connection_lost = false;
    bool stopped = false;
    json result;  // the episode's result.json, when it ran
    fs::path folder;
};

void Runner::State::count(const json& r) {
    // Under mu.
    const std::string id = r.value("id", "");
    if (status_of(r) == "done")
        ++sum.done;
    else {
        ++sum.failed;
        sum.failed_ids.push_back(id);
    }
    const json a = r.value("audit", json::object());
    if (!a.value("enabled", false)) {
        ++sum.audit_off;
    } else if (a.value("complete", false)) {
        ++sum.audit_complete;
    } else {
        ++sum.audit_incomplete;
        sum.incomplete_ids.push_back(id);
        for (const auto& reason : a.value("reasons", json::array()))
            if (reason.is_string()) ++sum.audit_reasons[reason.get<std::string>()];
    }
}

void Runner::State::event(json ev) {
    if (o.on_event) o.on_event(ev);
}

namespace {

api::CreateParams create_params(const Episode& e, const Options& o, const std::string& key) {
    api::CreateParams p;
    p.template_ref = e.template_ref;
    p.hidepid = e.hidepid;
    p.audit = e.audit;
    p.user = e.user;
    p.labels = e.labels;
    p.network = e.network;
    p.allow = e.allow;
    p.deny = e.deny;
    p.labels[batch_label] = key;
    p.labels[episode_label] = e.id;
    p.ttl_ms = e.timeout_ms ? *e.timeout_ms + ttl_margin_ms : no_timeout_ttl_ms;
    if (o.via) p = api::for_remote_worker(p, o.client_state_dir);
    return p;
}

// The steps of one try after create, in order; each fails with its own context.
struct EpisodeSteps {
    api::Api& api;
    Runner::State& s;
    const Episode& e;
    const std::string& sandbox;
    const fs::path& folder;
    json& result;

    void copy_in() {
        // Not a structured binding: clang 14 (the sanitizer tree's) cannot capture one.
        for (const auto& file : e.files_in)
            with_context("copying " + file.second + " in to " + file.first, [&] {
                api::CopyParams c;
                c.src = api::CopyEndpoint{std::nullopt, file.second};
                c.dst = api::CopyEndpoint{sandbox, file.first};
                api::copy(api, c);
            });
    }

    api::RunResult run_command() {
        Capture out(folder / "stdout", s.o.output_limit), err(folder / "stderr", s.o.output_limit);
        api::RunParams p;
        p.id = sandbox;
        p.argv = e.argv;
        p.entrypoint = std::vector<std::string>{};
        p.user = e.user;
        p.env = e.env;
        p.timeout_ms = e.timeout_ms;
        RunControl control;
        api::RunIo io;
        io.out = out.sink();
        io.err = err.sink();
        io.control = &control;
        {
            std::lock_guard<std::mutex> g(s.mu);
            s.running_commands.insert(&control);
            if (s.stopping()) control.cancel();
        }
        struct Unregister {
            Runner::State& s;
            RunControl* c;
            ~Unregister() {
                std::lock_guard<std::mutex> g(s.mu);
                s.running_commands.erase(c);
            }
        } unregister{s, &control};
        api::RunResult r = with_context("running the command", [&] { return api.run(p, io); });
        result["stdout"] = out.to_json();
        result["stderr"] = err.to_json();
        return r;
    }

    // A file the episode did not leave is its own failure, not the machinery's.
    void copy_out() {
        json copied = json::object(), errors = json::object();
        for (const auto& guest : e.files_out) {
            fs::path dst = folder / "files" / fs::path(guest).relative_path();
            make_dirs(dst.parent_path(), 0700);
            try {
                api::CopyParams c;
                c.src = api::CopyEndpoint{sandbox, guest};
                c.dst = api::CopyEndpoint{std::nullopt, dst.string()};
                api::copy(api, c);
                copied[guest] = fs::relative(dst, folder).string();
            } catch (const Error& err) {
                if (err.code() == ErrorCode::connection) throw;
                errors[guest] = err.what();
            }
        }
        result["files_out"] = copied;
        if (!errors.empty()) result["files_out_errors"] = errors;
    }

    // terminate's final barrier, then the export, then `audit verify`'s check
    // of what was written here.
    void export_audit() {
        json a = {{"enabled", true}};
        fs::path log = folder / "audit.jsonl";
        with_context("terminating the sandbox", [&] { api.terminate(api::IdParams{sandbox}); });
        audit::Status st = with_context("exporting the audit log", [&] {
            return s.o.via ? api::export_to_client(api, sandbox, log.string(), *s.o.via)
                           : api.audit_export(api::AuditExportParams{sandbox, log.string()});
        });
        audit::VerifyResult v = audit::verify_log(log);
        std::vector<std::string> reasons = st.reasons;
        if (!v.ok) reasons.push_back("verify_failed");
        a["complete"] = st.complete && v.ok;
        a["reasons"] = reasons;
        a["events"] = st.events;
        a["dropped"] = st.dropped;
        a["bytes"] = st.bytes;
        a["verified"] = v.ok;
        if (!v.ok) a["verify_discrepancy"] = v.discrepancy;
        result["audit"] = a;
    }
};

Try attempt(Runner::State& s, api::Api& api, const Episode& e, int n,
            std::optional<std::int64_t> slot) {
    Try t;
    t.record = {{"try", n}, {"started_at", now_text()}};
    t.folder = s.o.out / (".tmp-" + e.id + "-" + random_hex(8));
    std::optional<std::string> sandbox;
    auto remove_sandbox = [&] {
        if (!sandbox) return;
        try {
            api.rm(api::IdParams{*sandbox});
        } catch (const Error& err) {
            log().warn("episode " + e.id + ": removing sandbox " + *sandbox + ": " + err.what());
        }
        sandbox.reset();
    };
    try {
        make_dirs(t.folder, 0700);
        json& r = t.result;
        r = {{"id", e.id}, {"line", e.line}, {"started_at", t.record["started_at"]}};
        if (!e.labels.empty()) r["labels"] = e.labels;
        SandboxView v = s.pool ? with_context("taking a sandbox from the warm pool",
                                              [&] { return api.pool_acquire({*s.pool}); })
                               : with_context("creating the sandbox", [&] {
                                     api::CreateParams p = create_params(e, s.o, s.key);
                                     if (slot) {
                                         p.reservation = s.reservation;
                                         p.slot = slot;
                                     }
                                     return api.create(p);
                                 });
        sandbox = v.record.id;
        if (s.pool) r["pool"] = *s.pool;
        t.record["sandbox"] = *sandbox;
        r["sandbox"] = *sandbox;
        if (v.worker) t.record["worker"] = r["worker"] = *v.worker;
        EpisodeSteps steps{api, s, e, *sandbox, t.folder, r};
        if (!s.stopping()) steps.copy_in();
        api::RunResult run;
        if (!s.stopping()) run = steps.run_command();
        if (s.stopping()) {
            t.stopped = true;
            remove_sandbox();
            remove_tree(t.folder);
            return t;
        }
        if (run.exit_code == 125 && run.message)
            throw Error(ErrorCode::general, "running the command: " + *run.message);
        r["exit_code"] = run.exit_code;
        r["timed_out"] = run.timed_out;
        if (run.message) r["message"] = *run.message;
        write_file_atomic(t.folder / "exit", std::to_string(run.exit_code) + "\n", 0600,
                          Durability::live);
        steps.copy_out();
        if (e.audit)
            steps.export_audit();
        else
            r["audit"] = {{"enabled", false}};
        remove_sandbox();
        bool ok = run.exit_code == 0 && !run.timed_out && !r.contains("files_out_errors");
        r["status"] = ok ? "done" : "failed";
        r["output_limit"] = s.o.output_limit;
    } catch (const Error& err) {
        t.infra = err.what();
        t.connection_lost = err.code() == ErrorCode::connection;
        remove_sandbox();
        remove_tree(t.folder);
    } catch (const std::exception& err) {
        t.infra = err.what();
        remove_sandbox();
        remove_tree(t.folder);
    }
    // A try a stop broke (a create waiting for a slot the stop released) is
    // no infrastructure failure: the episode was not run.
    if (t.infra && s.stopping()) t.stopped = true;
    t.record["ended_at"] = now_text();
    if (t.infra) t.record["error"] = *t.infra;
    return t;
}

// Publishes a finished try's folder as OUT/<id>.
void publish(Runner::State& s, const Episode& e, Try& t, const json& tries) {
    t.result["ended_at"] = t.record["ended_at"];
    t.result["tries"] = tries;
    write_file_atomic(t.folder / "result.json", t.result.dump(2) + "\n", 0600, Durability::live);
    seal_tree(t.folder);
    fs::path final = s.o.out / e.id;
    // Not ours to keep: a folder without result.json is no finished episode.
    if (fs::exists(fs::symlink_status(final))) remove_tree(final);
    fs::rename(t.folder, final);
    fsync_dir(s.o.out);
}

json event_of(const json& result, const fs::path& folder, bool resumed) {
    json ev = result;
    ev["event"] = "episode";
    ev["dir"] = folder.string();
    ev["resumed"] = resumed;
    return ev;
}

void run_episode(Runner::State& s, std::shared_ptr<api::Api>& conn, const Episode& e,
                 std::optional<std::int64_t> slot) {
    json tries = json::array();
    std::string last_error;
    for (int n = 1; n <= s.o.retries + 1; ++n) {
        if (s.stopping()) break;
        if (n > 1) {
            // A moment before the next try, cut short by a stop.
            std::unique_lock<std::mutex> lock(s.mu);
            s.changed.wait_for(lock, std::chrono::milliseconds(500 * (n - 1)),
                               [&] { return s.stopping(); });
            if (s.stopping()) break;
        }
        if (!conn) {
            try {
                conn = s.o.connect();
            } catch (const Error& err) {
                last_error = std::string("connecting: ") + err.what();
                tries.push_back({{"try", n}, {"started_at", now_text()}, {"error", last_error}});
                continue;
            }
        }
        Try t = attempt(s, *conn, e, n, n == 1 ? slot : std::nullopt);
        if (t.stopped) break;
        tries.push_back(t.record);
        if (!t.infra) {
            try {
                publish(s, e, t, tries);
            } catch (const std::exception& err) {
                remove_tree(t.folder);
                throw Error(ErrorCode::general,
                            "episode " + e.id + ": writing its folder: " + err.what());
            }
            json ev = event_of(t.result, s.o.out / e.id, false);
            std::lock_guard<std::mutex> g(s.mu);
            s.count(t.result);
            s.event(ev);
            return;
        }
        last_error = *t.infra;
        if (t.connection_lost) conn.reset();
        log().warn("episode " + e.id + ": try " + std::to_string(n) + " failed: " + last_error +
                   (n <= s.o.retries ? "; trying again" : ""));
    }
    std::lock_guard<std::mutex> g(s.mu);
    if (s.stopping() && (tries.empty() || !tries.back().contains("error"))) {
        ++s.sum.not_run;
        return;
    }
    ++s.sum.infrastructure;
    s.sum.infrastructure_ids.push_back(e.id);
    s.sum.infrastructure_errors[e.id] = last_error;
    s.event({{"event", "episode"},
             {"id", e.id},
             {"status", "infrastructure"},
             {"error", last_error},
             {"tries", tries},
             {"resumed", false}});
}

std::string eta_text(double seconds) {
    if (seconds < 120) return std::to_string(static_cast<long>(seconds + 0.5)) + "s";
    if (seconds < 7200) return std::to_string(static_cast<long>(seconds / 60 + 0.5)) + "m";
    return std::to_string(static_cast<long>(seconds / 3600 + 0.5)) + "h";
}

std::string pool_name(const std::string& key) {
    return "batch-" + key;
}

// Removes this batch's warm pool and every sandbox carrying its label (an
// earlier run's, or one whose create answered after its connection was lost).
std::size_t sweep(api::Api& api, const std::string& key) {
    std::size_t n = 0;
    if (api.offers("pool.rm")) {
        try {
            api.pool_rm(api::NameParams{pool_name(key)});  // its idle members and refill go with it
        } catch (const Error& err) {
            if (err.code() != ErrorCode::not_found)
                log().warn("removing this batch's warm pool: " + std::string(err.what()));
        }
    }
    auto list = api.ls(api::LsParams{{std::string("label=") + batch_label + "=" + key}});
    for (const auto& v : list.sandboxes) {
        try {
            api.rm(api::IdParams{v.record.id});
            ++n;
        } catch (const Error& err) {
            log().warn("removing sandbox " + v.record.id + " of this batch: " + err.what());
        }
    }
    return n;
}

// Whether every episode still to run would get the same sandbox: then a
// warm pool can create them ahead (their per-episode label aside).
bool one_kind(const Runner::State& s) {
    const Episode& a = s.episodes[s.todo.front()];
    for (std::size_t i : s.todo) {
        const Episode& b = s.episodes[i];
        if (b.template_ref != a.template_ref || b.hidepid != a.hidepid || b.audit != a.audit ||
            b.user != a.user || !b.labels.empty() || b.network != a.network || b.allow != a.allow ||
            b.deny != a.deny)
            return false;
    }
    return true;
}

// The longest lifetime an episode still to run needs (its sandbox's ttl).
std::int64_t longest_ttl(const Runner::State& s) {
    std::int64_t ttl = 0;
    for (std::size_t i : s.todo) {
        const auto& t = s.episodes[i].timeout_ms;
        ttl = std::max(ttl, t ? *t + ttl_margin_ms : no_timeout_ttl_ms);
    }
    return ttl;
}

void start_warm_pool(Runner::State& s) {
    if (!s.o.warm_pool || s.todo.size() < 2 || !one_kind(s)) return;
    auto api = s.o.connect();
    if (!api->offers("pool.create")) return;
    const Episode& e = s.episodes[s.todo.front()];
    api::PoolCreateParams p;
    p.name = pool_name(s.key);
    p.size = static_cast<int>(std::min<std::size_t>(s.o.concurrency, s.todo.size()));
    p.options = create_params(e, s.o, s.key);
    p.options.labels.erase(episode_label);
    // Each member's ttl starts when it is taken: the longest episode's.
    p.options.ttl_ms = longest_ttl(s);
    try {
        api->pool_create(p);
        s.pool = p.name;
        s.pool_size = static_cast<std::size_t>(p.size);
        log().debug("batch: warm pool " + p.name + " of " + std::to_string(p.size));
    } catch (const Error& err) {
        log().warn("batch: no warm pool (" + std::string(err.what()) + "); creating each sandbox");
    }
}

// Through a Weave controller: the episodes' allocations as one Slurm job
// array of `concurrency` at once, so Slurm queues what does not fit.
void reserve_slots(Runner::State& s, api::Api& api) {
    api::Reservations* slots = api.reservations();
    if (s.pool || s.todo.empty() || !slots) return;
    api::ReserveParams p;
    p.count = static_cast<std::int64_t>(std::min(s.todo.size(), max_reserved_slots));
    p.at_once = s.o.concurrency;
    p.ttl_ms = longest_ttl(s);
    p.owner = s.key;
    try {
        api::Reservation r = slots->batch_reserve(p);
        s.reservation = r.id;
        s.slots = static_cast<std::size_t>(r.count);
        log().debug("batch: Slurm job array " + r.id + " of " + std::to_string(r.count) +
                    " slots, " + std::to_string(r.at_once) + " at once");
    } catch (const Error& err) {
        log().warn("batch: no Slurm job array (" + std::string(err.what()) +
                   "); an allocation per episode");
    }
}

// Every template the episodes name, resolved by the worker (a file on this
// host is read here for a remote one) before anything starts: a template
// that does not exist (exit 4) or is bad (exit 2) fails the run, naming the
// first line with it, instead of failing every try of every episode.
void check_templates(Runner::State& s, api::Api& api) {
    std::set<std::string> seen;
    for (const Episode& e : s.episodes) {
        if (!e.template_ref || !seen.insert(*e.template_ref).second) continue;
        with_context(s.o.spec.string() + ":" + std::to_string(e.line) + ": episode '" + e.id + "'",
                     [&] {
                         api::TemplateShowParams p{*e.template_ref};
                         if (s.o.via) p = api::for_remote_worker(p, s.o.client_state_dir);
                         (void)api.template_show(p);
                     });
    }
}

// Ends the reservation's slots no episode holds (once).
void release_slots(Runner::State& s, api::Api& api) {
    api::Reservations* slots = api.reservations();
    if (!s.reservation || !slots) return;
    try {
        slots->batch_release(api::IdParams{*s.reservation});
    } catch (const Error& err) {
        log().warn("batch: ending the unused slots of Slurm job array " + *s.reservation + ": " +
                   err.what());
    }
    s.reservation.reset();
}

}  // namespace

Runner::Runner(std::vector<Episode> episodes, Options options) : s_(std::make_unique<State>()) {
    s_->episodes = std::move(episodes);
    s_->o = std::move(options);
    s_->o.out = results_folder(s_->o.out);
    s_->key = batch_key(s_->o.out);
    if (s_->o.concurrency < 1) s_->o.concurrency = 1;
    if (s_->o.retries < 0) s_->o.retries = 0;
}

Runner::~Runner() = default;

void Runner::stop(int sig) {
    int expected = 0;
    s_->stop_signal.compare_exchange_strong(expected, sig);
    std::lock_guard<std::mutex> g(s_->mu);
    for (RunControl* c : s_->running_commands) c->cancel();
    s_->changed.notify_all();
}

namespace {

// The output folder, locked for this run, without what a killed run left
// there (its temp folders, its sandboxes).
FileLock claim_output(Runner::State& s, api::Api& api) {
    make_dirs(s.o.out, 0700);
    FileLock lock = FileLock::try_lock(s.o.out / ".batch.lock");
    if (!lock.locked())
        throw Error(ErrorCode::general,
                    s.o.out.string() + ": another batch run is writing to this folder");
    for (const auto& entry : fs::directory_iterator(s.o.out))
        if (entry.path().filename().string().rfind(".tmp-", 0) == 0) remove_tree(entry.path());
    if (std::size_t n = sweep(api, s.key))
        log().info("batch: removed " + std::to_string(n) +
                   " sandbox(es) left by an earlier run of this batch");
    return lock;
}

// The episodes still to run; one with a result.json (an earlier run's) is
// counted and reported as it is.
void plan_episodes(Runner::State& s) {
    s.sum.total = s.episodes.size();
    s.sum.out = s.o.out.string();
    s.sum.key = s.key;
    for (std::size_t i = 0; i < s.episodes.size(); ++i) {
        fs::path result = s.o.out / s.episodes[i].id / "result.json";
        std::error_code ec;
        if (!fs::is_regular_file(result, ec)) {
            s.todo.push_back(i);
            continue;
        }
        json r;
        try {
            r = json::parse(read_file(result));
        } catch (const std::exception& err) {
            throw Error(ErrorCode::general, result.string() + ": unreadable (" + err.what() +
                                                "); remove its folder to run it again");
        }
        ++s.sum.skipped;
        s.count(r);
        s.event(event_of(r, result.parent_path(), true));
    }
}

// One worker thread: takes the next episode until none is left, the run
// stops or one failed in a way that ends it.
void work(Runner::State& s, std::optional<Error>& failure) {
    Silent silent;
    ThreadProgress quiet(silent);
    std::shared_ptr<api::Api> conn;
    for (;;) {
        std::size_t idx;
        std::optional<int> shrink;  // the warm pool, to what is left to take
        std::optional<std::int64_t> slot;
        {
            std::lock_guard<std::mutex> g(s.mu);
            if (s.stopping() || failure || s.next >= s.todo.size()) break;
            if (s.next < s.slots) slot = static_cast<std::int64_t>(s.next);
            idx = s.todo[s.next++];
            ++s.running;
            std::size_t left = s.todo.size() - s.next + 1;
            if (s.pool && left < s.pool_size) shrink = static_cast<int>(s.pool_size = left);
        }
        if (shrink && conn) {
            try {
                conn->pool_resize(api::PoolResizeParams{*s.pool, *shrink});
            } catch (const Error& err) {
                log().debug("batch: shrinking the warm pool: " + std::string(err.what()));
            }
        }
        try {
            run_episode(s, conn, s.episodes[idx], slot);
        } catch (const Error& err) {
            std::lock_guard<std::mutex> g(s.mu);
            if (!failure) failure = err;
        }
        std::lock_guard<std::mutex> g(s.mu);
        --s.running;
        ++s.finished;
        s.changed.notify_all();
    }
    std::lock_guard<std::mutex> g(s.mu);
    --s.workers_left;
    s.changed.notify_all();
}

// Until the workers are done: the progress line, and the slots given back
// once the run is stopping.
void watch_workers(Runner::State& s, api::Api& api, std::optional<Progress>& progress,
                   Clock::time_point t0) {
    // The line changes with the counts (a plain --progress log gets a line
    // per change, not one per tick); rate and ETA go with them.
    std::unique_lock<std::mutex> l(s.mu);
    std::tuple<std::size_t, std::size_t, std::size_t, bool> shown{static_cast<std::size_t>(-1), 0,
                                                                  0, false};
    while (s.workers_left > 0) {
        s.changed.wait_for(l, std::chrono::milliseconds(500));
        if (s.stopping() && s.reservation) {
            // Creates waiting for a slot Slurm keeps pending fail now.
            l.unlock();
            release_slots(s, api);
            l.lock();
        }
        std::size_t queued = s.todo.size() - s.next;
        std::tuple<std::size_t, std::size_t, std::size_t, bool> now{s.finished, s.running, queued,
                                                                    s.stopping()};
        if (!progress || now == shown) continue;
        shown = now;
        double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        double rate = secs > 0 ? static_cast<double>(s.finished) / secs : 0;
        char r[32];
        std::snprintf(r, sizeof r, "%.2f/s", rate);
        std::string text = std::to_string(s.finished) + "/" + std::to_string(s.todo.size()) +
                           " done, " + std::to_string(s.running) + " running, " +
                           std::to_string(queued) + " queued, " + r;
        if (rate > 0) text += ", ETA " + eta_text(static_cast<double>(queued + s.running) / rate);
        if (s.stopping()) text += ", stopping";
        progress->step(text);
    }
}

// Nothing of this batch may stay: a create that answered after its
// connection was lost, a removal that failed.
void sweep_leftovers(Runner::State& s) {
    try {
        auto api = s.o.connect();
        sweep(*api, s.key);
    } catch (const Error& err) {
        log().warn("batch: checking for leftover sandboxes: " + std::string(err.what()));
    }
}

Summary write_summary(Runner::State& s, Clock::time_point t0) {
    Summary& sum = s.sum;
    sum.not_run += s.todo.size() - std::min(s.todo.size(), s.finished);
    sum.stopped_by = s.stop_signal.load();
    sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    sum.exit_code = sum.infrastructure                                    ? exit_infrastructure
                    : (sum.failed || sum.audit_incomplete || sum.not_run) ? exit_episodes_failed
                                                                          : 0;
    write_file_atomic(s.o.out / "summary.json", sum.to_json().dump(2) + "\n", 0600);
    return sum;
}

}  // namespace

Summary Runner::run() {
    State& s = *s_;
    const auto t0 = Clock::now();
    std::shared_ptr<api::Api> main_api = s.o.connect();
    check_templates(s, *main_api);
    FileLock lock = claim_output(s, *main_api);
    plan_episodes(s);
    start_warm_pool(s);
    reserve_slots(s, *main_api);
    std::optional<Progress> progress;
    if (s.o.progress && !s.todo.empty()) progress.emplace("batch", ProgressUnit::count);
    std::optional<Error> failure;
    int n = std::min<int>(s.o.concurrency, static_cast<int>(s.todo.size()));
    s.workers_left = static_cast<std::size_t>(n);
    std::vector<std::thread> workers;
    for (int w = 0; w < n; ++w) workers.emplace_back([&s, &failure] { work(s, failure); });
    watch_workers(s, *main_api, progress, t0);
    for (auto& w : workers) w.join();
    progress.reset();
    release_slots(s, *main_api);
    sweep_leftovers(s);
    if (failure) throw *failure;
    return write_summary(s, t0);
}

}  // namespace sandweave::batch
