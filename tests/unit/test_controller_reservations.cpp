// The controller's reservations (lib/controller/reservations.cpp) through
// ControllerApi over a runner that answers as Slurm 22.05 did
// (tests/data/slurm/22.05): what a batch's reserve and release ask of Slurm,
// whose arrays a caller may end, and the protocol's view of who serves them.
// tests/integration/weave_batch.sh runs the same against a real cluster.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <thread>

#include "lib/api/methods.hpp"
#include "lib/controller/controller_api.hpp"
#include "lib/controller/identity.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "tests/unit/fixtures.hpp"

using namespace sandweave;
using namespace sandweave::controller;

namespace {

// Answers the test's own thread with the recording (squeue-running.json:
// array 2 of controller c0ffee01, tasks 0 and 1 running, 2-6 pending) and
// the controller's watcher thread with an empty cluster, so the watcher
// decides nothing about the recorded jobs while a test runs. Records the
// test thread's commands. Thread-safe: the watcher calls it too.
class RecordedSlurm final : public CommandRunner {
  public:
    RecordedSlurm()
        : squeue_(read_file(std::string(SANDWEAVE_TEST_DATA) + "/slurm/22.05/squeue-running.json")),
          sinfo_(read_file(std::string(SANDWEAVE_TEST_DATA) + "/slurm/22.05/sinfo-idle.json")) {}

    CommandResult run(const Command& c) override {
        const bool test = std::this_thread::get_id() == test_thread_;
        std::lock_guard<std::mutex> g(mu_);
        if (test) calls_.push_back(c.argv);
        const std::string& prog = c.argv.at(0);
        CommandResult r;
        r.exit_status = 0;
        if (prog == "squeue" && c.argv.size() > 1 && c.argv[1] == "--json")
            r.out = test && recorded_ ? squeue_ : R"({"jobs": []})";
        else if (prog == "squeue")  // -h -j ID -o %u: the job's user
            r.out = "root\n";
        else if (prog == "sinfo")
            r.out = test && recorded_ ? sinfo_ : R"({"nodes": []})";
        else if (prog == "sbatch")
            r.out = "41\n";
        return r;  // scancel and the rest: done
    }
    LaunchResult launch_detached(const Command&, const std::filesystem::path&) override {
        throw Error(ErrorCode::general, "not in this test");
    }
    CommandResult run_attached(const Command&, const AttachOptions&) override {
        throw Error(ErrorCode::general, "not in this test");
    }

    // From now on the test thread sees the recording.
    void show_recording() {
        std::lock_guard<std::mutex> g(mu_);
        recorded_ = true;
    }
    std::vector<std::vector<std::string>> calls(const std::string& prog) {
        std::lock_guard<std::mutex> g(mu_);
        std::vector<std::vector<std::string>> out;
        for (const auto& c : calls_)
            if (c.at(0) == prog) out.push_back(c);
        return out;
    }

  private:
    const std::thread::id test_thread_ = std::this_thread::get_id();
    const std::string squeue_, sinfo_;
    std::mutex mu_;
    bool recorded_ = false;
    std::vector<std::vector<std::string>> calls_;
};

struct Controller {
    std::shared_ptr<RecordedSlurm> slurm = std::make_shared<RecordedSlurm>();
    std::unique_ptr<ControllerApi> api;
    Controller() {
        ClusterConfig c;
        c.controller_id = "c0ffee01";  // the recording's
        api = std::make_unique<ControllerApi>(c, slurm);
        slurm->show_recording();
    }
};

using sandweave::test::contains;

}  // namespace

TEST_SUITE("controller reservations") {
    TEST_CASE("only a controller serves them: the table's rows say so") {
        CHECK(api::controller_only_methods() ==
              std::vector<std::string>{"batch.release", "batch.reserve"});
        Controller c;
        CHECK(c.api->reservations() != nullptr);
    }

    TEST_CASE("a reservation is one job array, charged to its caller, capped at at_once") {
        Controller c;
        api::ReserveParams p;
        p.count = 4;
        p.at_once = 2;
        p.owner = "demo2";
        p.ttl_ms = 90000;
        api::Reservation r = c.api->batch_reserve(p);
        CHECK(r.id == "41");
        CHECK(r.count == 4);
        CHECK(r.at_once == 2);
        auto sbatch = c.slurm->calls("sbatch");
        REQUIRE(sbatch.size() == 1);
        // Tasks 0-3 for the slots, and task 4 that no create uses: Slurm gives
        // the task it starts last the array's own id.
        CHECK(contains(sbatch[0], "--array=0-4%2"));
        CHECK(contains(sbatch[0], "--no-requeue"));
        CHECK(contains(sbatch[0], "--time=2"));  // 90 s, in whole minutes up
        CHECK(contains(sbatch[0],
                       "--comment=sandweave/c0ffee01::array:" + caller().unix_user + "/demo2"));
        // None of the recorded arrays was this owner's: nothing ended.
        CHECK(c.slurm->calls("scancel").empty());

        // at_once is never more than the count.
        p.count = 1;
        p.at_once = 8;
        CHECK(c.api->batch_reserve(p).at_once == 1);
        CHECK(contains(c.slurm->calls("sbatch").at(1), "--array=0-1%1"));
    }

    TEST_CASE("a bad owner or count is refused before Slurm is asked") {
        Controller c;
        api::ReserveParams p;
        p.count = 2;
        p.at_once = 1;
        for (const char* bad : {"", "a/b", "x y", "../up"}) {
            p.owner = bad;
            CHECK_THROWS_WITH_AS(c.api->batch_reserve(p), doctest::Contains("owner"), Error);
        }
        p.owner = "ok";
        p.count = 0;
        CHECK_THROWS_AS(c.api->batch_reserve(p), Error);
        CHECK(c.slurm->calls("sbatch").empty());
    }

    TEST_CASE("release ends the pending slots and the started ones holding no sandbox") {
        Controller c;
        c.api->batch_release(api::IdParams{"2"});
        auto scancel = c.slurm->calls("scancel");
        std::vector<std::string> ended;
        for (const auto& a : scancel) ended.push_back(a.back());
        std::sort(ended.begin(), ended.end());
        // The pending record's indices without the %2 throttle, and tasks 0 and 1.
        CHECK(ended == std::vector<std::string>{"2_0", "2_1", "2_[2-6]"});
        // Another controller's array, or none, is not found; a name is no id.
        CHECK_THROWS_WITH_AS(c.api->batch_release(api::IdParams{"999"}),
                             doctest::Contains("no reservation 999"), Error);
        CHECK_THROWS_AS(c.api->batch_release(api::IdParams{"2x"}), Error);
    }

    TEST_CASE("a user may not end an array that is not theirs") {
        Controller c;
        Identity alice{"alice", "alice", false, "token"};
        CallerScope as_alice(alice);
        try {
            c.api->batch_release(api::IdParams{"2"});
            FAIL("alice ended the admin's array");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::not_found);
        }
        CHECK(c.slurm->calls("scancel").empty());
    }
}
