// lib/sandbox/snapshot: the product's rules for snapshots, without a runtime.
// The kind a request gets (auto = fs with audit, memory otherwise; memory is
// refused with audit), the settings of a restore (flag > snapshot > template >
// default, each value saying where it came from; a memory restore cannot turn
// audit on or change hidepid), and the snapshot directory's housekeeping.
#include <doctest/doctest.h>

#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/sandbox/snapshot.hpp"
#include "tests/unit/fake_context.hpp"

using namespace sandweave;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

Error error_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const Error& e) {
        return e;
    }
    FAIL("expected a sandweave::Error");
    return Error(ErrorCode::general, "");
}

// The settings of a sandbox made from template "coding" (which sets image,
// user, cwd, env, hidepid 2 and audit), with --hidepid 1 on its command line.
SandboxSpec source_spec() {
    ResolvedTemplate t;
    t.name = "coding";
    t.doc = json::parse(R"({
        "image": "coding", "user": "1001:1001", "cwd": "/work", "env": {"LANG": "C.UTF-8"},
        "labels": {"team": "a"},
        "runtime_options": {"hidepid": 2, "audit": true, "platform": "ptrace", "network": "none"}
    })");
    for (const char* ptr :
         {"/image", "/user", "/cwd", "/env/LANG", "/labels/team", "/runtime_options/hidepid",
          "/runtime_options/audit", "/runtime_options/platform", "/runtime_options/network"})
        t.origin[ptr] = "coding";
    FlagOverrides flags;
    flags.hidepid = 1;
    return resolve_spec(t, nullptr, "", flags);
}

SnapshotRecord snapshot_of(const SandboxSpec& spec, SnapshotKind kind) {
    SnapshotRecord s;
    s.id = "snap-0123456789ab";
    s.name = "ready";
    s.kind = kind;
    s.source = "sw-0123456789ab";
    s.spec = spec;
    s.runsc = "/usr/local/lib/sandweave/runsc";
    return s;
}

void write_snapshot(const fs::path& root, const SnapshotRecord& s) {
    make_dirs(root / s.id / "layer", 0700);
    write_file_atomic(root / s.id / "snapshot.json", to_json(s).dump(2));
}

}  // namespace

TEST_SUITE("snapshot") {
    TEST_CASE("kind: auto is fs with audit and memory without; memory is refused with audit") {
        CHECK(choose_snapshot_kind("auto", true, "sw-1") == SnapshotKind::fs);
        CHECK(choose_snapshot_kind("auto", false, "sw-1") == SnapshotKind::memory);
        CHECK(choose_snapshot_kind("fs", true, "sw-1") == SnapshotKind::fs);
        CHECK(choose_snapshot_kind("fs", false, "sw-1") == SnapshotKind::fs);
        CHECK(choose_snapshot_kind("memory", false, "sw-1") == SnapshotKind::memory);

        Error refused = error_of([] { choose_snapshot_kind("memory", true, "sw-1"); });
        CHECK(refused.code() == ErrorCode::usage);
        std::string why = refused.what();
        CHECK(why.find("sw-1") != std::string::npos);
        CHECK(why.find("audit") != std::string::npos);

        Error unknown = error_of([] { choose_snapshot_kind("disk", false, "sw-1"); });
        CHECK(unknown.code() == ErrorCode::usage);
        CHECK(std::string(unknown.what()).find("'disk'") != std::string::npos);
        // The library speaks of kinds, not of command-line flags.
        CHECK(why.find("--") == std::string::npos);
        CHECK(std::string(unknown.what()).find("--") == std::string::npos);
    }

    TEST_CASE("restore settings: flag > snapshot > template > default, with origins") {
        SandboxSpec src = source_spec();
        REQUIRE(src.runtime.hidepid == 1);
        REQUIRE(src.origin.at("/runtime_options/hidepid") == "flag");
        SnapshotRecord snap = snapshot_of(src, SnapshotKind::fs);

        SandboxSpec same = spec_for_restore(snap, {});
        // The snapshot's own hidepid and audit form the snapshot layer...
        CHECK(same.runtime.hidepid == 1);
        CHECK(same.origin.at("/runtime_options/hidepid") == "snapshot ready");
        CHECK(same.runtime.audit);
        CHECK(same.origin.at("/runtime_options/audit") == "snapshot ready");
        // ... everything else keeps the value and the origin it had in the source.
        CHECK(same.template_name == "coding");
        CHECK(same.image == "coding");
        CHECK(same.origin.at("/image") == "template coding");
        CHECK(same.user.uid == 1001u);
        CHECK(same.origin.at("/user") == "template coding");
        CHECK(same.cwd == "/work");
        CHECK(same.env.at("LANG") == "C.UTF-8");
        CHECK(same.origin.at("/runtime_options/platform") == "template coding");
        CHECK(same.runtime.audit_max_bytes == default_audit_max_bytes);
        CHECK(same.origin.at("/runtime_options/audit_max_bytes") == "default");

        // Explicit flags win over the snapshot.
        FlagOverrides flags;
        flags.hidepid = 0;
        flags.audit = false;
        flags.user = UserSpec{0, 0};
        flags.labels = {{"episode", "7"}};
        SandboxSpec over = spec_for_restore(snap, flags);
        CHECK(over.runtime.hidepid == 0);
        CHECK(over.origin.at("/runtime_options/hidepid") == "flag");
        CHECK_FALSE(over.runtime.audit);
        CHECK(over.origin.at("/runtime_options/audit") == "flag");
        CHECK(over.user.uid == 0u);
        CHECK(over.origin.at("/user") == "flag");
        CHECK(over.labels.at("episode") == "7");
        CHECK(over.labels.at("team") == "a");  // merged with the snapshot's
        CHECK(over.image == "coding");

        // Unnamed, the snapshot layer is labelled by id.
        snap.name.clear();
        CHECK(spec_for_restore(snap, {}).origin.at("/runtime_options/hidepid") ==
              "snapshot snap-0123456789ab");
    }

    TEST_CASE("a memory restore cannot turn audit on or change hidepid") {
        SandboxSpec src = source_spec();
        src.runtime.audit = false;  // memory snapshots exist only without audit
        SnapshotRecord snap = snapshot_of(src, SnapshotKind::memory);

        CHECK_NOTHROW(spec_for_restore(snap, {}));
        FlagOverrides same_hidepid;
        same_hidepid.hidepid = 1;
        CHECK(spec_for_restore(snap, same_hidepid).runtime.hidepid == 1);
        FlagOverrides no_audit;
        no_audit.audit = false;
        CHECK_NOTHROW(spec_for_restore(snap, no_audit));

        FlagOverrides audit;
        audit.audit = true;
        Error a = error_of([&] { spec_for_restore(snap, audit); });
        CHECK(a.code() == ErrorCode::usage);
        CHECK(std::string(a.what()).find("memory snapshot") != std::string::npos);

        FlagOverrides hidepid;
        hidepid.hidepid = 2;
        Error h = error_of([&] { spec_for_restore(snap, hidepid); });
        CHECK(h.code() == ErrorCode::usage);
        CHECK(std::string(h.what()).find("hidepid 1") != std::string::npos);

        // The same flags are fine for a filesystem snapshot.
        snap.kind = SnapshotKind::fs;
        CHECK(spec_for_restore(snap, audit).runtime.audit);
        CHECK(spec_for_restore(snap, hidepid).runtime.hidepid == 2);
    }

    TEST_CASE(
        "load and remove: by id, name or prefix; a corrupt snapshot is an error, and removable") {
        FakeContext f;
        fs::path root = f.store.objects(snapshot_kind).path();
        SnapshotRecord good = snapshot_of(source_spec(), SnapshotKind::fs);
        write_snapshot(root, good);
        make_dirs(root / "snap-badbadbadbad", 0700);  // its record is missing

        CHECK(load_snapshot(f.ctx, "ready").id == good.id);
        CHECK(load_snapshot(f.ctx, "0123").id == good.id);
        CHECK(load_snapshot(f.ctx, good.id).spec.image == "coding");
        Error corrupt = error_of([&] { load_snapshot(f.ctx, "snap-badbadbadbad"); });
        CHECK(corrupt.code() == ErrorCode::general);
        CHECK(std::string(corrupt.what()).find("corrupt") != std::string::npos);
        CHECK(error_of([&] { load_snapshot(f.ctx, "nosuch"); }).code() == ErrorCode::not_found);

        CHECK(list_snapshots(f.ctx).size() == 1u);  // the corrupt one is skipped
        CHECK(remove_snapshot(f.ctx, "badb") == "snap-badbadbadbad");
        CHECK(remove_snapshot(f.ctx, "ready") == good.id);
        CHECK(error_of([&] { remove_snapshot(f.ctx, "ready"); }).code() == ErrorCode::not_found);
        CHECK(fs::is_empty(root));
    }

    TEST_CASE("the sweep removes abandoned builds, never one still being built") {
        FakeContext f;
        fs::path root = f.store.objects(snapshot_kind).path();
        make_dirs(root / ".tmp-snap-aaaaaaaaaaaa/layer", 0700);
        FileLock building(root / ".tmp-snap-aaaaaaaaaaaa.lock");  // its builder is alive
        make_dirs(root / ".tmp-snap-bbbbbbbbbbbb/layer", 0700);   // its builder died

        list_snapshots(f.ctx);
        list_snapshots(f.ctx);  // a second pass once saw the first one's work
        CHECK(fs::is_directory(root / ".tmp-snap-aaaaaaaaaaaa"));
        CHECK(fs::exists(root / ".tmp-snap-aaaaaaaaaaaa.lock"));
        CHECK_FALSE(fs::exists(root / ".tmp-snap-bbbbbbbbbbbb"));
        CHECK_FALSE(fs::exists(root / ".tmp-snap-bbbbbbbbbbbb.lock"));
    }
}  // TEST_SUITE
