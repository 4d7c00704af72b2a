#pragma once
// The supervisor's side of the guest agent (docs/agent.md). The shim holds
// the one connection to the agent (the socket it donated to the sandbox as
// init's fd 0) and serves sandweave clients on a Unix socket in the
// sandbox's directory, relaying each client's commands over that connection
// under session numbers of its own. Detached commands live here: their
// output is kept (bounded) so it survives the client going away.
//
// The agent is hostile input: a frame that breaks the protocol ends the
// connection and fails every command with a clear message.

#include <filesystem>
#include <optional>

#include "lib/core/fd.hpp"

namespace sandweave {

// Bytes of output kept per detached command (the oldest go first).
inline constexpr std::size_t relay_log_limit = 4u << 20;

// Serves until no child of this process is left (the sandbox is gone).
// `agent` is the host end of the channel; `listener` a listening socket.
// Children are reaped here (the shim is their subreaper). While a detached
// command runs, `activity_file` is held with a shared flock (the sandbox's
// idle timeout sees it busy; lib/sandbox/activity.hpp). While the agent is
// ready, `ready_file` is held with an exclusive one (agent_ready_flag).
void run_relay(Fd agent, Fd listener, const std::filesystem::path& activity_file = {},
               const std::filesystem::path& ready_file = {});

// The relay's ready flag beside its socket: whether the agent behind the
// relay at `agent_socket` is ready, read from a flock, so the relay is not
// woken to say it (a pool acquire, ls). Nullopt when that relay keeps no flag
// (started by an older sandweave): ask it over the socket instead.
std::filesystem::path agent_ready_file(const std::filesystem::path& agent_socket);
std::optional<bool> agent_ready_flag(const std::filesystem::path& agent_socket);

// A listening Unix socket at `path` (mode 0600), replacing a stale one.
Fd listen_unix(const std::filesystem::path& path);
// A connection to the socket at `path`; an invalid Fd (errno set) on failure.
Fd connect_unix(const std::filesystem::path& path);

}  // namespace sandweave
