// lib/rpc/client: what RpcClient sends a worker, here one that answers like an
// older sandweave (no "run.entrypoint" capability) over a socketpair.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lib/core/error.hpp"
#include "lib/rpc/client.hpp"

using namespace sandweave;
using nlohmann::json;

namespace {

// Answers hello with `capabilities`, and every sandbox.run with exit 0,
// keeping the params of each run it was sent; or, with `nested`, answers
// every request after hello with a result nested that deep.
class FakeWorker {
  public:
    explicit FakeWorker(std::vector<std::string> capabilities, std::size_t nested = 0)
        : caps_(std::move(capabilities)), nested_(nested) {
        int sv[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
        mine_ = sv[0];
        theirs_ = sv[1];
        thread_ = std::thread([this] { serve(); });
    }
    ~FakeWorker() {
        ::shutdown(mine_, SHUT_RDWR);
        thread_.join();
        ::close(mine_);
    }
    FakeWorker(const FakeWorker&) = delete;
    FakeWorker& operator=(const FakeWorker&) = delete;

    // The client's end (RpcClient reads from one Fd and writes to the other).
    std::unique_ptr<rpc::RpcClient> client() {
        Fd a(::dup(theirs_)), b(::dup(theirs_));
        ::close(theirs_);
        return std::make_unique<rpc::RpcClient>(std::move(a), std::move(b), "fake");
    }
    std::vector<json> runs() {
        std::lock_guard<std::mutex> g(mu_);
        return runs_;
    }

  private:
    void send(const json& j) {
        std::string line = j.dump() + "\n";
        (void)!::write(mine_, line.data(), line.size());
    }
    void serve() {
        std::string buf;
        char chunk[4096];
        for (;;) {
            ssize_t n = ::read(mine_, chunk, sizeof chunk);
            if (n <= 0) return;
            buf.append(chunk, static_cast<std::size_t>(n));
            for (auto nl = buf.find('\n'); nl != std::string::npos; nl = buf.find('\n')) {
                json req = json::parse(buf.substr(0, nl));
                buf.erase(0, nl + 1);
                if (!req.contains("id")) continue;
                if (nested_ && req["method"] != "hello") {
                    std::string line = R"({"jsonrpc":"2.0","id":)" + req["id"].dump() +
                                       R"(,"result":)" + std::string(nested_, '[') +
                                       std::string(nested_, ']') + "}\n";
                    (void)!::write(mine_, line.data(), line.size());
                    continue;
                }
                json result;
                if (req["method"] == "hello") {
                    result = {{"protocol", 1},
                              {"server", "sandweave 0.0.1"},
                              {"capabilities", caps_},
                              {"methods", {"sandbox.run"}}};
                } else {
                    std::lock_guard<std::mutex> g(mu_);
                    runs_.push_back(req["params"]);
                    result = {{"exit_code", 0}, {"timed_out", false}};
                }
                send({{"jsonrpc", "2.0"}, {"id", req["id"]}, {"result", result}});
            }
        }
    }

    std::vector<std::string> caps_;
    std::size_t nested_ = 0;
    int mine_ = -1, theirs_ = -1;
    std::thread thread_;
    std::mutex mu_;
    std::vector<json> runs_;
};

api::RunParams run_of(std::vector<std::string> argv,
                      std::optional<std::vector<std::string>> entrypoint) {
    api::RunParams p;
    p.id = "sw-1";
    p.argv = std::move(argv);
    p.entrypoint = std::move(entrypoint);
    return p;
}

}  // namespace

TEST_SUITE("rpc") {
    TEST_CASE("run with an entrypoint against a worker without run.entrypoint") {
        FakeWorker w({"log", "run.stdin"});
        auto c = w.client();
        // [] (argv as it is) is what an older worker does anyway: sent without it.
        CHECK(c->run(run_of({"/bin/sh", "-c", "true"}, std::vector<std::string>{}), {}).exit_code ==
              0);
        // The sandbox's own command, or another entrypoint: refused here, not
        // silently run differently there.
        for (auto p : {run_of({}, std::nullopt), run_of({"a"}, std::vector<std::string>{"/x"})}) {
            try {
                c->run(p, {});
                FAIL("no error");
            } catch (const Error& e) {
                CHECK(e.code() == ErrorCode::runtime);
                CHECK(std::string(e.what()).find("cannot run a sandbox's entrypoint or cmd") !=
                      std::string::npos);
            }
        }
        auto sent = w.runs();
        REQUIRE(sent.size() == 1);
        CHECK(!sent[0].contains("entrypoint"));
        CHECK(sent[0]["argv"] == json({"/bin/sh", "-c", "true"}));
    }

    TEST_CASE("run with an entrypoint against a worker with run.entrypoint") {
        FakeWorker w({"log", "run.entrypoint"});
        auto c = w.client();
        CHECK(c->run(run_of({}, std::nullopt), {}).exit_code == 0);
        CHECK(c->run(run_of({"a"}, std::vector<std::string>{}), {}).exit_code == 0);
        auto sent = w.runs();
        REQUIRE(sent.size() == 2);
        CHECK(!sent[0].contains("entrypoint"));
        CHECK(sent[1]["entrypoint"] == json::array());
    }

    TEST_CASE("a worker's reply nested 200,000 deep is an error, not a stack overflow") {
        FakeWorker w({"log"}, 200000);
        auto c = w.client();
        try {
            c->run(run_of({"/bin/true"}, std::vector<std::string>{}), {});
            FAIL("no error");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::connection);
            CHECK(std::string(e.what()).find("not JSON") != std::string::npos);
        }
    }
}
