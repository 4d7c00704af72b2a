// The Slurm client's commands (lib/controller/slurm.hpp) through a scripted
// runner: what the controller asks Slurm for, and how a refusal reads.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>

#include "lib/controller/slurm.hpp"
#include "lib/core/error.hpp"
#include "scripted_runner.hpp"

using namespace sandweave;
using namespace sandweave::controller::slurm;

TEST_SUITE("slurm client") {
    TEST_CASE("job arrays are never requeued, and every job carries the controller's mark") {
        auto runner = std::make_shared<ScriptedRunner>();
        runner->respond = [](const Command& c) {
            if (c.argv[0] == "sbatch") return ScriptedRunner::ok("41\n");
            CommandResult r = ScriptedRunner::ok();
            r.err = "salloc: Granted job allocation 40\n";
            return r;
        };
        Client slurm(runner, "c0ffee01");
        AllocationRequest req;
        req.name = "sandweave-0a1b2c3d";
        req.comment = ":array:demo";
        CHECK(slurm.submit_array(req, 3, 2) == 41);
        const auto& sbatch = runner->calls.at(0).cmd.argv;
        CHECK(std::count(sbatch.begin(), sbatch.end(), "--no-requeue") == 1);
        CHECK(std::count(sbatch.begin(), sbatch.end(), "--array=0-3%2") == 1);
        CHECK(std::count(sbatch.begin(), sbatch.end(),
                         "--comment=sandweave/c0ffee01::array:demo") == 1);

        req.comment = "";
        CHECK(slurm.allocate(req) == 40);
        const auto& salloc = runner->calls.at(1).cmd.argv;
        CHECK(salloc.at(0) == "salloc");
        CHECK(std::count(salloc.begin(), salloc.end(), "--comment=sandweave/c0ffee01:") == 1);

        slurm.name_job(40, "sbx-1");
        CHECK(runner->calls.at(2).cmd.argv ==
              std::vector<std::string>{"scontrol", "update", "JobId=40", "Name=sbx-1",
                                       "Comment=sandweave/c0ffee01:sbx-1"});

        Job mine, theirs;
        mine.comment = "sandweave/c0ffee01:sbx-1";
        theirs.comment = "sandweave/beef02:sbx-2";
        CHECK(slurm.ours(mine));
        CHECK_FALSE(slurm.ours(theirs));
        CHECK_THROWS_AS(Client(runner, "Not-An-Id"), Error);
    }

    TEST_CASE("a refused allocation or array fails with Slurm's one line") {
        auto runner = std::make_shared<ScriptedRunner>();
        runner->respond = [](const Command&) {
            return ScriptedRunner::fail(
                1,
                "salloc: error: Job submit/allocate failed: Requested node configuration is "
                "not available\n");
        };
        Client slurm(runner, "c0ffee01");
        try {
            slurm.allocate({});
            FAIL("expected an error");
        } catch (const Error& e) {
            CHECK(std::string(e.what()) ==
                  "Slurm gave no allocation: salloc: error: Job submit/allocate failed: "
                  "Requested node configuration is not available");
        }
        CHECK_THROWS_AS(slurm.submit_array({}, 2, 1), Error);
        CHECK_THROWS_AS(slurm.jobs(), Error);
    }

    TEST_CASE("a user's jobs are submitted, changed and ended as that user") {
        auto runner = std::make_shared<ScriptedRunner>();
        runner->respond = [](const Command& c) {
            if (c.argv[0] == "squeue") return ScriptedRunner::ok("nobody\n");
            CommandResult r = ScriptedRunner::ok();
            r.err = "salloc: Granted job allocation 40\n";
            return r;
        };
        Client slurm(runner, "c0ffee01");
        AllocationRequest req;
        req.user = "nobody";
        CHECK(slurm.allocate(req) == 40);
        auto as = [&](std::size_t i) {
            const auto& ra = runner->calls.at(i).cmd.run_as;
            return ra ? ra->user : std::string("(the controller)");
        };
        CHECK(runner->calls.at(0).cmd.argv.at(0) == "salloc");
        CHECK(as(0) == "nobody");
        slurm.name_job(40, "sbx-1");
        CHECK(runner->calls.at(1).cmd.argv.at(0) == "scontrol");
        CHECK(as(1) == "nobody");
        slurm.cancel(40);
        CHECK(runner->calls.at(2).cmd.argv.at(0) == "scancel");
        CHECK(as(2) == "nobody");
        // A job it did not submit (a restarted controller's): Slurm says whose.
        slurm.cancel(77);
        CHECK(runner->calls.at(3).cmd.argv ==
              std::vector<std::string>{"squeue", "-h", "-j", "77", "-o", "%u"});
        CHECK(as(3) == "(the controller)");
        CHECK(runner->calls.at(4).cmd.argv.at(0) == "scancel");
        CHECK(as(4) == "nobody");
        CHECK(slurm.owner(77) == "nobody");
        CHECK(runner->calls.size() == 5);  // remembered
        // With no user, the controller's own: nothing to change.
        CHECK(slurm.allocate({}) == 40);
        CHECK(as(5) == "(the controller)");
    }
}
