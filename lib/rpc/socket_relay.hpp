#pragma once
// `sandweave __relay --socket PATH`: what a Weave controller starts in a
// sandbox's Slurm job (`srun --jobid J --overlap ... __relay`) to reach the
// node's worker daemon (`sandweave worker`, which owns the sandboxes). It
// only forwards bytes: its stdin to the daemon's Unix socket, the socket to
// its stdout, until either end closes. It holds no sandbox and no state, so
// a relay killed (or its job step ended by Slurm) loses only the connection:
// the daemon cancels that connection's running commands, as for any client
// that goes away, and every sandbox keeps running with its audit writer and
// clocks. The daemon decides whom it serves (SO_PEERCRED: the relay runs as
// the job's user).

#include <filesystem>

namespace sandweave::rpc {

inline constexpr const char* relay_verb = "__relay";

// Forwards until both directions are done or one side fails. When the
// socket cannot be reached, writes one JSON-RPC error line (id null: the
// client keeps it as the reason the connection ended) on `out` and throws
// Error(connection).
void relay_to_socket(const std::filesystem::path& socket, int in, int out);

}  // namespace sandweave::rpc
