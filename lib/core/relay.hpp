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

#include "lib/core/fd.hpp"

namespace sandweave {

// Bytes of output kept per detached command (the oldest go first).
inline constexpr std::size_t relay_log_limit = 4u << 20;

// Serves until no child of this process is left (the sandbox is gone).
// `agent` is the host end of the channel; `listener` a listening socket.
// Children are reaped here (the shim is their subreaper). While a detached
// command runs, `activity_file` is held with a shared flock (the sandbox's
// idle timeout sees it busy; lib/sandbox/activity.hpp).
void run_relay(Fd agent, Fd listener, const std::filesystem::path& activity_file = {});

// A listening Unix socket at `path` (mode 0600), replacing a stale one.
Fd listen_unix(const std::filesystem::path& path);
// A connection to the socket at `path`; an invalid Fd (errno set) on failure.
Fd connect_unix(const std::filesystem::path& path);

}  // namespace sandweave
