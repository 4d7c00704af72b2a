#pragma once
// Commands through the guest agent (docs/agent.md): a client of the
// supervisor's relay socket in the sandbox's directory. Every answer is
// checked as hostile input; a lying, hung or vanished agent is an Error with
// one clear line, never a hang.

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/agent_wire.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/process.hpp"

namespace sandweave {

struct RunOutcome;

// How long the agent may take to start a command, and how long past a
// command's own timeout it may take to report its end.
inline constexpr std::chrono::seconds agent_start_timeout{15};
inline constexpr std::chrono::seconds agent_exit_grace{10};

class AgentClient {
  public:
    // Connects to the relay at `socket`; an Error (code general) when nobody
    // listens there. `sandbox` names the sandbox in messages.
    AgentClient(const std::filesystem::path& socket, std::string sandbox);
    // Nullopt instead of the Error when the socket does not answer.
    static std::optional<AgentClient> try_connect(const std::filesystem::path& socket,
                                                  std::string sandbox);

    // Runs a command attached to `io` until it ends. With SW_EXEC_PTY in
    // spec.flags and io.stdin_fd a terminal, its size follows SIGWINCH.
    RunOutcome run(const agent::ExecSpec& spec, const AttachOptions& io);

    struct Started {
        std::uint32_t handle = 0;
        std::uint32_t pid = 0;
    };
    // Starts a detached command (its output kept by the supervisor); throws
    // with the reason when it could not start.
    Started start_detached(agent::ExecSpec spec);

    nlohmann::json list();    // {"processes": [...]}
    nlohmann::json status();  // {"agent": "ready" | "connecting" | "down", ...}
    // A detached command's kept output to `io`; with follow, until it ends.
    // The outcome is its exit (status -1 when it still runs and !follow).
    RunOutcome logs(std::uint32_t handle, bool follow, const AttachOptions& io);
    RunOutcome wait(std::uint32_t handle);
    // Sends `sig` to every process of the command; false when it had ended.
    bool kill(std::uint32_t handle, int sig);

  private:
    class Run;  // run's steps (agent_client.cpp)
    explicit AgentClient(Fd fd, std::string sandbox);
    void send(const std::string& frame);
    // The next frame; throws when the connection ends or `deadline` passes.
    agent::Frame receive(std::optional<std::chrono::steady_clock::time_point> deadline);
    nlohmann::json request(std::uint8_t type, const nlohmann::json& req);
    RunOutcome outcome(const agent::Frame& exit, const std::string& argv0,
                       std::optional<std::uint32_t> timeout_ms) const;
    [[noreturn]] void lost(const std::string& why) const;

    Fd fd_;
    std::string sandbox_;
    agent::FrameReader reader_;
    std::uint32_t next_session_ = 1;
};

}  // namespace sandweave
