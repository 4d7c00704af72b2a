#pragma once
// Sandbox lifecycle: create, run, terminate, remove, list. These are the
// worker-side operations; the CLI calls them for a local connection (and, later,
// a remote sandweave runs them for an ssh:// one).
//
// create: resolve options -> ensure image -> reserve id -> overlay mount ->
//   bundle -> runsc run --detach -> record "running". Any failure rolls back
//   every step, so a failed create leaves nothing behind.
// Every state change happens under the sandbox's flock and is saved atomically.

#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/audit/audit.hpp"
#include "lib/core/process.hpp"
#include "lib/options/options.hpp"
#include "lib/runtime/limits.hpp"
#include "lib/sandbox/agent_client.hpp"
#include "lib/sandbox/companions.hpp"
#include "lib/sandbox/context.hpp"
#include "lib/sandbox/lifetime.hpp"
#include "lib/sandbox/records.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

struct CreateRequest {
    std::string template_ref = "base";
    bool template_given = false;  // --template was on the command line
    FlagOverrides flags;
    std::string name;
    std::string from_snapshot;   // restore from this snapshot (id or name)
    std::string pool;            // created as a member of this pool
    bool pool_acquired = false;  // ... and handed out at once (acquire on demand)
    // Called with the sandbox's id once it is reserved, before its record is
    // first written (a pool indexes its members with it).
    std::function<void(const std::string& id)> on_reserved;
    // Where an inline template came from, when a client resolved it before
    // sending it ("client:/home/me/t.yaml"): recorded as the template's name.
    std::string template_source;
};

SandboxRecord create_sandbox(Context& ctx, const CreateRequest& req);

struct RunRequest {
    std::string id;
    // The arguments; the command is docker run's composition of them with the
    // sandbox's entrypoint and cmd (command_line, lib/options/options.hpp):
    // `entrypoint` unset keeps the sandbox's, set replaces it ([] runs argv as
    // it is). sandweave's own guest commands (desktop.cpp) set [].
    std::vector<std::string> argv;
    std::optional<std::vector<std::string>> entrypoint;
    std::optional<UserSpec> user;
    std::optional<std::string> cwd;
    std::vector<std::string> env;  // K=V
    std::optional<std::chrono::milliseconds> timeout;
    bool tty = false;     // a pty in the guest for stdin, stdout and stderr
    bool detach = false;  // start it, keep its output in the supervisor, return
    // Instead of argv: replay detached command `attach`'s output (and follow it).
    std::optional<std::uint32_t> attach;
    bool follow = false;
};

// How a run ended. `status` is Docker-style: the command's exit code, 128+N
// for signal N, 124 on timeout, 125 when sandweave or runsc failed, 126/127
// when the program is not executable / not found. `message` is the one line
// to show a person when there is something to say (why 125/126/127/124).
struct RunOutcome {
    int status = 125;
    bool timed_out = false;
    bool cancelled = false;
    std::optional<std::string> message;
    std::optional<std::uint32_t> handle, pid;  // detach
    bool running = false;                      // attach without follow: not ended yet
};

// Runs argv in the sandbox with its stdio bound as `io` says (io.timeout is
// taken from the request). Throws not_found / general when the sandbox is
// unknown or not running.
RunOutcome run_in_sandbox(Context& ctx, const RunRequest& req, const AttachOptions& io);

// Stops the sandbox (runsc state and host processes go); files and the audit
// log stay until rm. Idempotent on a stopped sandbox. `ended_by` (why a
// lifetime rule ended it) is recorded with the stop, and only by the call
// that stopped it.
SandboxRecord terminate_sandbox(Context& ctx, const std::string& id,
                                const std::optional<std::string>& ended_by = std::nullopt);

// Removes everything: runsc state, mounts, directories, the name.
void remove_sandbox(Context& ctx, const std::string& id);

// An episode's end under one lock: terminate (the final barrier, the stop),
// then the whole log exported to audit_dest (if given; the sandbox must have
// audit), then rm. A failed export leaves the sandbox stopped, its log kept.
std::optional<audit::Status> finish_sandbox(Context& ctx, const std::string& id,
                                            const std::optional<std::filesystem::path>& audit_dest);

// A view with its time left; a running sandbox whose lifetime watcher died
// gets a new one here (lifetime.hpp).
SandboxView sandbox_view(Context& ctx, SandboxRecord r, SandboxState live,
                         std::optional<LimitUsage> limits = std::nullopt);
std::vector<SandboxView> list_sandboxes(Context& ctx);
SandboxView inspect_sandbox(Context& ctx, const std::string& id);

// Sandboxes whose overlay may stand on image `name` (every one not yet
// stopped): its files must not be replaced or removed under them.
std::vector<std::string> sandboxes_using_image(Context& ctx, const std::string& name);

// Removes the directories of creates killed before their first record
// (StateStore::abandoned_reservations), with any process or mount naming
// them; returns how many went. prune calls it.
int sweep_abandoned_creates(Context& ctx);

// Ids of sandboxes whose runtime was killed before `runsc delete` and left
// something on the host under the id: an empty host cgroup in every
// hierarchy, runsc's lock (and state, when runsc got that far) in the
// runtime's root. Two kinds:
//  - ids of this store's runtime root with such files whose sandbox is
//    gone from the store: no create can still be making them (a runsc still
//    holding its lock keeps them until it is gone);
//  - any other id's cgroups that are empty and were made more than
//    `stale_cgroup_age` ago (so never a create about to join them, of any
//    state directory of this host: a cgroup holds no state-directory name).
// A sandbox that still has its directory here (a record or a reservation)
// is not listed: rm and prune remove its leftovers with it, whatever their
// age, once its create is known dead (its lock is free).
inline constexpr std::chrono::seconds stale_cgroup_age{30};
std::vector<std::string> runtime_leftovers(Context& ctx);
// Removes them; returns how many ids went. prune calls it.
int sweep_runtime_leftovers(Context& ctx);

// Removes every stopped or failed sandbox, and what interrupted creates and
// removals left (abandoned reservations, graveyards, stale names); returns
// the ids of the sandboxes.
std::vector<std::string> prune_sandboxes(Context& ctx);

// Host path of the guest init binary.
std::filesystem::path find_guest_init();

// Where the sandbox's supervisor serves its guest agent (docs/agent.md).
std::filesystem::path agent_socket_path(Context& ctx, const std::string& id);
// A connection to it; throws with the reason (not running, no agent, gone),
// `what` saying what the caller wanted ("list its processes").
AgentClient connect_agent(Context& ctx, const SandboxRecord& r, const std::string& what);

// Whether the sandbox's supervisor relays a live agent. The relay knows at
// once (the agent's connection ends with the sandbox), and asking it is a
// round trip to a local process, where `runsc state` is a runtime process
// start (~10-20 ms).
bool agent_ready(Context& ctx, const SandboxRecord& r);
// Whether the runtime runs the sandbox: the relay when it can say yes, else
// `runsc state` (no agent, a supervisor gone, an agent still connecting).
bool runtime_running(Context& ctx, const SandboxRecord& r);

}  // namespace sandweave
