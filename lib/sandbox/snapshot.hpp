#pragma once
// Snapshots of a running sandbox, with the product's rules for hidepid and audit
// (docs/design.md, "Snapshots"):
//   fs      the sandbox's writable layer (its overlay upper directory, taken
//           while the sandbox is paused after a guest `sync`) plus its settings.
//           Restoring creates a fresh sandbox with a new audit stream: no
//           earlier record is part of a snapshot.
//   memory  `runsc checkpoint` plus the writable layer at the same instant; the
//           source is restored in place and keeps running. Refused with audit
//           (trace continuity across a live restore is not supported), and a
//           restore cannot change hidepid.
//   auto    fs when audit is on, memory otherwise.
// A snapshot is built in a temporary directory under a lock, verified (read
// back, settings parse), then renamed into place: `snapshot ls` never shows a
// half-written one, and a crashed build is swept by the next snapshot command.
//
//   <state>/snapshots/<id>/snapshot.json   the record
//                           layer/         copy of the upper directory
//                           checkpoint/    runsc checkpoint image (memory)

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/options/options.hpp"
#include "lib/sandbox/context.hpp"
#include "lib/sandbox/records.hpp"

namespace sandweave {

struct SnapshotRequest {
    std::string sandbox;
    std::string kind = "auto";  // fs | memory | auto
    std::string name;
};

SnapshotRecord create_snapshot(Context& ctx, const SnapshotRequest& req);

// The kind a request gets: fs or memory as asked, auto is fs when the sandbox
// has audit on or a network and memory otherwise. A memory snapshot of an
// audited sandbox or one with a network is refused, and so is an unknown kind
// (all exit 2).
SnapshotKind choose_snapshot_kind(const std::string& requested, bool audit,
                                  const std::string& sandbox_id, bool network = false);
std::vector<SnapshotRecord> list_snapshots(Context& ctx);
// Finishes what killed snapshot commands left: a source left paused is
// resumed, one left stopped by a memory checkpoint is restored from it, and
// their temporary directories go. ls and prune call it too.
void recover_interrupted_snapshots(Context& ctx);
// By id, name or unique id prefix; throws not_found (exit 4) or a clear error
// for a corrupt snapshot.
SnapshotRecord load_snapshot(Context& ctx, const std::string& ref);
// Removes a snapshot, also a corrupt one (by exact id); returns its id.
std::string remove_snapshot(Context& ctx, const std::string& ref);

std::filesystem::path snapshot_dir(Context& ctx, const std::string& id);

// cp -a (reflinks where the filesystem has them) of a directory's contents.
void copy_tree(Context& ctx, const std::filesystem::path& from, const std::filesystem::path& to);

// The spec of a sandbox restored from `snap`, with the command line's explicit
// flags on top (flag > snapshot > its template > default). Refuses what the
// seed forbids for memory snapshots (exit 2).
SandboxSpec spec_for_restore(const SnapshotRecord& snap, const FlagOverrides& flags);

}  // namespace sandweave
