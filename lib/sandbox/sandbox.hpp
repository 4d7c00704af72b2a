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
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/process.hpp"
#include "lib/sandbox/context.hpp"
#include "lib/spec/options.hpp"
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
};

SandboxRecord create_sandbox(Context& ctx, const CreateRequest& req);

struct RunRequest {
    std::string id;
    std::vector<std::string> argv;
    std::optional<UserSpec> user;
    std::optional<std::string> cwd;
    std::vector<std::string> env;  // K=V
    std::optional<std::chrono::milliseconds> timeout;
};

// Runs argv in the sandbox attached to our stdio; returns the Docker-style status
// (124 on timeout, 125 when sandweave/runsc failed, 126/127 not executable/found).
int run_in_sandbox(Context& ctx, const RunRequest& req);

// Stops the sandbox (runsc state and host processes go); files and the audit
// log stay until rm. Idempotent on a stopped sandbox.
SandboxRecord terminate_sandbox(Context& ctx, const std::string& id);

// Removes everything: runsc state, mounts, directories, the name.
void remove_sandbox(Context& ctx, const std::string& id);

// The record with its live state (running / stopped / failed when runsc died
// under a sandbox we think is running).
struct SandboxView {
    SandboxRecord record;
    SandboxState live = SandboxState::creating;
};
std::vector<SandboxView> list_sandboxes(Context& ctx);
SandboxView inspect_sandbox(Context& ctx, const std::string& id);
nlohmann::json to_json(const SandboxView& v);

// Removes every stopped or failed sandbox; returns their ids.
std::vector<std::string> prune_sandboxes(Context& ctx);

// Host path of the guest init binary.
std::filesystem::path find_guest_init();

}  // namespace sandweave
