// lib/sandbox/agent_client: a relay that goes away while the CLI talks to it is
// a clear Error, never a SIGPIPE that kills the process without a word (`ls`
// asks every sandbox's relay, and `rm` may close one at that moment).
#include <doctest/doctest.h>

#include <sys/socket.h>

#include <filesystem>

#include "fixtures.hpp"
#include "lib/core/error.hpp"
#include "lib/core/relay.hpp"
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
}
