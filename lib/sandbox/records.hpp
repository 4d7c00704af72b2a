#pragma once
// What the worker's operations hand back, as plain data: a sandbox's view, a
// snapshot's record, a pool's state, with their JSON (one rendering for the
// state files, --json and the protocol). Nothing here runs anything or needs
// a Context: the API carries these as they are (lib/api/types.hpp), so a
// client of the API compiles this header and not the operations
// (sandbox.hpp, snapshot.hpp, pool.hpp, which include it).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "lib/options/options.hpp"
#include "lib/runtime/limits.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

// How long the sandbox has left, for ls/inspect; nullopt when it has no
// lifetime or its clock has not started (a warm pool member) or it has ended.
struct TimeLeft {
    std::optional<std::chrono::milliseconds> ttl;
    std::optional<std::chrono::milliseconds> idle;  // counts only while not busy
    bool busy = false;                              // a command is running
    // The sooner of the two that is counting.
    std::optional<std::chrono::milliseconds> soonest() const;
};

// The record with its live state (running / stopped / failed when runsc died
// under a sandbox we think is running). sandbox_view (sandbox.hpp) makes one.
struct SandboxView {
    SandboxRecord record;
    SandboxState live = SandboxState::creating;
    std::optional<TimeLeft> left;  // with a ttl or idle timeout (lifetime.hpp)
    // What its pids/memory limits counted, when it runs with them (ls, inspect).
    std::optional<LimitUsage> limits;
    // Through a Weave controller: the worker (Slurm node) it runs on.
    std::optional<std::string> worker;
};
nlohmann::json to_json(const SandboxView& v);

// A snapshot (snapshot.hpp): <state>/snapshots/<id>/snapshot.json.
enum class SnapshotKind { fs, memory };
std::string to_string(SnapshotKind k);

struct SnapshotRecord {
    std::string id;
    std::string name;
    SnapshotKind kind = SnapshotKind::fs;
    std::string source;  // sandbox id
    std::string created_at;
    std::uint64_t bytes = 0;
    SandboxSpec spec;  // the source's resolved settings
    std::string runsc;
    std::string runtime_version;
    bool agent = false;  // the source had the guest agent (a memory image keeps it)
};

nlohmann::json to_json(const SnapshotRecord& s);
// The inverse of to_json; throws Error for a record that does not parse.
SnapshotRecord snapshot_from_json(const nlohmann::json& j);

// A warm pool (pool.hpp): pool.json and what its members are doing.
struct PoolInfo {
    std::string name;
    int size = 0;
    nlohmann::json request;  // template, hidepid, audit, user, labels
    std::string created_at;
    std::optional<std::string> last_error;
    int warm = 0;      // idle members that are running
    int in_use = 0;    // acquired members that still exist
    int starting = 0;  // members being created
};

nlohmann::json to_json(const PoolInfo& p);
PoolInfo pool_info_from_json(const nlohmann::json& j);

}  // namespace sandweave
