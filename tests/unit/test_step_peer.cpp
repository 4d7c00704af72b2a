// lib/rpc/step_peer: which Slurm job step a worker daemon's peer runs in,
// read from its /proc/PID/cgroup (real lines of this host's cgroup v1).
#include <doctest/doctest.h>

#include "lib/rpc/step_peer.hpp"

using namespace sandweave::rpc;

namespace {

// What a task of `srun --jobid 41 --overlap` by uid 2001 on node w1 of the
// one-machine cluster shows (several slurmd: each has its own root).
const char* const in_step =
    "12:blkio:/system.slice/slurmd.service\n"
    "11:memory:/slurm_w1/uid_2001/job_41/step_0/task_0\n"
    "10:cpuset:/slurm_w1/uid_2001/job_41/step_0\n"
    "9:freezer:/slurm_w1/uid_2001/job_41/step_0\n"
    "1:name=systemd:/system.slice/slurmd.service\n"
    "0::/system.slice/slurmd.service\n";

}  // namespace

TEST_SUITE("step peer") {
    TEST_CASE("a step's freezer cgroup gives its uid, job and step") {
        auto s = parse_slurm_cgroup(in_step);
        REQUIRE(s);
        CHECK(s->uid == 2001u);
        CHECK(s->job == 41);
        CHECK(s->step == "0");
        auto batch = parse_slurm_cgroup("4:freezer:/slurm/uid_0/job_7/step_batch\n");
        REQUIRE(batch);
        CHECK(batch->uid == 0u);
        CHECK(batch->job == 7);
        CHECK(batch->step == "batch");
    }

    TEST_CASE("a process in no step is in none") {
        CHECK(!parse_slurm_cgroup(""));
        CHECK(!parse_slurm_cgroup("9:freezer:/\n1:name=systemd:/user.slice/user-2001.slice\n"));
        // The job's own cgroup (no step yet) is not a step.
        CHECK(!parse_slurm_cgroup("9:freezer:/slurm_w1/uid_2001/job_41\n"));
        CHECK(!parse_slurm_cgroup("9:freezer:/slurm_w1/uid_2001/job_41/step_\n"));
    }

    TEST_CASE("only the freezer hierarchy counts, and only below a slurm root") {
        // task/cgroup's memory path alone (no proctrack freezer) is not trusted.
        CHECK(!parse_slurm_cgroup("11:memory:/slurm_w1/uid_2001/job_41/step_0\n"));
        // A look-alike outside Slurm's root is not a step.
        CHECK(!parse_slurm_cgroup("9:freezer:/mine/uid_2001/job_41/step_0\n"));
        // The first freezer line decides; a later one cannot add a step.
        CHECK(!parse_slurm_cgroup("9:freezer:/\n8:freezer:/slurm/uid_1/job_2/step_0\n"));
    }

    TEST_CASE("numbers must be whole and in range, the job not 0") {
        CHECK(!parse_slurm_cgroup("9:freezer:/slurm/uid_20x1/job_41/step_0\n"));
        CHECK(!parse_slurm_cgroup("9:freezer:/slurm/uid_2001/job_-1/step_0\n"));
        CHECK(!parse_slurm_cgroup("9:freezer:/slurm/uid_2001/job_0/step_0\n"));
        CHECK(!parse_slurm_cgroup("9:freezer:/slurm/uid_99999999999999/job_1/step_0\n"));
        CHECK(!parse_slurm_cgroup("9:freezer:/slurm/uid_/job_1/step_0\n"));
    }

    TEST_CASE("cgroup v2 paths carry no uid: refused") {
        CHECK(!parse_slurm_cgroup("0::/system.slice/slurmstepd.scope/job_41/step_0/user/task_0\n"));
    }
}
