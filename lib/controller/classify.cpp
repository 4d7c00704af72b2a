// The watcher's decisions (lib/controller/classify.hpp).
#include "lib/controller/classify.hpp"

namespace sandweave::controller {

namespace {

using Kind = Decision::Kind;

Decision about(Kind k, const HeldSandbox& s, std::string why = "") {
    Decision d{k, s.id, s.job, s.node, 0, -1, 0, std::move(why), ""};
    return d;
}

// Slurm keeps running a job that is RUNNING, finishing its epilog
// (COMPLETING) or waiting for its node to boot (CONFIGURING).
bool alive(const std::string& st) {
    return st == "RUNNING" || st == "COMPLETING" || st == "CONFIGURING";
}

// A job that ended other than by its node failing (or is finishing its
// epilog): its worker terminated the sandbox and keeps it for its retention.
bool ended(const std::string& st) {
    for (const char* s : {"COMPLETING", "COMPLETED", "CANCELLED", "TIMEOUT", "FAILED",
                          "OUT_OF_MEMORY", "DEADLINE", "PREEMPTED", "BOOT_FAIL"})
        if (st == s) return true;
    return false;
}

}  // namespace

std::vector<Decision> classify(const Observation& seen, const Holdings& held) {
    std::vector<Decision> out;
    std::map<long, const slurm::Job*> by_id;
    for (const auto& j : seen.jobs) by_id[j.id] = &j;
    std::map<std::string, std::string> failed;  // node -> why Slurm counts it failed
    for (const auto& n : seen.nodes)
        if (auto why = slurm::node_failure(n); !why.empty()) failed[n.name] = why;
    auto tries = [&](long job) {
        auto it = held.tries.find(job);
        return it == held.tries.end() ? 0 : it->second;
    };

    // The controller's sandboxes: lost when Slurm says their worker failed,
    // stopped when their job ended (the worker's epilog terminated them).
    for (const HeldSandbox& s : held.sandboxes) {
        auto j = by_id.find(s.job);
        std::string st = j == by_id.end() ? std::string() : j->second->state;
        auto f = failed.find(s.node);
        if (s.gone) {
            // Slurm answers for the node again and the job survived: back.
            if (s.gone == SandboxState::lost && st == "RUNNING" && f == failed.end() &&
                tries(s.job) < max_tries)
                out.push_back(about(Kind::reconnect, s));
            continue;
        }
        std::string job = "job " + std::to_string(s.job);
        if (f != failed.end() || st == "NODE_FAIL") {
            out.push_back(about(
                Kind::lost, s,
                "worker " + s.node + " lost: " +
                    (f != failed.end() ? f->second : "Slurm ended its " + job + " NODE_FAIL")));
        } else if (alive(st)) {
            // Its srun ended under a job that runs (here: a slurmd of the
            // same host restarting ends them): a new link. COMPLETING: its
            // epilog runs, the final state follows.
            // Past max_tries, now and then: a worker daemon restarted.
            if (st == "RUNNING" && s.link_down &&
                (tries(s.job) < max_tries || held.retry_unreachable))
                out.push_back(about(Kind::reconnect, s));
        } else if (st.empty() && s.missing + 1 < missing_polls) {
            Decision d = about(Kind::unlisted, s);
            d.count = s.missing + 1;
            out.push_back(d);
        } else {
            out.push_back(
                about(Kind::ended, s,
                      "its Slurm " + job + " ended" + (st.empty() ? "" : " (" + st + ")")));
        }
    }

    // A job the controller is ending (its sandbox removed a moment ago,
    // maybe after this listing) is neither adopted nor cancelled again; it
    // is forgotten once Slurm no longer lists it (an empty answer, a
    // slurmctld starting, forgets nothing).
    if (!seen.jobs.empty())
        for (long job : held.ending)
            if (!by_id.count(job))
                out.push_back({Kind::forget_ending, "", job, "", 0, -1, 0, "", ""});
    std::set<long> holds = held.ending;
    for (const auto& s : held.sandboxes) holds.insert(s.job);
    auto taken = [&](long job) { return holds.count(job) || held.in_flight.count(job); };

    // Jobs of ours that no sandbox of the controller holds.
    std::set<long> arrays_in_use;  // a slot of theirs holds a sandbox or is being placed
    for (const auto& j : seen.jobs)
        if (j.array && slurm::controller_of(j) == held.controller &&
            (!slurm::sandbox_of(j).empty() || taken(j.id)))
            arrays_in_use.insert(j.array);
    std::set<long> arrays_ended;
    for (const auto& j : seen.jobs) {
        if (slurm::controller_of(j) != held.controller || taken(j.id)) continue;
        const std::string sandbox = slurm::sandbox_of(j);
        const bool stale = j.state == "RUNNING" && held.now_s - j.start_time > unnamed_grace_s;
        if (sandbox.empty() && j.array && j.name == held.instance) {
            // A reservation's slot Slurm started for a create that has not
            // come. With no slot of its array in use, whoever reserved it is
            // gone: the array ends; else only this slot.
            if (!stale) continue;
            if (arrays_in_use.count(j.array))
                out.push_back({Kind::end_slot, "", j.id, j.nodes, j.array, j.task, 0,
                               "no create came for it", ""});
            else if (arrays_ended.insert(j.array).second)
                out.push_back({Kind::end_array, "", j.array, "", j.array, -1, 0,
                               "Slurm runs its slots and no create comes for them", ""});
            continue;
        }
        if (sandbox.empty()) {
            // A create's job before its sandbox was named: of a process of
            // this controller that is gone (its create died with it), or
            // left by a create of this one that no longer runs.
            bool before = j.name != held.instance;
            if ((j.state == "RUNNING" || j.state == "PENDING") && (before || stale))
                out.push_back({Kind::cancel, "", j.id, j.nodes, 0, -1, 0,
                               "a create that did not finish", ""});
        } else if (j.state == "RUNNING" && tries(j.id) < max_tries) {
            out.push_back({Kind::reconnect, sandbox, j.id, j.nodes, 0, -1, 0, "", j.user});
        } else if (j.state == "NODE_FAIL" && held.first) {
            out.push_back({Kind::list_lost, sandbox, j.id, j.nodes, 0, -1, 0,
                           "worker " + j.nodes + " lost: Slurm ended its job " +
                               std::to_string(j.id) + " NODE_FAIL",
                           j.user});
        } else if (ended(j.state) && held.first && !j.nodes.empty()) {
            // Ended before this controller started: listed, so that its
            // export is still fetched from the worker.
            out.push_back({Kind::list_ended, sandbox, j.id, j.nodes, 0, -1, 0,
                           "its Slurm job " + std::to_string(j.id) + " ended (" + j.state + ")",
                           j.user});
        }
    }

    // Only nodes this answer of Slurm's shows running a job the controller
    // holds or is taking back (at its start it holds nothing yet): an
    // answer without them (a slurmctld starting) reaps nothing.
    if (held.reap) {
        std::set<std::string> running;
        for (const auto& j : seen.jobs)
            if (j.state == "RUNNING") running.insert(j.nodes);
        std::vector<std::string> candidates;
        for (const auto& s : held.sandboxes)
            if (!s.gone) candidates.push_back(s.node);
        for (const auto& d : out)
            if (d.kind == Kind::reconnect) candidates.push_back(d.node);
        std::set<std::string> nodes;
        for (const auto& n : candidates)
            if (running.count(n) && nodes.insert(n).second)
                out.push_back({Kind::reap, "", 0, n, 0, -1, 0, "", ""});
    }
    return out;
}

std::set<std::string> live_jobs(const Observation& seen) {
    std::set<std::string> live;
    for (const auto& j : seen.jobs)
        if (j.state == "RUNNING" || j.state == "PENDING" || j.state == "COMPLETING" ||
            j.state == "CONFIGURING")
            live.insert(std::to_string(j.id));
    return live;
}

}  // namespace sandweave::controller
