// What Slurm says, acted on (lib/weave/controller_api.hpp). Slurm is the
// failure detector and the scheduler: this reads `squeue --json` and
// `sinfo --json` every poll_every and keeps the controller's view in step
// with them. It sends no heartbeat and keeps no membership of its own.
#include <ctime>
#include <tuple>

#include "lib/core/log.hpp"
#include "lib/weave/controller_api.hpp"
#include "lib/weave/slurm.hpp"

namespace sandweave::weave {

using nlohmann::json;

namespace {

constexpr auto poll_every = std::chrono::milliseconds(1500);

// A running job of ours that no create of this controller holds and that
// never got its sandbox's name is cancelled this long after Slurm started
// it (a create names its job as soon as its worker answers).
constexpr long unnamed_grace_s = 30;

// A job Slurm no longer lists at all (it keeps an ended one for MinJobAge
// with its final state) counts as ended after this many polls in a row: a
// slurmctld that is starting answers with no jobs for a moment.
constexpr int missing_polls = 8;

// How often the controller tries to reconnect to a running job's sandbox
// before it leaves it alone.
constexpr int max_tries = 3;

// The workers' sandboxes whose job ended unseen are reaped at start and
// every this many polls.
constexpr unsigned reap_every = 20;

long job_id(const json& j) {
    return j.value("job_id", 0L);
}

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

void ControllerApi::watch_once(bool first) {
    std::lock_guard<std::mutex> w(watch_mu_);
    const std::vector<json> jobs = slurm::jobs();
    std::map<std::string, std::string> failed;  // node -> why Slurm counts it failed
    for (const json& n : slurm::nodes())
        if (auto why = slurm::node_failure(n); !why.empty())
            failed[n.value("name", std::string())] = why;
    std::map<long, const json*> by_id;
    for (const json& j : jobs) by_id[job_id(j)] = &j;
    auto state_of_job = [&](long id) {
        auto it = by_id.find(id);
        return it == by_id.end() ? std::string() : slurm::state_of(*it->second);
    };

    // The controller's sandboxes: lost when Slurm says their worker failed,
    // stopped when their job ended (the worker's epilog terminated them).
    std::vector<std::shared_ptr<WorkerLink>> dropped;  // closed outside the lock
    std::vector<std::tuple<long, std::string, std::string, std::string>> to_adopt;
    {
        std::lock_guard<std::mutex> g(mu_);
        for (auto& [id, pl] : placed_) {
            std::string st = state_of_job(pl.job);
            auto f = failed.find(pl.node);
            if (pl.gone) {
                // Slurm answers for the node again and the job survived: back.
                if (pl.gone == SandboxState::lost && st == "RUNNING" && f == failed.end() &&
                    tries_[pl.job] < max_tries)
                    to_adopt.emplace_back(pl.job, id, pl.node, std::string());
                continue;
            }
            std::string job = "job " + std::to_string(pl.job);
            if (f != failed.end() || st == "NODE_FAIL") {
                pl.gone = SandboxState::lost;
                pl.why = "worker " + pl.node + " lost: " +
                         (f != failed.end() ? f->second : "Slurm ended its " + job + " NODE_FAIL");
            } else if (st == "COMPLETING" || st == "RUNNING") {
                pl.missing = 0;
                // Its srun ended under a job that runs (here: a slurmd of the
                // same host restarting ends them): a new link.
                if (st == "RUNNING" && pl.link && pl.link->exited() && tries_[pl.job] < max_tries)
                    to_adopt.emplace_back(pl.job, id, pl.node, std::string());
                continue;  // COMPLETING: its epilog runs, the final state follows
            } else if (st.empty() && ++pl.missing < missing_polls) {
                continue;  // a slurmctld that is starting answers with no jobs yet
            } else {
                pl.gone = SandboxState::stopped;
                pl.why = "its Slurm " + job + " ended" + (st.empty() ? "" : " (" + st + ")");
            }
            log().warn("controller: sandbox " + id + ": " + pl.why);
            dropped.push_back(std::move(pl.link));
        }
    }
    if (!dropped.empty()) replace_gone_members();
    dropped.clear();

    // Jobs of ours that no sandbox of the controller holds.
    const long now_s = static_cast<long>(std::time(nullptr));
    std::vector<std::pair<long, std::string>> to_cancel;
    std::set<long> arrays_to_end;                     // reservations no create uses
    std::vector<std::pair<long, long>> slots_to_end;  // (array, task)
    {
        std::lock_guard<std::mutex> g(mu_);
        // A job the controller is ending (its sandbox removed a moment ago,
        // maybe after this listing) is neither adopted nor cancelled again;
        // it is forgotten once Slurm no longer lists it.
        std::set<long> listed;
        for (const json& j : jobs) listed.insert(job_id(j));
        if (!jobs.empty())
            for (auto it = ending_.begin(); it != ending_.end();)
                it = listed.count(*it) ? std::next(it) : ending_.erase(it);
        std::set<long> held = ending_;
        for (const auto& [id, pl] : placed_) held.insert(pl.job);
        std::set<long> arrays_in_use;  // a slot of theirs holds a sandbox or is being placed
        for (const json& j : jobs)
            if (slurm::array_of(j) && (!slurm::sandbox_of(j).empty() || held.count(job_id(j)) ||
                                       in_flight_.count(job_id(j))))
                arrays_in_use.insert(slurm::array_of(j));
        for (const json& j : jobs) {
            long id = job_id(j);
            std::string st = slurm::state_of(j), sandbox = slurm::sandbox_of(j),
                        node = j.value("nodes", std::string());
            if (!slurm::is_ours(j) || held.count(id) || in_flight_.count(id)) continue;
            if (long array = slurm::array_of(j);
                sandbox.empty() && array && j.value("name", std::string()) == instance_) {
                // A reservation's slot Slurm started for a create that has
                // not come. With no slot of its array in use, whoever
                // reserved it is gone: the array ends; else only this slot.
                if (st == "RUNNING" && now_s - j.value("start_time", 0L) > unnamed_grace_s) {
                    if (arrays_in_use.count(array))
                        slots_to_end.emplace_back(array, slurm::task_of(j));
                    else
                        arrays_to_end.insert(array);
                }
                continue;
            }
            if (sandbox.empty()) {
                // A create's job before its sandbox was named: of a controller
                // that is gone (its create died with it), or left by a create
                // of this one that no longer runs.
                bool before = j.value("name", std::string()) != instance_;
                bool stale = st == "RUNNING" && now_s - j.value("start_time", 0L) > unnamed_grace_s;
                if ((st == "RUNNING" || st == "PENDING") && (before || stale))
                    to_cancel.emplace_back(id, "a create that did not finish");
            } else if (st == "RUNNING" && tries_[id] < max_tries) {
                to_adopt.emplace_back(id, sandbox, node, slurm::user_of(j));
            } else if (st == "NODE_FAIL" && first) {
                Placed p;
                p.id = sandbox;
                p.job = id;
                p.node = node;
                p.owner = owner_of({}, slurm::user_of(j));
                p.view.record.id = sandbox;
                p.gone = SandboxState::lost;
                p.why = "worker " + node + " lost: Slurm ended its job " + std::to_string(id) +
                        " NODE_FAIL";
                placed_[sandbox] = std::move(p);
            }
        }
    }
    for (const auto& [job, why] : to_cancel) {
        log().warn("controller: cancelling job " + std::to_string(job) + ": " + why);
        slurm::cancel(job);
    }
    for (long array : arrays_to_end) {
        log().warn("controller: ending job array " + std::to_string(array) +
                   ": Slurm runs its slots and no create comes for them");
        slurm::cancel(array);
    }
    for (const auto& [array, task] : slots_to_end) {
        log().warn("controller: ending slot " + std::to_string(task) + " of job array " +
                   std::to_string(array) + ": no create came for it");
        slurm::cancel_task(array, task);
    }
    for (const auto& [job, id, node, owner] : to_adopt) {
        if (!adopt(job, id, node, owner)) ++tries_[job];
    }
    if (first || ++polls_ % reap_every == 0) reap_workers(jobs);
}

// A worker's sandboxes whose job Slurm no longer runs (their job ended while
// no epilog could run, or before it was named) are terminated, audit
// barrier first, and removed. Only workers the controller reaches: those
// with a running sandbox of its own.
void ControllerApi::reap_workers(const std::vector<json>& jobs) {
    std::set<std::string> live;
    for (const json& j : jobs) {
        std::string st = slurm::state_of(j);
        if (st == "RUNNING" || st == "PENDING") live.insert(std::to_string(job_id(j)));
    }
    // Only nodes this answer of Slurm's shows running a job of the
    // controller's: an answer without them (a slurmctld starting) reaps nothing.
    std::set<std::string> seen;
    for (const json& j : jobs)
        if (slurm::state_of(j) == "RUNNING") seen.insert(j.value("nodes", std::string()));
    std::map<std::string, std::shared_ptr<WorkerLink>> by_node;
    {
        std::lock_guard<std::mutex> g(mu_);
        for (const auto& [id, pl] : placed_)
            if (!pl.gone && seen.count(pl.node)) by_node.emplace(pl.node, pl.link);
    }
    for (const auto& [node, link] : by_node) {
        try {
            api::LsParams q;
            q.filter = {std::string("label=") + slurm::job_label};
            for (const auto& v : link->api().ls(q).sandboxes) {
                const auto& labels = v.record.spec.labels;
                auto l = labels.find(slurm::job_label);
                if (l == labels.end() || live.count(l->second)) continue;
                log().warn("controller: sandbox " + v.record.id + " on " + node + ": its job " +
                           l->second + " no longer runs; removing it");
                if (v.live == SandboxState::running) link->api().terminate({v.record.id});
                link->api().rm({v.record.id});
            }
        } catch (const std::exception& e) {
            log().warn("controller: reaping on " + node + ": " + e.what());
        }
    }
}

bool ControllerApi::adopt(long job, const std::string& id, const std::string& node,
                          const std::string& job_user) {
    Placed p;
    p.id = id;
    p.job = job;
    p.node = node;
    try {
        p.link = std::make_shared<WorkerLink>(c_, job, node);
        p.view = p.link->api().inspect({id});
        p.view.worker = node;
        p.name = p.view.record.name;
        p.owner = owner_of(p.view, job_user);
    } catch (const Error& e) {
        if (e.code() != ErrorCode::not_found) {
            log().warn("controller: job " + std::to_string(job) + " (sandbox " + id +
                       "): " + e.what());
            return false;
        }
        log().warn("controller: cancelling job " + std::to_string(job) + ": worker " + node +
                   " does not know its sandbox " + id);
        slurm::cancel(job);
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

void ControllerApi::link_failed(const Placed& pl, const Error& e) {
    try {
        watch_once();
    } catch (const std::exception& w) {
        log().warn(std::string("controller: reading Slurm: ") + w.what());
    }
    Placed now = route(pl.id).first;
    require_live(now);
    // Slurm still runs the job on a live node: only the link broke (its
    // srun or serve ended). A new one serves the next call; this one's
    // outcome is unknown, so it fails.
    if (now.link == pl.link) adopt(pl.job, pl.id, pl.node, {});
    throw e;
}

}  // namespace sandweave::weave
