#pragma once
// The state store: one directory (default /var/lib/sandweave for root), one
// subdirectory per object. Each sandbox keeps its record in sandbox.json, written
// by temp file + fsync + rename under the sandbox's lock, so any number of
// sandweave processes may run at once and a crash never leaves a torn record.
//
//   <state>/sandboxes/<id>/sandbox.json   the record (this file)
//                          lock           flock for state changes
//                          bundle/        OCI bundle handed to runsc
//                          rootfs/        overlay mount (image below, upper/ above)
//                          upper/ work/   the sandbox's writable layer
//                          logs/          runsc and init output
//                          audit/         the audit writer's socket and log (0700)
//   <state>/names/<name>                  symlink name -> id (atomic uniqueness)
//   <state>/runsc/                        runsc --root shared by all sandboxes
//   <state>/images/<name>/                built root filesystems

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/fsutil.hpp"
#include "lib/spec/options.hpp"

namespace sandweave {

enum class SandboxState { creating, running, stopped, failed };
std::string to_string(SandboxState s);
SandboxState sandbox_state_from_string(const std::string& s);

struct SandboxRecord {
    std::string id;
    std::string name;
    SandboxState state = SandboxState::creating;
    std::string created_at;  // RFC 3339 UTC
    std::optional<std::string> stopped_at;
    std::optional<std::string> error;  // why it failed
    SandboxSpec spec;
    std::string runsc;                     // runtime binary used
    std::string runtime_version;           // its `runsc --version` first line
    std::vector<std::string> runsc_flags;  // global flags, identical on every call
    std::optional<std::string> from_snapshot;
    // Pool membership: "idle" members wait warm; "acquired" ones belong to the
    // caller who acquired them, with the audit position at that moment so an
    // episode can be cut from the warm-up.
    std::string pool;
    std::string pool_state;
    std::optional<std::string> acquired_at;
    std::optional<std::uint64_t> acquired_audit_seq;
};

nlohmann::json to_json(const SandboxRecord& r);
SandboxRecord record_from_json(const nlohmann::json& j);

class StateStore {
  public:
    // Creates the layout if needed; throws when the directory is not usable.
    explicit StateStore(std::filesystem::path root);

    // The default: $SANDWEAVE_STATE_DIR, else /var/lib/sandweave for root, else
    // $XDG_STATE_HOME/sandweave (~/.local/state/sandweave).
    static std::filesystem::path default_root();

    const std::filesystem::path& root() const { return root_; }
    std::filesystem::path sandbox_dir(const std::string& id) const;
    std::filesystem::path runsc_root() const { return root_ / "runsc"; }
    std::filesystem::path images_dir() const { return root_ / "images"; }

    // Reserves a new id (and the name, if given) atomically; the directory exists
    // on return. A taken name is a usage error.
    std::string reserve(const std::string& name);
    // Frees a name reserved for `id` (no-op if it points elsewhere).
    void release_name(const std::string& name, const std::string& id);

    // By exact id, exact name, or unique id prefix (at least 4 characters).
    // Throws not_found (exit 4) otherwise.
    std::string resolve_id(const std::string& id_or_name) const;

    SandboxRecord load(const std::string& id) const;
    std::optional<SandboxRecord> try_load(const std::string& id) const;
    void save(const SandboxRecord& r) const;
    std::vector<SandboxRecord> list() const;

    FileLock lock(const std::string& id) const;

  private:
    std::filesystem::path root_;
};

// RFC 3339 UTC timestamp for now.
std::string now_rfc3339();

}  // namespace sandweave
