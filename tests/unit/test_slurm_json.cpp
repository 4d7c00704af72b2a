// Slurm's output read into plain structs (lib/controller/slurm_json.hpp), on real
// output of Slurm 22.05 and 24.11 (tests/data/slurm/README.md says how each
// file was taken).
#include <doctest/doctest.h>

#include <algorithm>

#include "lib/controller/slurm_json.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"

using namespace sandweave;
using namespace sandweave::controller::slurm;

namespace {

std::string slurm_data(const std::string& name) {
    return read_file(std::string(SANDWEAVE_TEST_DATA) + "/slurm/" + name);
}

const Job& job(const std::vector<Job>& jobs, long id) {
    auto it = std::find_if(jobs.begin(), jobs.end(), [&](const Job& j) { return j.id == id; });
    REQUIRE(it != jobs.end());
    return *it;
}

const Node& node(const std::vector<Node>& nodes, const std::string& name) {
    auto it =
        std::find_if(nodes.begin(), nodes.end(), [&](const Node& n) { return n.name == name; });
    REQUIRE(it != nodes.end());
    return *it;
}

}  // namespace

TEST_SUITE("slurm output") {
    TEST_CASE("22.05 squeue --json: a named allocation, an array's tasks and pending record") {
        auto jobs = parse_squeue(slurm_data("22.05/squeue-running.json"));
        CHECK(jobs.size() == 6);
        const Job& a = job(jobs, 1);
        CHECK(a.state == "RUNNING");
        CHECK(a.nodes == "w1");
        CHECK(a.name == "sbx-9f8e7d6c5b4a");
        CHECK(a.comment == "sandweave/c0ffee01:sbx-9f8e7d6c5b4a");
        CHECK(a.user == "root");
        CHECK(a.array == 0);
        CHECK(a.task == -1);
        CHECK(a.start_time == 1796592526);
        CHECK(controller_of(a) == "c0ffee01");
        CHECK(sandbox_of(a) == "sbx-9f8e7d6c5b4a");

        const Job& t1 = job(jobs, 5);
        CHECK(t1.array == 2);
        CHECK(t1.task == 1);
        CHECK(t1.state == "RUNNING");
        CHECK(sandbox_of(t1).empty());
        CHECK(rest_of(t1) == ":array:demo");

        const Job& record = job(jobs, 2);
        CHECK(record.state == "PENDING");
        CHECK(record.reason == "JobArrayTaskLimit");
        CHECK(record.array == 2);
        CHECK(record.task == -1);
        CHECK(record.array_tasks == "2-6%2");
        CHECK(record.nodes.empty());

        const Job& pending = job(jobs, 6);
        CHECK(pending.state == "PENDING");
        CHECK(pending.reason == "Resources");
        CHECK(pending.start_time == 0);
        CHECK(rest_of(pending) == ":pool1");

        const Job& plain = job(jobs, 3);
        CHECK(controller_of(plain).empty());
        CHECK(sandbox_of(plain).empty());
    }

    TEST_CASE("22.05 after a node failure: NODE_FAIL, and Slurm requeues what it may") {
        auto jobs = parse_squeue(slurm_data("22.05/squeue-node-fail.json"));
        CHECK(job(jobs, 3).state == "NODE_FAIL");
        CHECK(job(jobs, 3).reason == "NodeDown");
        CHECK(job(jobs, 8).state == "NODE_FAIL");  // --no-requeue: it ends
        CHECK(job(jobs, 8).array == 8);
        CHECK(job(jobs, 8).task == 0);
        CHECK(job(jobs, 10).state == "PENDING");  // requeued: it would start elsewhere
        CHECK(job(jobs, 10).array == 7);
        CHECK(job(jobs, 5).state == "CANCELLED");

        auto cancelled = parse_squeue(slurm_data("22.05/squeue-cancelled.json"));
        CHECK(job(cancelled, 5).state == "CANCELLED");
        CHECK(job(cancelled, 5).task == 1);
    }

    TEST_CASE("22.05 sinfo --json: idle, not responding, down") {
        auto idle = parse_sinfo(slurm_data("22.05/sinfo-idle.json"));
        REQUIRE(idle.size() == 3);
        CHECK(node(idle, "w1").state == "mixed");
        CHECK(node(idle, "w1").gres == "sbx:4");
        CHECK(node(idle, "w2").gres_used == "sbx:2");
        for (const auto& n : idle) CHECK(node_failure(n).empty());

        auto nr = parse_sinfo(slurm_data("22.05/sinfo-not-responding.json"));
        CHECK(node(nr, "w3").state == "mixed");
        CHECK(node(nr, "w3").flags.count("NOT_RESPONDING") == 1);
        CHECK(node_failure(node(nr, "w3")) == "Slurm reports node w3 not responding");
        CHECK(node_failure(node(nr, "w1")).empty());

        auto down = parse_sinfo(slurm_data("22.05/sinfo-down.json"));
        CHECK(node(down, "w3").state == "down");
        CHECK(node(down, "w3").reason == "Not responding");
        CHECK(node_failure(node(down, "w3")) == "Slurm reports node w3 down");
    }

    TEST_CASE("24.11 squeue --json: job_state arrays, numbers as {set, infinite, number}") {
        auto jobs = parse_squeue(slurm_data("24.11/squeue.json"));
        REQUIRE(jobs.size() == 2);
        const Job& a = job(jobs, 1);
        CHECK(a.state == "RUNNING");
        CHECK(a.nodes == "t1");
        CHECK(a.name == "sw-aaaaaaaaaaaa");
        CHECK(a.comment == "sandweave:test");
        CHECK(a.array == 0);
        CHECK(a.task == -1);  // array_task_id.set false
        CHECK(a.start_time == 1796592157);
        CHECK(controller_of(a).empty());  // not the controller's mark

        const Job& record = job(jobs, 2);
        CHECK(record.state == "PENDING");
        CHECK(record.reason == "Resources");
        CHECK(record.array == 2);
        CHECK(record.task == -1);
        CHECK(record.array_tasks == "0-3%2");
        CHECK(record.start_time == 0);

        // scontrol show job --json has the same job records.
        auto shown = parse_squeue(slurm_data("24.11/scontrol-show-job.json"));
        REQUIRE(shown.size() == 1);
        CHECK(shown[0].state == "RUNNING");
        CHECK(shown[0].start_time == 1796592157);
    }

    TEST_CASE("24.11 sinfo --json: groups of nodes with a state array") {
        auto nodes = parse_sinfo(slurm_data("24.11/sinfo.json"));
        REQUIRE(nodes.size() == 1);
        CHECK(nodes[0].name == "t1");
        CHECK(nodes[0].state == "mixed");
        CHECK(nodes[0].flags.empty());
        CHECK(nodes[0].gres == "sbx:4");
        CHECK(nodes[0].gres_used == "sbx:1");
        CHECK(node_failure(nodes[0]).empty());
    }

    TEST_CASE("24.11 on this project's cluster: array tasks, node groups, a failed node") {
        auto jobs = parse_squeue(slurm_data("24.11/squeue-running.json"));
        REQUIRE(jobs.size() == 5);
        CHECK(job(jobs, 1).comment == "sandweave/c0ffee01:sbx-1a2b3c4d5e6f");
        CHECK(sandbox_of(job(jobs, 1)) == "sbx-1a2b3c4d5e6f");
        CHECK(job(jobs, 5).array == 2);
        CHECK(job(jobs, 5).task == 1);
        CHECK(job(jobs, 5).state == "RUNNING");
        CHECK(job(jobs, 2).task == -1);
        CHECK(job(jobs, 2).array_tasks == "2-6%2");
        CHECK(job(jobs, 2).reason == "JobArrayTaskLimit");
        // 24.11 drops an allocation whose node failed at once (22.05 keeps
        // it NODE_FAIL for MinJobAge): the node's state says why.
        CHECK(parse_squeue(slurm_data("24.11/squeue-node-failed.json")).size() == 4);

        auto idle = parse_sinfo(slurm_data("24.11/sinfo-idle.json"));  // w1 and w3 in one group
        REQUIRE(idle.size() == 3);
        CHECK(node(idle, "w3").state == "mixed");
        CHECK(node(idle, "w2").gres_used == "sbx:2");
        auto nr = parse_sinfo(slurm_data("24.11/sinfo-not-responding.json"));
        CHECK(node_failure(node(nr, "w3")) == "Slurm reports node w3 not responding");
        CHECK(node_failure(node(nr, "w1")).empty());
        auto down = parse_sinfo(slurm_data("24.11/sinfo-down.json"));
        CHECK(node(down, "w3").state == "down");
        CHECK(node(down, "w3").reason == "Not responding");
        CHECK(node_failure(node(down, "w3")) == "Slurm reports node w3 down");

        auto task = parse_scontrol_job(slurm_data("24.11/scontrol-show-job-array-task.txt"));
        REQUIRE(task);
        CHECK(task->array == 2);
        CHECK(task->task == 0);
        CHECK(task->state == "RUNNING");
        CHECK(task->nodes == "w2");
        auto queued = parse_scontrol_job(slurm_data("24.11/scontrol-show-job-array-pending.txt"));
        REQUIRE(queued);
        CHECK(queued->state == "PENDING");
        CHECK(queued->nodes.empty());
        CHECK(parse_scontrol_job(slurm_data("24.11/scontrol-show-job-running.txt"))->nodes == "w1");
        CHECK(parse_sbatch(slurm_data("24.11/sbatch-parsable.out")) == 2);
        CHECK(parse_salloc_grant(slurm_data("24.11/salloc-granted.err")) == 3);
    }

    TEST_CASE("a state array's flags and base, in the order 22.05 prints one word") {
        auto one = [](const std::string& states) {
            return parse_squeue(R"({"jobs":[{"job_id":7,"job_state":)" + states + "}]}")
                .at(0)
                .state;
        };
        CHECK(one(R"(["CANCELLED","COMPLETING"])") == "COMPLETING");
        CHECK(one(R"(["RUNNING","CONFIGURING"])") == "CONFIGURING");
        CHECK(one(R"(["NODE_FAIL"])") == "NODE_FAIL");
        CHECK(one(R"("TIMEOUT")") == "TIMEOUT");
        CHECK(one("42").empty());

        auto n = parse_sinfo(
            R"({"sinfo":[{"node":{"state":["IDLE","NOT_RESPONDING"]},"nodes":{"nodes":["a","b"]}},)"
            R"({"node":{"state":["DOWN","NOT_RESPONDING"]},"nodes":{"nodes":["c","a"]}}]})");
        REQUIRE(n.size() == 3);  // a node listed twice (two partitions) once
        CHECK(node_failure(node(n, "a")) == "Slurm reports node a not responding");
        CHECK(node_failure(node(n, "c")) == "Slurm reports node c down");
    }

    TEST_CASE("untrusted output: wrong types read as absent, non-JSON throws one line") {
        auto jobs = parse_squeue(
            R"({"jobs":[{"job_id":{"set":true,"infinite":false,"number":9},"name":5,)"
            R"("array_job_id":{"set":false,"number":3},"array_task_id":"x",)"
            R"("start_time":{"set":true,"infinite":true,"number":0}}, 7, {"job_id":-1}]})");
        REQUIRE(jobs.size() == 1);
        CHECK(jobs[0].id == 9);
        CHECK(jobs[0].name.empty());
        CHECK(jobs[0].array == 0);
        CHECK(jobs[0].task == -1);
        CHECK(jobs[0].start_time == 0);
        CHECK_THROWS_AS(parse_squeue("squeue: error: Unable to contact slurm controller"), Error);
        CHECK_THROWS_AS(parse_squeue(R"({"errors":[]})"), Error);
        CHECK_THROWS_AS(parse_sinfo("[]"), Error);
    }

    TEST_CASE("22.05 scontrol show job -o, sbatch --parsable, salloc's grant") {
        auto running = parse_scontrol_job(slurm_data("22.05/scontrol-show-job-running.txt"));
        REQUIRE(running);
        CHECK(running->id == 1);
        CHECK(running->state == "RUNNING");
        CHECK(running->nodes == "w1");
        CHECK(running->array == 0);
        CHECK(running->task == -1);

        auto task = parse_scontrol_job(slurm_data("22.05/scontrol-show-job-array-task.txt"));
        REQUIRE(task);
        CHECK(task->id == 4);
        CHECK(task->array == 2);
        CHECK(task->task == 0);
        CHECK(task->nodes == "w2");

        auto queued = parse_scontrol_job(slurm_data("22.05/scontrol-show-job-array-pending.txt"));
        REQUIRE(queued);
        CHECK(queued->state == "PENDING");
        CHECK(queued->nodes.empty());
        CHECK(queued->task == 4);

        CHECK_FALSE(parse_scontrol_job(slurm_data("22.05/scontrol-show-job-unknown.txt")));
        CHECK(parse_sbatch(slurm_data("22.05/sbatch-parsable.out")) == 2);
        CHECK(parse_sbatch("17;sandweave\n") == 17);
        CHECK(parse_sbatch("sbatch: error: Batch job submission failed\n") == 0);
        CHECK(parse_salloc_grant(slurm_data("22.05/salloc-granted.err")) == 1);
        CHECK(parse_salloc_grant("salloc: Pending job allocation 3\nsalloc: job 3 queued\n"
                                 "salloc: Granted job allocation 3\n") == 3);
        CHECK(parse_salloc_grant("salloc: error: Job submit/allocate failed") == 0);
    }

    TEST_CASE("the controller's mark: its id, then the rest") {
        CHECK(comment_for("c0ffee01", "sbx-1") == "sandweave/c0ffee01:sbx-1");
        Job j;
        j.comment = R"(sandweave/c0ffee01:sbx-1:{"pool":"p","size":1})";
        CHECK(controller_of(j) == "c0ffee01");
        CHECK(sandbox_of(j) == "sbx-1");
        CHECK(rest_of(j) == R"(sbx-1:{"pool":"p","size":1})");
        for (const char* other : {"sandweave:sbx-1", "sandweave/:sbx-1", "sandweave/C0FFEE:x",
                                  "sandweave/c0ffee01", "", "sandweave/a b:x"}) {
            j.comment = other;
            CHECK(controller_of(j).empty());
            CHECK(sandbox_of(j).empty());
        }
        CHECK(valid_controller_id("0123456789ab"));
        CHECK_FALSE(valid_controller_id(""));
        CHECK_FALSE(valid_controller_id(std::string(33, 'a')));
        CHECK_FALSE(valid_controller_id("a:b"));
    }
}
