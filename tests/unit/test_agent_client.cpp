// lib/sandbox/agent_client: a relay that goes away while the CLI talks to it is
// a clear Error, never a SIGPIPE that kills the process without a word (`ls`
// asks every sandbox's relay, and `rm` may close one at that moment). And the
// relay's ready flag, which `ls` and a pool acquire read instead of asking.
#include <doctest/doctest.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <thread>

#include "fixtures.hpp"
#include "lib/core/agent_wire.hpp"
#include "lib/core/error.hpp"
#include "lib/runtime/relay.hpp"
#include "lib/sandbox/agent_client.hpp"

using namespace sandweave;
using sandweave::test::TempDir;
namespace fs = std::filesystem;

TEST_SUITE("agent_client") {
    TEST_CASE("a relay that closed the connection is an Error, not a SIGPIPE") {
        TempDir dir("agent-client");
        const fs::path sock = dir.path / "agent.sock";
        Fd listener = listen_unix(sock);
        REQUIRE(listener);
        AgentClient client(sock, "sw-test");
        Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        REQUIRE(conn);
        conn.reset();  // the relay goes away before the request
        listener.reset();
        CHECK_THROWS_WITH_AS(client.status(),
                             doctest::Contains("its supervisor closed the connection"), Error);
    }

    TEST_CASE("the relay's ready flag is held exactly while its agent is ready") {
        TempDir dir("relay-flag");
        const fs::path sock = dir.path / "agent.sock";
        auto eventually = [](const std::function<bool()>& f) {
            for (int i = 0; i < 500;
                 ++i, std::this_thread::sleep_for(std::chrono::milliseconds(10)))
                if (f()) return true;
            return false;
        };
        // No relay has kept a flag here: the caller must ask over the socket.
        CHECK_FALSE(agent_ready_flag(sock).has_value());

        // The relay serves while the shim has a child (the sandbox) to reap.
        // Forked first: it must not hold the agent's end open.
        pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            ::pause();
            ::_exit(0);
        }
        int sp[2];
        REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
        Fd host(sp[0]), guest(sp[1]);
        Fd listener = listen_unix(sock);
        std::thread relay(
            [&] { run_relay(std::move(host), std::move(listener), {}, agent_ready_file(sock)); });

        // The relay's HELLO carries the nonce the agent must answer with.
        agent::FrameReader reader;
        std::optional<agent::Frame> hello;
        while (!hello) {
            pollfd p{guest.get(), POLLIN, 0};
            REQUIRE(::poll(&p, 1, 5000) == 1);
            char buf[256];
            ssize_t n = ::read(guest.get(), buf, sizeof buf);
            REQUIRE(n > 0);
            reader.feed(std::string_view(buf, static_cast<std::size_t>(n)));
            hello = reader.next();
        }
        REQUIRE(hello->type == SW_HELLO);
        // Connecting: the file is there and free.
        CHECK(eventually([&] { return agent_ready_flag(sock) == std::optional<bool>(false); }));

        std::string reply = agent::encode_hello(hello->payload.substr(4, 16)) + agent::u32_bytes(0);
        std::string frame = agent::encode(SW_HELLO, 0, reply);
        REQUIRE(::write(guest.get(), frame.data(), frame.size()) ==
                static_cast<ssize_t>(frame.size()));
        CHECK(eventually([&] { return agent_ready_flag(sock) == std::optional<bool>(true); }));
        // Readers only look: the relay keeps it after any number of them.
        CHECK(agent_ready_flag(sock) == std::optional<bool>(true));

        guest.reset();  // the agent's connection ends with the sandbox
        CHECK(eventually([&] { return agent_ready_flag(sock) == std::optional<bool>(false); }));

        ::kill(child, SIGKILL);
        // The relay sees its last child gone at its next wake-up.
        for (int i = 0; i < 500 && ::kill(child, 0) == 0; ++i) {
            Fd poke = connect_unix(sock);
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        relay.join();
        CHECK(agent_ready_flag(sock) == std::optional<bool>(false));
    }
}
