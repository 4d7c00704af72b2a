// lib/batch/runner: the batch runner's logic over a fake Api (fake_api.hpp):
// every episode once, each folder only whole, retries of the machinery's
// failures and not of the episode's own, reruns that skip what is finished,
// the sweep of an earlier run's sandboxes, and a controller's reservations.
// tests/integration/batch.sh and weave_batch.sh run the same runner against
// the real runtime and a real Slurm cluster.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "lib/batch/batch.hpp"
#include "lib/core/fsutil.hpp"
#include "tests/unit/fake_api.hpp"

using namespace sandweave;
namespace fs = std::filesystem;

namespace {

// A worker that "runs" an episode's argv: {"echo", TEXT} prints TEXT and
// exits 0, {"exit", N} exits N. Creates of an episode fail while
// create_failures holds a count for it. Thread-safe: the runner's workers
// share it (each connect() returns the same worker).
class EpisodeWorker : public testing::FakeApi {
  public:
    SandboxView create(const api::CreateParams& p) override {
        std::lock_guard<std::mutex> g(mu);
        creates.push_back(p);
        const std::string episode = p.labels.at(batch::episode_label);
        if (auto it = create_failures.find(episode); it != create_failures.end() && it->second) {
            if (it->second > 0) --it->second;
            throw Error(ErrorCode::runtime, "runsc: the sandbox did not start");
        }
        SandboxView v;
        v.record.id = "sb" + std::to_string(++made);
        v.live = SandboxState::running;
        live.insert(v.record.id);
        return v;
    }
    api::RunResult run(const api::RunParams& p, const api::RunIo& io) override {
        {
            std::lock_guard<std::mutex> g(mu);
            REQUIRE(live.count(p.id));
            ++runs;
        }
        api::RunResult r;
        r.exit_code = 0;
        if (p.argv.at(0) == "exit")
            r.exit_code = std::stoi(p.argv.at(1));
        else if (io.out.on_data)
            io.out.on_data(p.argv.at(1) + "\n");
        return r;
    }
    api::Removed rm(const api::IdParams& p) override {
        std::lock_guard<std::mutex> g(mu);
        live.erase(p.id);
        removed.push_back(p.id);
        return api::Removed{p.id};
    }
    api::SandboxList ls(const api::LsParams& p) override {
        std::lock_guard<std::mutex> g(mu);
        filters.push_back(p.filter);
        api::SandboxList out;
        for (const std::string& id : leftovers) {
            SandboxView v;
            v.record.id = id;
            out.sandboxes.push_back(v);
        }
        leftovers.clear();
        return out;
    }
    api::Removed pool_rm(const api::NameParams& p) override {
        throw Error(ErrorCode::not_found, "no pool '" + p.name + "'");
    }

    std::mutex mu;
    std::vector<api::CreateParams> creates;
    std::map<std::string, int> create_failures;  // episode -> creates to fail (-1: all)
    std::vector<std::string> leftovers;          // what ls answers once
    std::vector<std::vector<std::string>> filters;
    std::set<std::string> live;
    std::vector<std::string> removed;
    int made = 0, runs = 0;
};

// A controller's worker: the same, with reservations.
class ControllerLike : public EpisodeWorker, public api::Reservations {
  public:
    api::Reservations* reservations() override { return this; }
    api::Reservation batch_reserve(const api::ReserveParams& p) override {
        std::lock_guard<std::mutex> g(mu);
        reserved.push_back(p);
        return api::Reservation{"4242", p.count, p.at_once};
    }
    api::Removed batch_release(const api::IdParams& p) override {
        std::lock_guard<std::mutex> g(mu);
        released.push_back(p.id);
        return api::Removed{p.id};
    }
    std::vector<api::ReserveParams> reserved;
    std::vector<std::string> released;
};

batch::Episode episode(const std::string& id, std::vector<std::string> argv) {
    batch::Episode e;
    e.id = id;
    e.line = 1;
    e.audit = false;
    e.argv = std::move(argv);
    return e;
}

struct Scratch {
    fs::path dir = fs::temp_directory_path() /
                   ("sw-batch-unit-" + std::to_string(::getpid()) + "-" + std::to_string(++n));
    ~Scratch() { fs::remove_all(dir); }
    static inline int n = 0;
};

batch::Options options(const fs::path& out, std::shared_ptr<api::Api> api, int concurrency = 2) {
    batch::Options o;
    o.spec = "episodes.jsonl";
    o.out = out;
    o.concurrency = concurrency;
    o.retries = 2;
    o.progress = false;
    o.connect = [api] { return api; };
    return o;
}

std::string read(const fs::path& p) {
    return read_file(p);
}

nlohmann::json result_of(const fs::path& out, const std::string& id) {
    return nlohmann::json::parse(read(out / id / "result.json"));
}

bool has_temp_folders(const fs::path& out) {
    for (const auto& e : fs::directory_iterator(out))
        if (e.path().filename().string().rfind(".tmp-", 0) == 0) return true;
    return false;
}

}  // namespace

TEST_SUITE("batch runner") {
    TEST_CASE("every episode runs once; its own failure is a result, not retried") {
        Scratch t;
        auto w = std::make_shared<EpisodeWorker>();
        std::vector<batch::Episode> eps;
        for (int i = 0; i < 5; ++i)
            eps.push_back(episode("e" + std::to_string(i), {"echo", "hello " + std::to_string(i)}));
        eps.push_back(episode("bad", {"exit", "3"}));
        std::vector<nlohmann::json> events;
        std::mutex ev_mu;
        auto o = options(t.dir, w);
        o.on_event = [&](const nlohmann::json& ev) {
            std::lock_guard<std::mutex> g(ev_mu);
            events.push_back(ev);
        };
        batch::Summary s = batch::Runner(eps, o).run();

        CHECK(s.total == 6);
        CHECK(s.done == 5);
        CHECK(s.failed == 1);
        CHECK(s.failed_ids == std::vector<std::string>{"bad"});
        CHECK(s.infrastructure == 0);
        CHECK(s.exit_code == batch::exit_episodes_failed);
        CHECK(w->made == 6);  // the failed episode was not tried again
        CHECK(w->runs == 6);
        CHECK(w->live.empty());  // every sandbox removed
        CHECK(events.size() == 6);
        for (int i = 0; i < 5; ++i) {
            const std::string id = "e" + std::to_string(i);
            auto r = result_of(t.dir, id);
            CHECK(r["status"] == "done");
            CHECK(r["exit_code"] == 0);
            CHECK(r["tries"].size() == 1);
            CHECK(read(t.dir / id / "stdout") == "hello " + std::to_string(i) + "\n");
        }
        auto bad = result_of(t.dir, "bad");
        CHECK(bad["status"] == "failed");
        CHECK(bad["exit_code"] == 3);
        CHECK_FALSE(has_temp_folders(t.dir));
        auto summary = nlohmann::json::parse(read(t.dir / "summary.json"));
        CHECK(summary["done"] == 5);
        // Each sandbox carries the batch's label and its episode's.
        for (const auto& c : w->creates) {
            CHECK(c.labels.at(batch::batch_label) == s.key);
            CHECK(c.labels.count(batch::episode_label));
            CHECK(c.ttl_ms);
        }
    }

    TEST_CASE("a machinery failure is retried, then counted apart without a folder") {
        Scratch t;
        auto w = std::make_shared<EpisodeWorker>();
        w->create_failures["flaky"] = 1;    // the second try works
        w->create_failures["broken"] = -1;  // no try works
        std::vector<batch::Episode> eps = {episode("flaky", {"echo", "x"}),
                                           episode("broken", {"echo", "y"})};
        batch::Summary s = batch::Runner(eps, options(t.dir, w)).run();

        CHECK(s.done == 1);
        CHECK(s.infrastructure == 1);
        CHECK(s.infrastructure_ids == std::vector<std::string>{"broken"});
        CHECK(s.infrastructure_errors["broken"].find("the sandbox did not start") !=
              std::string::npos);
        CHECK(s.exit_code == batch::exit_infrastructure);
        auto flaky = result_of(t.dir, "flaky");
        REQUIRE(flaky["tries"].size() == 2);
        CHECK(flaky["tries"][0]["error"].get<std::string>().find("creating the sandbox") !=
              std::string::npos);
        CHECK_FALSE(fs::exists(t.dir / "broken"));  // a rerun tries it again
        // 1 + 2 retries for "broken", 2 tries for "flaky".
        CHECK(w->creates.size() == 5);
        CHECK(w->live.empty());
        CHECK_FALSE(has_temp_folders(t.dir));
    }

    TEST_CASE("a rerun skips the finished episodes and sweeps an earlier run's sandboxes") {
        Scratch t;
        auto w = std::make_shared<EpisodeWorker>();
        std::vector<batch::Episode> eps = {episode("a", {"echo", "1"}),
                                           episode("b", {"echo", "2"})};
        batch::Summary first = batch::Runner(eps, options(t.dir, w)).run();
        REQUIRE(first.done == 2);
        // What a killed run left: a temp folder and a sandbox with the label.
        fs::create_directories(t.dir / ".tmp-b-0123");
        w->leftovers = {"left1"};
        w->live.insert("left1");
        eps.push_back(episode("c", {"echo", "3"}));
        batch::Summary second = batch::Runner(eps, options(t.dir, w)).run();

        CHECK(second.total == 3);
        CHECK(second.skipped == 2);
        CHECK(second.done == 3);  // skipped ones count as done, as they were
        CHECK(w->made == 3);      // only c was made this time
        CHECK(std::count(w->removed.begin(), w->removed.end(), "left1") == 1);
        CHECK(w->live.empty());
        CHECK_FALSE(has_temp_folders(t.dir));
        // The sweep asked for this batch's label only.
        REQUIRE_FALSE(w->filters.empty());
        CHECK(w->filters.back() == std::vector<std::string>{std::string("label=") +
                                                            batch::batch_label + "=" + second.key});
    }

    TEST_CASE("a second run on the same folder is refused while the first holds it") {
        Scratch t;
        fs::create_directories(t.dir);
        auto w = std::make_shared<EpisodeWorker>();
        std::vector<batch::Episode> eps = {episode("a", {"echo", "1"})};
        // The first run's lock, taken as the runner takes it.
        auto o = options(t.dir, w);
        bool refused = false;
        o.on_event = [&](const nlohmann::json&) {
            try {
                batch::Runner({episode("z", {"echo", "2"})}, options(t.dir, w)).run();
            } catch (const Error& err) {
                refused = std::string(err.what()).find("another batch run") != std::string::npos;
            }
        };
        batch::Runner(eps, o).run();
        CHECK(refused);
    }

    TEST_CASE("through a controller, the episodes take the slots of one reservation") {
        Scratch t;
        auto c = std::make_shared<ControllerLike>();
        std::vector<batch::Episode> eps;
        for (int i = 0; i < 4; ++i) eps.push_back(episode("e" + std::to_string(i), {"echo", "x"}));
        batch::Summary s = batch::Runner(eps, options(t.dir, c, 2)).run();

        CHECK(s.done == 4);
        REQUIRE(c->reserved.size() == 1);
        CHECK(c->reserved[0].count == 4);
        CHECK(c->reserved[0].at_once == 2);
        CHECK(c->reserved[0].owner == s.key);
        std::set<std::int64_t> slots;
        for (const auto& p : c->creates) {
            REQUIRE(p.reservation);
            CHECK(*p.reservation == "4242");
            REQUIRE(p.slot);
            slots.insert(*p.slot);
        }
        CHECK(slots == std::set<std::int64_t>{0, 1, 2, 3});  // each slot once
        CHECK(c->released == std::vector<std::string>{"4242"});
    }

    TEST_CASE("a worker has no reservations: each episode is its own create") {
        Scratch t;
        auto w = std::make_shared<EpisodeWorker>();
        CHECK(w->reservations() == nullptr);
        batch::Summary s = batch::Runner({episode("a", {"echo", "1"}), episode("b", {"echo", "2"})},
                                         options(t.dir, w))
                               .run();
        CHECK(s.done == 2);
        for (const auto& p : w->creates) {
            CHECK_FALSE(p.reservation);
            CHECK_FALSE(p.slot);
        }
    }
}
