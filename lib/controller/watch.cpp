// What Slurm says, acted on (lib/controller/controller_api.hpp). Slurm is the
// failure detector and the scheduler: this reads `squeue --json` and
// `sinfo --json` every poll_every (observe), decides what they mean for the
// controller's sandboxes and jobs (classify.hpp: a pure function), and acts.
// It sends no heartbeat and keeps no membership of its own.
#include <algorithm>
#include <atomic>
#include <ctime>
#include <thread>

#include "lib/controller/classify.hpp"
#include "lib/controller/controller_api.hpp"
#include "lib/controller/slurm.hpp"
#include "lib/core/log.hpp"

namespace sandweave::controller {

namespace {

constexpr auto poll_every = std::chrono::milliseconds(1500);

// The workers' sandboxes whose job ended unseen are reaped at start and
// every this many polls.
constexpr unsigned reap_every = 20;

// How many sandboxes a restarted controller adopts at once (each an srun
// starting a relay): enough to keep Slurm's slurmd and the workers busy,
// few enough not to run the controller host out of processes.
constexpr std::size_t adopt_at_once = 32;

}  // namespace

void ControllerApi::watch_loop() {
    std::unique_lock<std::mutex> lk(stop_mu_);
    while (!stop_cv_.wait_for(lk, poll_every, [this] { return stopping_; })) {
        lk.unlock();
        try {
            watch_once();
        } catch (const std::exception& e) {
            log().warn(std::string("controller: reading Slurm: ") + e.what());
        }
        lk.lock();
    }
}

Holdings ControllerApi::holdings(bool first) {
    Holdings h;
    h.controller = slurm_.controller();
    h.instance = instance_;
    h.tries = tries_;
    h.now_s = static_cast<long>(std::time(nullptr));
    h.first = first;
    h.reap = first || ++polls_ % reap_every == 0;
    h.retry_unreachable = polls_ % retry_unreachable_every == 0;
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& [id, pl] : placed_)
        h.sandboxes.push_back(
            {id, pl.node, pl.job, pl.gone, pl.link && !pl.gone && pl.link->exited(), pl.missing});
    h.in_flight = in_flight_;
    h.ending = ending_;
    return h;
}

void ControllerApi::watch_once(bool first) {
    std::lock_guard<std::mutex> w(watch_mu_);
    Observation seen{slurm_.jobs(), slurm_.nodes()};
    const Holdings held = holdings(first);
    const std::vector<Decision> decisions = classify(seen, held);
    // The controller's view first, under its lock; Slurm and the workers
    // after, outside it.
    std::vector<std::shared_ptr<WorkerLink>> dropped;
    if (apply_to_view(held, decisions, dropped)) replace_gone_members();
    dropped.clear();
    apply_to_slurm(decisions);
    adopt_all(decisions);
    reap_all(decisions, seen);
}

bool ControllerApi::apply_to_view(const Holdings& held, const std::vector<Decision>& decisions,
                                  std::vector<std::shared_ptr<WorkerLink>>& dropped) {
    bool gone = false;
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& s : held.sandboxes)
        if (auto it = placed_.find(s.id); it != placed_.end()) it->second.missing = 0;
    for (const Decision& d : decisions) {
        auto it = placed_.find(d.sandbox);
        switch (d.kind) {
            case Decision::Kind::lost:
            case Decision::Kind::ended:
                if (it == placed_.end() || it->second.gone) break;
                it->second.gone =
                    d.kind == Decision::Kind::lost ? SandboxState::lost : SandboxState::stopped;
                it->second.why = d.why;
                log().warn("controller: sandbox " + d.sandbox + ": " + d.why);
                dropped.push_back(std::move(it->second.link));
                gone = true;
                break;
            case Decision::Kind::unlisted:
                if (it != placed_.end()) it->second.missing = d.count;
                break;
            case Decision::Kind::list_lost:
            case Decision::Kind::list_ended: {
                // Its owner, when the job is the controller's own user's (a
                // token's sandbox), is in the worker's record: until then
                // only an admin sees it.
                Placed p;
                p.id = d.sandbox;
                p.job = d.job;
                p.node = d.node;
                p.owner = owner_of({}, d.user);
                p.view.record.id = d.sandbox;
                p.gone = d.kind == Decision::Kind::list_lost ? SandboxState::lost
                                                             : SandboxState::stopped;
                p.why = d.why;
                placed_[d.sandbox] = std::move(p);
                break;
            }
            case Decision::Kind::forget_ending:
                ending_.erase(d.job);
                break;
            default:
                break;
        }
    }
    return gone;
}

void ControllerApi::apply_to_slurm(const std::vector<Decision>& decisions) {
    for (const Decision& d : decisions) {
        switch (d.kind) {
            case Decision::Kind::cancel:
                log().warn("controller: cancelling job " + std::to_string(d.job) + ": " + d.why);
                slurm_.cancel(d.job);
                break;
            case Decision::Kind::end_array:
                log().warn("controller: ending job array " + std::to_string(d.array) + ": " +
                           d.why);
                slurm_.cancel(d.array);
                break;
            case Decision::Kind::end_slot:
                log().warn("controller: ending slot " + std::to_string(d.task) + " of job array " +
                           std::to_string(d.array) + ": " + d.why);
                slurm_.cancel_task(d.array, d.task);
                break;
            default:
                break;
        }
    }
}

void ControllerApi::reap_all(const std::vector<Decision>& decisions, const Observation& seen) {
    std::set<std::string> live;
    for (const Decision& d : decisions)
        if (d.kind == Decision::Kind::reap) {
            if (live.empty()) live = live_jobs(seen);
            reap_worker(d.node, live);
        }
}

// Each adoption waits for an srun to start a relay on its node and for the
// worker's answer; after a restart there is one per live sandbox, so they
// run side by side, at most adopt_at_once at a time.
void ControllerApi::adopt_all(const std::vector<Decision>& decisions) {
    std::vector<const Decision*> todo;
    for (const Decision& d : decisions)
        if (d.kind == Decision::Kind::reconnect) todo.push_back(&d);
    std::vector<char> adopted(todo.size(), 0);
    std::atomic<std::size_t> next{0};
    auto work = [&] {
        for (std::size_t i; (i = next++) < todo.size();) {
            const Decision& d = *todo[i];
            try {
                adopted[i] = adopt(d.job, d.sandbox, d.node, d.user);
            } catch (const std::exception& e) {  // not on this thread's way out
                log().warn("controller: adopting sandbox " + d.sandbox + ": " + e.what());
            }
        }
    };
    std::vector<std::thread> threads;
    const std::size_t n = std::min(todo.size(), adopt_at_once);
    for (std::size_t t = 1; t < n; ++t) threads.emplace_back(work);
    work();
    for (std::thread& t : threads) t.join();
    for (std::size_t i = 0; i < todo.size(); ++i) {
        if (adopted[i])
            tries_.erase(todo[i]->job);
        else
            ++tries_[todo[i]->job];
    }
}

// The sandboxes on `node` whose job Slurm no longer runs (their job ended
// while no epilog could run, or before it was named) are terminated, audit
// barrier first, and left to the worker's retention (an ended job's export
// stays retrievable). Only workers the controller reaches: those with a
// running sandbox of its own.
void ControllerApi::reap_worker(const std::string& node, const std::set<std::string>& live) {
    bool have = false;
    {
        std::lock_guard<std::mutex> g(mu_);
        for (const auto& [id, pl] : placed_)
            if (!pl.gone && pl.node == node && pl.link) have = true;
    }
    if (!have) return;
    try {
        // The controller's own link: a sandbox's would show only its job's.
        std::shared_ptr<WorkerLink> link = link_to(node);
        api::LsParams q;
        q.filter = {std::string("label=") + slurm::job_label};
        for (const auto& v : link->api().ls(q).sandboxes) {
            const auto& labels = v.record.spec.labels;
            auto l = labels.find(slurm::job_label);
            if (l == labels.end() || live.count(l->second)) continue;
            // Terminated (audit barrier first) as its epilog would have; the
            // worker keeps it, and its export, for its retention.
            if (v.live != SandboxState::running) continue;
            log().warn("controller: sandbox " + v.record.id + " on " + node + ": its job " +
                       l->second + " no longer runs; terminating it");
            link->api().terminate({v.record.id});
        }
    } catch (const std::exception& e) {
        log().warn("controller: reaping on " + node + ": " + e.what());
    }
}

bool ControllerApi::adopt(long job, const std::string& id, const std::string& node,
                          const std::string& job_user) {
    Placed p;
    p.id = id;
    p.job = job;
    p.node = node;
    try {
        p.link = std::make_shared<WorkerLink>(c_, job, node,
                                              job_user.empty() ? slurm_.owner(job) : job_user);
        p.view = p.link->api().inspect({id});
        p.view.worker = node;
        p.name = p.view.record.name;
        p.owner = owner_of(p.view, job_user);
    } catch (const Error& e) {
        if (e.code() != ErrorCode::not_found) {
            log().warn("controller: job " + std::to_string(job) + " (sandbox " + id +
                       "): " + e.what());
            // Still placed (its job runs): say why it cannot be reached.
            std::lock_guard<std::mutex> g(mu_);
            if (auto it = placed_.find(id); it != placed_.end() && !it->second.gone)
                it->second.unreachable = e.what();
            return false;
        }
        log().warn("controller: cancelling job " + std::to_string(job) + ": worker " + node +
                   " does not know its sandbox " + id);
        slurm_.cancel(job);
        return true;
    }
    log().info("controller: sandbox " + id + " on " + node + " (job " + std::to_string(job) +
               ") is back");
    std::lock_guard<std::mutex> g(mu_);
    placed_[id] = std::move(p);
    return true;
}

void ControllerApi::require_live(const Placed& pl) {
    if (pl.gone)
        throw Error(pl.gone == SandboxState::lost ? ErrorCode::connection : ErrorCode::general,
                    "sandbox " + pl.id + " is " + to_string(*pl.gone) + ": " + pl.why);
}

Placed ControllerApi::relink(const Placed& pl) {
    if (!adopt(pl.job, pl.id, pl.node, {})) {
        Placed now = route(pl.id).first;
        require_live(now);
        throw Error(ErrorCode::connection,
                    "sandbox " + pl.id + ": its worker " + pl.node + " cannot be reached" +
                        (now.unreachable.empty() ? "" : ": " + now.unreachable));
    }
    return route(pl.id).first;
}

void ControllerApi::link_failed(const Placed& pl, const Error& e) {
    try {
        watch_once();
    } catch (const std::exception& w) {
        log().warn(std::string("controller: reading Slurm: ") + w.what());
    }
    Placed now = route(pl.id).first;
    require_live(now);
    // Slurm still runs the job on a live node: only the link broke (its
    // relay or the worker daemon ended). A new one serves the next call;
    // this one's outcome is unknown, so it fails.
    if (now.link == pl.link) relink(pl);
    throw e;
}

}  // namespace sandweave::controller
