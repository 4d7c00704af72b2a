// The watcher's decisions (lib/controller/classify.hpp) on recorded Slurm output
// of 22.05 and 24.11 (tests/data/slurm/README.md): every kind of decision,
// and none about another controller's jobs.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "lib/controller/classify.hpp"
#include "lib/core/fsutil.hpp"

using namespace sandweave;
using namespace sandweave::controller;

namespace {

std::string slurm_data(const std::string& name) {
    return read_file(std::string(SANDWEAVE_TEST_DATA) + "/slurm/" + name);
}

Observation seen(const std::string& squeue, const std::string& sinfo) {
    return {slurm::parse_squeue(slurm_data(squeue)), slurm::parse_sinfo(slurm_data(sinfo))};
}

// The recording's controller and the name its jobs had before they were named.
Holdings held_by_recorder() {
    Holdings h;
    h.controller = "c0ffee01";
    h.instance = "sandweave-0a1b2c3d";
    h.now_s = 1796592527 + 5;  // the array's slots started 5 s ago
    return h;
}

HeldSandbox sandbox(const std::string& id, long job, const std::string& node) {
    HeldSandbox s;
    s.id = id;
    s.job = job;
    s.node = node;
    return s;
}

const char* kind_name(Decision::Kind k) {
    switch (k) {
        case Decision::Kind::lost:
            return "lost";
        case Decision::Kind::ended:
            return "ended";
        case Decision::Kind::unlisted:
            return "unlisted";
        case Decision::Kind::reconnect:
            return "reconnect";
        case Decision::Kind::list_lost:
            return "list_lost";
        case Decision::Kind::list_ended:
            return "list_ended";
        case Decision::Kind::cancel:
            return "cancel";
        case Decision::Kind::end_array:
            return "end_array";
        case Decision::Kind::end_slot:
            return "end_slot";
        case Decision::Kind::forget_ending:
            return "forget_ending";
        case Decision::Kind::reap:
            return "reap";
    }
    return "?";
}

// Each decision as one line: kind, sandbox, job, node, then what applies.
std::vector<std::string> shown(const std::vector<Decision>& ds) {
    std::vector<std::string> out;
    for (const auto& d : ds) {
        std::string s = std::string(kind_name(d.kind)) + " " + d.sandbox + " " +
                        std::to_string(d.job) + " " + d.node;
        if (d.kind == Decision::Kind::end_slot || d.kind == Decision::Kind::end_array)
            s += " array " + std::to_string(d.array) + " task " + std::to_string(d.task);
        if (d.kind == Decision::Kind::unlisted) s += " count " + std::to_string(d.count);
        if (!d.why.empty()) s += ": " + d.why;
        out.push_back(s);
    }
    return out;
}

using Lines = std::vector<std::string>;

// Only the decisions about sandboxes the controller holds.
Lines about_held(const std::vector<Decision>& ds, const Holdings& h) {
    std::vector<Decision> mine;
    for (const auto& d : ds)
        for (const auto& s : h.sandboxes)
            if (d.sandbox == s.id) mine.push_back(d);
    return shown(mine);
}

}  // namespace

TEST_SUITE("weave classify") {
    TEST_CASE("22.05: a held sandbox whose job runs on a healthy node: nothing to do") {
        Holdings h = held_by_recorder();
        h.sandboxes = {sandbox("sbx-9f8e7d6c5b4a", 1, "w1")};
        CHECK(shown(classify(seen("22.05/squeue-running.json", "22.05/sinfo-idle.json"), h)) ==
              Lines{});
    }

    TEST_CASE(
        "22.05: lost when Slurm says its node is not responding, down, or the job NODE_FAIL") {
        Holdings h = held_by_recorder();
        h.sandboxes = {sandbox("sbx-a", 3, "w3"), sandbox("sbx-b", 1, "w1")};
        CHECK(about_held(classify(seen("22.05/squeue-not-responding.json",
                                       "22.05/sinfo-not-responding.json"),
                                  h),
                         h) == Lines{"lost sbx-a 3 w3: worker w3 lost: Slurm reports node w3 not "
                                     "responding"});
        CHECK(about_held(classify(seen("22.05/squeue-node-fail.json", "22.05/sinfo-down.json"), h),
                         h) ==
              Lines{"lost sbx-a 3 w3: worker w3 lost: Slurm reports node w3 down"});
        CHECK(about_held(classify(seen("22.05/squeue-node-fail.json", "22.05/sinfo-idle.json"), h),
                         h) ==
              Lines{"lost sbx-a 3 w3: worker w3 lost: Slurm ended its job 3 NODE_FAIL"});
        // Already lost: nothing more while its node stays down.
        h.sandboxes[0].gone = SandboxState::lost;
        CHECK(about_held(classify(seen("22.05/squeue-node-fail.json", "22.05/sinfo-down.json"), h),
                         h) == Lines{});
    }

    TEST_CASE("22.05: ended when its job ended otherwise, or Slurm stopped listing it") {
        Holdings h = held_by_recorder();
        h.sandboxes = {sandbox("sbx-c", 5, "w2"), sandbox("sbx-d", 999, "w2")};
        auto s = seen("22.05/squeue-cancelled.json", "22.05/sinfo-idle.json");
        CHECK(about_held(classify(s, h), h) ==
              Lines{"ended sbx-c 5 w2: its Slurm job 5 ended (CANCELLED)",
                    "unlisted sbx-d 999 w2 count 1"});
        h.sandboxes[1].missing = missing_polls - 1;
        CHECK(about_held(classify(s, h), h).at(1) == "ended sbx-d 999 w2: its Slurm job 999 ended");
        // A slurmctld that is starting lists no jobs: counted, not ended, and
        // no job the controller is ending is forgotten.
        h.sandboxes[1].missing = 0;
        h.ending = {5};
        Observation empty{{}, s.nodes};
        CHECK(shown(classify(empty, h)) ==
              Lines{"unlisted sbx-c 5 w2 count 1", "unlisted sbx-d 999 w2 count 1"});
    }

    TEST_CASE("22.05: reconnect a running job's sandbox whose link broke, or that came back") {
        Holdings h = held_by_recorder();
        h.sandboxes = {sandbox("sbx-9f8e7d6c5b4a", 1, "w1")};
        h.sandboxes[0].link_down = true;
        auto s = seen("22.05/squeue-running.json", "22.05/sinfo-idle.json");
        CHECK(shown(classify(s, h)) == Lines{"reconnect sbx-9f8e7d6c5b4a 1 w1"});
        h.tries[1] = max_tries;  // given up on
        CHECK(shown(classify(s, h)) == Lines{});
        h.tries.clear();
        h.sandboxes[0].link_down = false;
        h.sandboxes[0].gone = SandboxState::lost;  // its node answers again, its job runs
        CHECK(shown(classify(s, h)) == Lines{"reconnect sbx-9f8e7d6c5b4a 1 w1"});
        h.sandboxes[0].gone = SandboxState::stopped;  // an ended one does not come back
        CHECK(shown(classify(s, h)) == Lines{});
    }

    TEST_CASE("22.05: a restarted controller takes back its named jobs, cancels its unnamed ones") {
        Holdings h = held_by_recorder();
        h.instance = "sandweave-ffffffff";  // a new process of the same controller
        CHECK(shown(classify(seen("22.05/squeue-running.json", "22.05/sinfo-idle.json"), h)) ==
              Lines{"reconnect sbx-9f8e7d6c5b4a 1 w1", "cancel  4 w2: a create that did not finish",
                    "cancel  5 w2: a create that did not finish",
                    "cancel  2 : a create that did not finish",
                    "cancel  6 : a create that did not finish"});
    }

    TEST_CASE("two controllers on one cluster: none of the other's jobs is touched") {
        Holdings h = held_by_recorder();
        h.controller = "beef02";
        h.instance = "sandweave-ffffffff";
        h.now_s += 3600;
        h.first = true;
        for (const auto& [q, i] :
             {std::pair{"22.05/squeue-running.json", "22.05/sinfo-idle.json"},
              std::pair{"22.05/squeue-node-fail.json", "22.05/sinfo-down.json"},
              std::pair{"22.05/squeue-cancelled.json", "22.05/sinfo-idle.json"}})
            CHECK(shown(classify(seen(q, i), h)) == Lines{});
    }

    TEST_CASE("22.05: a reservation's slots Slurm started with no create coming end") {
        Holdings h = held_by_recorder();
        h.sandboxes = {sandbox("sbx-9f8e7d6c5b4a", 1, "w1")};
        auto s = seen("22.05/squeue-running.json", "22.05/sinfo-idle.json");
        CHECK(shown(classify(s, h)) == Lines{});  // within the grace
        h.now_s += unnamed_grace_s;
        // No slot of the array in use: the whole array, once.
        CHECK(shown(classify(s, h)) ==
              Lines{"end_array  2  array 2 task -1: Slurm runs its slots and no create comes "
                    "for them"});
        // One slot is being placed: only the other.
        h.in_flight = {4};
        CHECK(shown(classify(s, h)) ==
              Lines{"end_slot  5 w2 array 2 task 1: no create came for it"});
    }

    TEST_CASE("22.05: a stale unnamed job of this process is cancelled") {
        Holdings h = held_by_recorder();
        auto s = seen("22.05/squeue-running.json", "22.05/sinfo-idle.json");
        for (auto& j : s.jobs)
            if (j.id == 1) j.comment = "sandweave/c0ffee01:", j.name = h.instance;
        h.sandboxes = {};
        CHECK(shown(classify(s, h)) == Lines{});
        h.now_s = 1796592526 + unnamed_grace_s + 1;
        h.in_flight = {4, 5};
        CHECK(shown(classify(s, h)) == Lines{"cancel  1 w1: a create that did not finish"});
        h.in_flight.insert(1);  // a create still holds it
        CHECK(shown(classify(s, h)) == Lines{});
    }

    TEST_CASE("22.05: at the start, a named job that ended NODE_FAIL is listed as lost") {
        Holdings h = held_by_recorder();
        auto s = seen("22.05/squeue-node-fail.json", "22.05/sinfo-down.json");
        for (auto& j : s.jobs)
            if (j.id == 3) j.comment = "sandweave/c0ffee01:sbx-lost1";
        h.sandboxes = {sandbox("sbx-9f8e7d6c5b4a", 1, "w1")};
        h.in_flight = {4, 9};  // the array's running slots are being placed
        h.first = true;
        // Jobs 10 and 7 (array 7's tasks, requeued after the node failure)
        // carry this controller's mark but were never named: a create of a
        // process of it that is gone.
        const Lines requeued = {"cancel  10 : a create that did not finish",
                                "cancel  7 : a create that did not finish"};
        CHECK(shown(classify(s, h)) ==
              Lines{"list_lost sbx-lost1 3 w3: worker w3 lost: Slurm ended its job 3 NODE_FAIL",
                    requeued[0], requeued[1]});
        h.first = false;
        CHECK(shown(classify(s, h)) == requeued);
    }

    TEST_CASE("22.05: at the start, a named job that ended otherwise is listed as stopped") {
        Holdings h = held_by_recorder();
        auto s = seen("22.05/squeue-cancelled.json", "22.05/sinfo-idle.json");
        for (auto& j : s.jobs)
            if (j.id == 5) j.comment = "sandweave/c0ffee01:sbx-ended1", j.array = 0, j.task = -1;
        h.sandboxes = {sandbox("sbx-9f8e7d6c5b4a", 1, "w1")};
        h.in_flight = {4, 9, 10, 7, 8};
        h.first = true;
        CHECK(shown(classify(s, h)) ==
              Lines{"list_ended sbx-ended1 5 w2: its Slurm job 5 ended (CANCELLED)"});
        // Only at the start: later, a job the controller does not hold that
        // ended was removed by it (or by another process of it, gone).
        h.first = false;
        CHECK(shown(classify(s, h)) == Lines{});
        // Another controller's ended job is not listed.
        for (auto& j : s.jobs)
            if (j.id == 5) j.comment = "sandweave/deadbeef:sbx-ended1";
        h.first = true;
        CHECK(shown(classify(s, h)) == Lines{});
    }

    TEST_CASE("22.05: removed jobs are forgotten once Slurm no longer lists them") {
        Holdings h = held_by_recorder();
        h.sandboxes = {sandbox("sbx-9f8e7d6c5b4a", 1, "w1")};
        h.ending = {5, 999};
        CHECK(shown(classify(seen("22.05/squeue-running.json", "22.05/sinfo-idle.json"), h)) ==
              Lines{"forget_ending  999 "});
    }

    TEST_CASE("22.05: reaping asks each node running a held sandbox, once") {
        Holdings h = held_by_recorder();
        h.reap = true;
        h.sandboxes = {sandbox("sbx-9f8e7d6c5b4a", 1, "w1"), sandbox("sbx-e", 1, "w1"),
                       sandbox("sbx-f", 3, "w3")};
        h.sandboxes[2].gone = SandboxState::stopped;
        auto s = seen("22.05/squeue-running.json", "22.05/sinfo-idle.json");
        CHECK(shown(classify(s, h)) == Lines{"reap  0 w1"});
        // At the start it holds nothing yet: the nodes of the sandboxes it
        // takes back.
        h.sandboxes.clear();
        h.first = true;
        h.in_flight = {4, 5};
        h.instance = "sandweave-ffffffff";
        CHECK(shown(classify(s, h)) ==
              Lines{"reconnect sbx-9f8e7d6c5b4a 1 w1", "cancel  2 : a create that did not finish",
                    "cancel  6 : a create that did not finish", "reap  0 w1"});
        auto live = live_jobs(seen("22.05/squeue-node-fail.json", "22.05/sinfo-down.json"));
        CHECK(live == std::set<std::string>{"1", "2", "4", "6", "7", "9", "10"});
    }

    TEST_CASE(
        "24.11 on this project's cluster: lost when its node fails, though Slurm drops the job") {
        Holdings h = held_by_recorder();
        h.sandboxes = {sandbox("sbx-1a2b3c4d5e6f", 1, "w1"), sandbox("sbx-g", 3, "w3")};
        h.in_flight = {4, 5};
        auto ok = seen("24.11/squeue-running.json", "24.11/sinfo-idle.json");
        CHECK(shown(classify(ok, h)) == Lines{});
        CHECK(shown(classify(seen("24.11/squeue-running.json", "24.11/sinfo-not-responding.json"),
                             h)) ==
              Lines{"lost sbx-g 3 w3: worker w3 lost: Slurm reports node w3 not responding"});
        CHECK(shown(classify(seen("24.11/squeue-node-failed.json", "24.11/sinfo-down.json"), h)) ==
              Lines{"lost sbx-g 3 w3: worker w3 lost: Slurm reports node w3 down"});
        h.controller = "beef02";  // another controller's view: none of these jobs is its
        h.sandboxes.clear();
        h.now_s += 3600;
        CHECK(shown(classify(ok, h)) == Lines{});
    }

    TEST_CASE("24.11: the same decisions from its arrays and {set, number} objects") {
        auto s = seen("24.11/squeue.json", "24.11/sinfo.json");
        for (auto& j : s.jobs)
            if (j.id == 1) j.comment = "sandweave/c0ffee01:sbx-t";
        Holdings h = held_by_recorder();
        h.now_s = 1796592157 + 5;
        CHECK(shown(classify(s, h)) == Lines{"reconnect sbx-t 1 t1"});

        h.sandboxes = {sandbox("sbx-t", 1, "t1")};
        CHECK(shown(classify(s, h)) == Lines{});
        h.sandboxes[0].link_down = true;
        CHECK(shown(classify(s, h)) == Lines{"reconnect sbx-t 1 t1"});
        h.sandboxes[0].link_down = false;

        // Its node stops answering (the state array gains a flag).
        auto sinfo = nlohmann::json::parse(slurm_data("24.11/sinfo.json"));
        sinfo["sinfo"][0]["node"]["state"].push_back("NOT_RESPONDING");
        Observation nr{s.jobs, slurm::parse_sinfo(sinfo.dump())};
        CHECK(shown(classify(nr, h)) ==
              Lines{"lost sbx-t 1 t1: worker t1 lost: Slurm reports node t1 not responding"});

        // Cancelled: COMPLETING (the epilog runs) keeps it, the end ends it.
        auto squeue = nlohmann::json::parse(slurm_data("24.11/squeue.json"));
        squeue["jobs"][0]["job_state"] = {"CANCELLED", "COMPLETING"};
        Observation completing{slurm::parse_squeue(squeue.dump()), s.nodes};
        CHECK(shown(classify(completing, h)) == Lines{});
        squeue["jobs"][0]["job_state"] = {"CANCELLED"};
        Observation cancelled{slurm::parse_squeue(squeue.dump()), s.nodes};
        CHECK(shown(classify(cancelled, h)) ==
              Lines{"ended sbx-t 1 t1: its Slurm job 1 ended (CANCELLED)"});
    }
}
