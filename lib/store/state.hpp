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
//   <state>/snapshots/<id>/snapshot.json  snapshots (lib/sandbox/snapshot.hpp)
//   <state>/pools/<name>/pool.json        warm pools (lib/sandbox/pool.hpp)
//   <state>/images/<name>/image.json      built root filesystems (lib/sandbox/image.hpp)
//   <state>/runsc/                        runsc --root shared by all sandboxes
//
// Every kind of object follows the same two rules (ObjectDir):
//   lookup   an exact id, else an exact name, else a unique id prefix of at
//            least 4 characters (with or without the kind's id prefix, "sw-");
//            never a guess. Kinds whose ids are user-chosen names (pools,
//            images) match exactly only.
//   removal  the directory is renamed out of sight first (<kind>/.rm-<id>-...),
//            so from that instant the object no longer exists for any other
//            sandweave process even if removing its files is interrupted;
//            then the files go.
// Entries starting with '.' (builds in progress, graveyards, locks) are never objects.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/options/options.hpp"

namespace sandweave {

enum class NameStyle {
    symlinks,   // <state>/names/<name> -> id (reserved atomically)
    in_record,  // the record's "name" field
    ids,        // the id is the user-chosen name
};

// A kind of object: its layout, and the words its errors use (kept as users
// have always seen them).
struct ObjectKind {
    const char* noun;       // "sandbox": "no such sandbox: x" (exit 4)
    const char* dir;        // its directory under the state root
    const char* record;     // the record file in an object's directory
    const char* id_prefix;  // generated ids start with it ("sw-"); "" for NameStyle::ids
    NameStyle names;
    // An object exists once its directory does (snapshots are renamed into
    // place whole, so a missing record means a corrupt one), rather than only
    // once its record is written (a sandbox's directory is reserved first).
    bool exists_with_dir;
    bool (*valid_ref)(const std::string& ref);
    Error (*invalid_ref)(const std::string& ref);
    Error (*ambiguous)(const std::string& ref, std::size_t matches);
};

extern const ObjectKind sandbox_kind, snapshot_kind, pool_kind, image_kind;

// Whether `name` has the form of an id this store generates for a sandbox
// ("sw-" and 12 lowercase hex digits), which no other program's name is
// likely to have: what may be taken for a sandbox's name outside the state
// directory (its host cgroups).
bool is_sandbox_id(std::string_view name);

// The objects of one kind in one directory.
class ObjectDir {
  public:
    ObjectDir(const ObjectKind& kind, std::filesystem::path dir,
              std::filesystem::path names_dir = {});

    const ObjectKind& kind() const { return kind_; }
    const std::filesystem::path& path() const { return dir_; }
    // <dir>/<id>; throws the kind's invalid-reference error for an id that is
    // not a plain name (so it never escapes the directory).
    std::filesystem::path object_dir(const std::string& id) const;
    bool exists(const std::string& id) const;
    // Every object that exists, in directory order.
    std::vector<std::string> ids() const;

    // The lookup rule (see the top of this file). Throws not_found (exit 4),
    // the kind's ambiguous error (exit 2) or its invalid-reference error.
    std::string resolve(const std::string& ref) const;

    // The removal rule: rename, then `after_rename` (a sandbox frees its name
    // there), then remove the files. Throws not_found when the directory is
    // already gone (removed by another process).
    void remove(const std::string& id, const std::function<void()>& after_rename = {}) const;
    // Just the rename, for a caller that puts a replacement in place before the
    // old files go (an image rebuild); returns the graveyard to remove_tree().
    std::filesystem::path bury(const std::string& id) const;
    // Finishes removals a crash interrupted: every graveyard (.rm-*) that no
    // remover holds is deleted, unless `keep` says it must stay (a mount still
    // inside it). Returns how many went.
    int sweep_graveyards(const std::function<bool(const std::filesystem::path&)>& keep = {}) const;

  private:
    std::optional<std::string> name_target(const std::string& name) const;
    const ObjectKind& kind_;
    std::filesystem::path dir_, names_dir_;
};

// pending: waiting for room on a Weave controller (its Slurm job is queued);
// never in a worker's records.
// pending and lost are a controller's only: its Slurm job waits for room, or
// Slurm declared the sandbox's worker failed (node down, job NODE_FAIL).
enum class SandboxState { creating, running, stopped, failed, pending, lost };
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
    // Lifetime (lib/sandbox/lifetime.hpp): the ttl's deadline once its clock
    // started (Unix ms), and what ended the sandbox ("ttl", "idle_timeout").
    std::optional<std::int64_t> expires_at_ms;
    std::optional<std::string> ended_by;
    // What the pids/memory limits had counted when the sandbox was stopped
    // (lib/sandbox/limit_usage.hpp's JSON), so inspect of a stopped sandbox
    // still says what happened; the store does not look inside.
    std::optional<nlohmann::json> limits_at_stop;
    // Where its network is on the host (lib/sandbox/network.hpp's
    // NetworkLink), when its spec has an egress policy.
    std::optional<nlohmann::json> network;
    // Created with the guest agent's channel (docs/agent.md); records from
    // older versions have none and run commands through runsc exec.
    bool agent = false;
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
    // The objects of `kind` (sandbox_kind, snapshot_kind, pool_kind, image_kind).
    ObjectDir objects(const ObjectKind& kind) const;
    std::filesystem::path sandbox_dir(const std::string& id) const;
    std::filesystem::path runsc_root() const { return root_ / "runsc"; }
    std::filesystem::path images_dir() const { return root_ / "images"; }

    // Reserves a new id (and the name, if given) atomically; the directory exists
    // on return and its lock is held by the caller from the instant the
    // directory appears, so a directory without a record whose lock is free
    // was left by a creator that died (abandoned_reservations). A taken name
    // is a usage error.
    struct Reservation {
        std::string id;
        FileLock lock;
    };
    Reservation reserve(const std::string& name);
    // Sandbox directories a create reserved and never gave a record (it was
    // killed before its first save, or while rolling back), each with its
    // lock now held by the caller, who removes them. Under an exclusive hold
    // of reserve's window lock, so a reservation in progress is never one.
    struct Abandoned {
        std::string id;
        FileLock lock;
    };
    std::vector<Abandoned> abandoned_reservations() const;
    // Frees a name reserved for `id` (no-op if it points elsewhere).
    void release_name(const std::string& name, const std::string& id);
    // Removes names whose sandbox is gone (an rm killed between renaming the
    // directory and freeing its name); reserve does the same for the one
    // name it wants. Returns how many went.
    int sweep_stale_names() const;

    // By exact id, exact name, or unique id prefix (at least 4 characters).
    // Throws not_found (exit 4) otherwise.
    std::string resolve_id(const std::string& id_or_name) const;

    SandboxRecord load(const std::string& id) const;
    std::optional<SandboxRecord> try_load(const std::string& id) const;
    // `live` for a change that a host crash makes moot (it ends the sandbox):
    // see Durability in fsutil.hpp.
    void save(const SandboxRecord& r, Durability durability = Durability::durable) const;
    std::vector<SandboxRecord> list() const;

    FileLock lock(const std::string& id) const;

  private:
    std::filesystem::path root_;
};

// RFC 3339 UTC timestamp for now.
std::string now_rfc3339();

}  // namespace sandweave
