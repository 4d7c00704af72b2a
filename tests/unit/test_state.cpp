// lib/state: the on-disk store. Ids and names are reserved atomically, a sandbox
// is found by id, name or unique prefix, records survive a save/load round trip
// and are replaced atomically (no torn or temp files left behind).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <regex>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "fixtures.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/store/state.hpp"

using namespace sandweave;
using sandweave::test::TempDir;
namespace fs = std::filesystem;

namespace {

SandboxRecord record(const std::string& id, const std::string& name,
                     const std::string& created_at) {
    SandboxRecord r;
    r.id = id;
    r.name = name;
    r.state = SandboxState::running;
    r.created_at = created_at;
    r.spec.template_name = "base";
    r.spec.image = "base";
    r.spec.user = UserSpec{1001, 1002};
    r.spec.env = {{"LANG", "C.UTF-8"}};
    r.spec.cwd = "/srv";
    r.spec.runtime.hidepid = 2;
    r.spec.runtime.audit = true;
    r.spec.runtime.audit_max_bytes = 8ull << 30;
    r.spec.labels = {{"episode", "7"}};
    r.spec.origin = {{"/runtime_options/hidepid", "flag"}};
    r.spec.resources.memory = 1ull << 30;
    r.runsc = "/usr/bin/runsc";
    r.runtime_version = "runsc version test";
    r.runsc_flags = {"--root=/x/runsc", "--platform=ptrace", "--network=none"};
    return r;
}

using sandweave::test::code_of;

}  // namespace

TEST_SUITE("state") {
    TEST_CASE("the store creates its layout") {
        TempDir t("state");
        StateStore store(t.path / "state");
        for (const char* sub : {"sandboxes", "names", "runsc", "images"}) {
            CAPTURE(sub);
            CHECK(fs::is_directory(t.path / "state" / sub));
        }
        CHECK(store.sandbox_dir("sw-000000000000") == t.path / "state/sandboxes/sw-000000000000");
        CHECK(store.runsc_root() == t.path / "state/runsc");
    }

    TEST_CASE("a state directory that is a file or not writable is refused") {
        TempDir t("state");
        fs::path file = t.path / "file";
        write_file_atomic(file, "x");
        CHECK_THROWS_AS(StateStore{file}, Error);
        CHECK_THROWS_AS(StateStore{file / "below"}, Error);
    }

    TEST_CASE("reserve hands out fresh sw-<12 hex> ids with their directory") {
        TempDir t("state");
        StateStore store(t.path);
        std::set<std::string> ids;
        for (int i = 0; i < 50; ++i) {
            std::string id = store.reserve("").id;
            CHECK(std::regex_match(id, std::regex("^sw-[0-9a-f]{12}$")));
            CHECK(is_sandbox_id(id));
            CHECK(fs::is_directory(store.sandbox_dir(id)));
            ids.insert(id);
        }
        CHECK(ids.size() == 50u);
        // Only that form: not another program's name that begins alike.
        for (const char* other : {"sw-", "sw-0123456789a", "sw-0123456789abc", "sw-0123456789AB",
                                  "sw-bench-episodes", "xx-0123456789ab", "sw-0123456789a/"})
            CHECK_FALSE(is_sandbox_id(other));
    }

    TEST_CASE("a name is reserved once; a taken or invalid name is a usage error") {
        TempDir t("state");
        StateStore store(t.path);
        std::string id = store.reserve("web").id;
        CHECK(fs::is_symlink(t.path / "names/web"));
        CHECK(code_of([&] { store.reserve("web"); }) == ErrorCode::usage);
        for (const char* bad : {"../escape", "a/b", ".hidden", "-dash", "with space", ""}) {
            if (std::string(bad).empty()) continue;  // empty means "no name"
            std::string shown_bad = bad;
            CAPTURE(shown_bad);
            CHECK(code_of([&] { store.reserve(bad); }) == ErrorCode::usage);
        }
        CHECK(code_of([&] { store.reserve(std::string(65, 'a')); }) == ErrorCode::usage);
        // A failed reservation leaves no directory behind.
        std::size_t dirs = 0;
        for ([[maybe_unused]] const auto& e : fs::directory_iterator(t.path / "sandboxes")) ++dirs;
        CHECK(dirs == 1u);

        store.release_name("web", "sw-not-the-owner");
        CHECK(fs::is_symlink(t.path / "names/web"));
        store.release_name("web", id);
        CHECK_FALSE(fs::exists(fs::symlink_status(t.path / "names/web")));
        CHECK_NOTHROW(store.reserve("web"));
    }

    TEST_CASE("concurrent reservations of one name: exactly one wins") {
        TempDir t("state");
        StateStore store(t.path);
        std::atomic<int> won{0}, lost{0};
        std::vector<std::thread> threads;
        for (int i = 0; i < 8; ++i)
            threads.emplace_back([&] {
                try {
                    store.reserve("only-one");
                    ++won;
                } catch (const Error&) {
                    ++lost;
                }
            });
        for (auto& th : threads) th.join();
        CHECK(won == 1);
        CHECK(lost == 7);
    }

    TEST_CASE("resolve_id by exact id, name and unique prefix") {
        TempDir t("state");
        StateStore store(t.path);
        std::string a = store.reserve("alpha").id;
        store.save(record(a, "alpha", "2024-01-01T00:00:00Z"));

        CHECK(store.resolve_id(a) == a);
        CHECK(store.resolve_id("alpha") == a);
        CHECK(store.resolve_id(a.substr(0, 7)) == a);  // "sw-" + 4 hex
        CHECK(store.resolve_id(a.substr(3, 6)) == a);  // prefix without "sw-"

        CHECK(code_of([&] { store.resolve_id("nosuch"); }) == ErrorCode::not_found);
        CHECK(code_of([&] { store.resolve_id("sw-ffffffffffff"); }) == ErrorCode::not_found);
        CHECK(code_of([&] { store.resolve_id("../sandboxes"); }) == ErrorCode::not_found);
        CHECK(code_of([&] { store.resolve_id(".."); }) == ErrorCode::not_found);
        CHECK_THROWS_AS(store.resolve_id(""), Error);
        CHECK(code_of([&] { store.resolve_id(a.substr(3, 3)); }) ==
              ErrorCode::not_found);  // too short

        // A reserved id with no record yet (a create in progress) is not resolvable.
        std::string pending = store.reserve("").id;
        CHECK(code_of([&] { store.resolve_id(pending); }) == ErrorCode::not_found);
    }

    TEST_CASE("an ambiguous prefix is an error, not a guess") {
        TempDir t("state");
        StateStore store(t.path);
        for (const char* id : {"sw-abcd11111111", "sw-abcd22222222"}) {
            fs::create_directory(store.sandbox_dir(id));
            store.save(record(id, "", "2024-01-01T00:00:00Z"));
        }
        CHECK_THROWS_AS(store.resolve_id("sw-abcd"), Error);
        CHECK_THROWS_AS(store.resolve_id("abcd"), Error);
        CHECK(store.resolve_id("sw-abcd1") == "sw-abcd11111111");
    }

    TEST_CASE("save/load round trip, atomically, with mode 0600") {
        TempDir t("state");
        StateStore store(t.path);
        std::string id = store.reserve("rt").id;
        SandboxRecord r = record(id, "rt", "2024-05-06T07:08:09Z");
        r.error = "why it failed";
        r.stopped_at = "2024-05-06T08:00:00Z";
        r.limits_at_stop = nlohmann::json{{"memory", {{"oom_kills", 1}, {"failcnt", 3}}}};
        store.save(r);
        r.state = SandboxState::stopped;
        store.save(r);  // replacing an existing record

        SandboxRecord back = store.load(id);
        CHECK(to_json(back) == to_json(r));
        CHECK(back.state == SandboxState::stopped);
        CHECK(back.spec.runtime.hidepid == 2);
        CHECK(back.spec.runtime.audit_max_bytes == 8ull << 30);
        CHECK(back.spec.user.gid == 1002u);
        CHECK(back.runsc_flags == r.runsc_flags);
        REQUIRE(back.error);
        CHECK(*back.error == "why it failed");
        REQUIRE(back.limits_at_stop);
        CHECK((*back.limits_at_stop)["memory"]["oom_kills"] == 1);

        // Only the record and the lock reserve made (no temp files) are left.
        std::vector<std::string> files;
        for (const auto& e : fs::directory_iterator(store.sandbox_dir(id)))
            files.push_back(e.path().filename());
        std::sort(files.begin(), files.end());
        CHECK(files == std::vector<std::string>{"lock", "sandbox.json"});
        struct stat st {};
        REQUIRE(::stat((store.sandbox_dir(id) / "sandbox.json").c_str(), &st) == 0);
        CHECK((st.st_mode & 0777) == 0600);

        CHECK_FALSE(store.try_load("sw-ffffffffffff").has_value());
        CHECK(store.try_load(id).has_value());
    }

    TEST_CASE("a corrupt record is an error naming the file") {
        TempDir t("state");
        StateStore store(t.path);
        std::string id = store.reserve("").id;
        write_file_atomic(store.sandbox_dir(id) / "sandbox.json", "{ not json");
        try {
            store.load(id);
            FAIL("load of a corrupt record succeeded");
        } catch (const Error& e) {
            CHECK(std::string(e.what()).find("sandbox.json") != std::string::npos);
        }
    }

    TEST_CASE(
        "list returns saved records oldest first, skipping reservations and corrupt records") {
        TempDir t("state");
        StateStore store(t.path);
        std::string late = store.reserve("late").id;
        store.save(record(late, "late", "2024-03-01T00:00:00Z"));
        std::string early = store.reserve("early").id;
        store.save(record(early, "early", "2024-01-01T00:00:00Z"));
        store.reserve("pending");  // no record yet
        std::string corrupt = store.reserve("").id;
        write_file_atomic(store.sandbox_dir(corrupt) / "sandbox.json", "[]");

        auto list = store.list();
        REQUIRE(list.size() == 2u);
        CHECK(list[0].id == early);
        CHECK(list[1].id == late);
        CHECK(list[0].name == "early");
    }

    TEST_CASE("state names round trip") {
        for (auto s : {SandboxState::creating, SandboxState::running, SandboxState::stopped,
                       SandboxState::failed})
            CHECK(sandbox_state_from_string(to_string(s)) == s);
        CHECK(to_string(SandboxState::failed) == "failed");
        CHECK(std::regex_match(now_rfc3339(), std::regex(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$)")));
    }

    TEST_CASE("every kind resolves by the same rule: id, then name, then a unique prefix") {
        TempDir t;
        StateStore store(t.path);
        ObjectDir snaps = store.objects(snapshot_kind);
        CHECK(snaps.path() == t.path / "snapshots");
        auto make_snapshot = [&](const std::string& id, const std::string& name) {
            fs::create_directories(snaps.path() / id);
            write_file_atomic(snaps.path() / id / "snapshot.json",
                              nlohmann::json{{"id", id}, {"name", name}}.dump());
        };
        make_snapshot("snap-abcd11111111", "first");
        make_snapshot("snap-abcd22222222", "snap-abcd1");  // a name that looks like a prefix
        fs::create_directories(snaps.path() / "snap-ffff00000000");       // corrupt: no record
        fs::create_directories(snaps.path() / ".tmp-snap-abcd33333333");  // a build in progress

        CHECK(snaps.resolve("snap-abcd11111111") == "snap-abcd11111111");
        CHECK(snaps.resolve("first") == "snap-abcd11111111");
        CHECK(snaps.resolve("snap-abcd1") == "snap-abcd22222222");         // the name wins
        CHECK(snaps.resolve("abcd2") == "snap-abcd22222222");              // prefix without "snap-"
        CHECK(snaps.resolve("snap-ffff00000000") == "snap-ffff00000000");  // found, if corrupt
        CHECK(snaps.resolve("ffff") == "snap-ffff00000000");
        CHECK(code_of([&] { snaps.resolve("abcd"); }) == ErrorCode::usage);       // ambiguous
        CHECK(code_of([&] { snaps.resolve("abc"); }) == ErrorCode::not_found);    // too short
        CHECK(code_of([&] { snaps.resolve("abcd3"); }) == ErrorCode::not_found);  // hidden build
        CHECK(code_of([&] { snaps.resolve(".tmp-snap-abcd33333333"); }) == ErrorCode::usage);
        CHECK(code_of([&] { snaps.resolve("../sandboxes"); }) == ErrorCode::usage);
        auto ids = snaps.ids();
        std::sort(ids.begin(), ids.end());
        CHECK(ids == std::vector<std::string>{"snap-abcd11111111", "snap-abcd22222222",
                                              "snap-ffff00000000"});

        // Kinds whose ids are user-chosen names match exactly, never by prefix.
        ObjectDir pools = store.objects(pool_kind);
        fs::create_directories(pools.path() / "webserver");
        write_file_atomic(pools.path() / "webserver/pool.json", "{}");
        fs::create_directories(pools.path() / "half-made");  // no record: not a pool
        CHECK(pools.resolve("webserver") == "webserver");
        CHECK(code_of([&] { pools.resolve("webs"); }) == ErrorCode::not_found);
        CHECK(code_of([&] { pools.resolve("half-made"); }) == ErrorCode::not_found);
        CHECK(code_of([&] { pools.resolve("-bad"); }) == ErrorCode::usage);
        CHECK(pools.ids() == std::vector<std::string>{"webserver"});
    }

    TEST_CASE("lookup errors keep each kind's words and exit codes") {
        TempDir t;
        StateStore store(t.path);
        auto message = [](const std::function<void()>& fn) {
            try {
                fn();
            } catch (const Error& e) {
                return std::string(e.what());
            }
            return std::string("no error");
        };
        CHECK(message([&] { store.resolve_id("nosuch"); }) == "no such sandbox: nosuch");
        CHECK(message([&] { store.resolve_id(""); }) == "empty sandbox id");
        CHECK(message([&] { store.objects(snapshot_kind).resolve("nosuch"); }) ==
              "no such snapshot: nosuch");
        CHECK(message([&] { store.objects(snapshot_kind).resolve("a/b"); }) ==
              "invalid snapshot id 'a/b'");
        CHECK(message([&] { store.objects(pool_kind).resolve("nosuch"); }) ==
              "no such pool: nosuch");
        CHECK(message([&] { store.objects(pool_kind).resolve("a/b"); }) ==
              "invalid pool name 'a/b': use letters, digits, '-', '_' or '.'");
        CHECK(message([&] { store.objects(image_kind).resolve("nosuch"); }) ==
              "no such image: nosuch");
        CHECK(code_of([&] { store.objects(image_kind).resolve("../x"); }) == ErrorCode::not_found);

        for (const char* id : {"sw-abcd11111111", "sw-abcd22222222"}) {
            fs::create_directory(store.sandbox_dir(id));
            store.save(record(id, "", "2024-01-01T00:00:00Z"));
        }
        CHECK(message([&] { store.resolve_id("abcd"); }) ==
              "sandbox id 'abcd' is ambiguous (2 matches)");
        for (const char* id : {"snap-abcd11111111", "snap-abcd22222222"})
            fs::create_directories(store.objects(snapshot_kind).path() / id);
        CHECK(message([&] { store.objects(snapshot_kind).resolve("abcd"); }) ==
              "snapshot 'abcd' is ambiguous");
    }

    TEST_CASE("a reservation whose creator is gone before its first record is abandoned") {
        TempDir t("state");
        StateStore store(t.path);
        auto live = store.reserve("live");  // its creator still holds the lock
        std::string saved = store.reserve("saved").id;
        store.save(record(saved, "saved", "2024-01-01T00:00:00Z"));
        std::string dead = store.reserve("dead").id;  // lock released, no record

        auto found = store.abandoned_reservations();
        REQUIRE(found.size() == 1u);
        CHECK(found[0].id == dead);
        CHECK(found[0].lock.locked());
        // Held by the sweeper until it is done: a second sweeper skips it.
        CHECK(store.abandoned_reservations().empty());
    }

    TEST_CASE("an empty record (a host crash before its data reached the disk) reads as none") {
        TempDir t("state");
        StateStore store(t.path);
        std::string cut = store.reserve("cut").id;  // lock released: its creator is gone
        write_file_atomic(store.sandbox_dir(cut) / "sandbox.json", "", 0600, Durability::live);
        auto held = store.reserve("held");  // its creator still holds the lock
        write_file_atomic(store.sandbox_dir(held.id) / "sandbox.json", "", 0600, Durability::live);

        CHECK_FALSE(store.try_load(cut).has_value());
        CHECK(store.list().empty());
        auto found = store.abandoned_reservations();
        REQUIRE(found.size() == 1u);
        CHECK(found[0].id == cut);
    }

    TEST_CASE("removal renames first, then removes, and leaves nothing behind") {
        TempDir t;
        StateStore store(t.path);
        std::string id = store.reserve("doomed").id;
        store.save(record(id, "doomed", "2024-01-01T00:00:00Z"));
        fs::create_directories(store.sandbox_dir(id) / "upper/deep");
        write_file_atomic(store.sandbox_dir(id) / "upper/deep/file", "x");

        bool ran = false;
        store.objects(sandbox_kind).remove(id, [&] {
            ran = true;
            // Gone for everyone else before a single file is removed.
            CHECK_FALSE(fs::exists(store.sandbox_dir(id)));
            CHECK(code_of([&] { store.resolve_id(id); }) == ErrorCode::not_found);
            CHECK(store.list().empty());
            store.release_name("doomed", id);
        });
        CHECK(ran);
        CHECK(fs::is_empty(t.path / "sandboxes"));  // no graveyard, no lock file
        CHECK_FALSE(fs::exists(t.path / "names/doomed"));
        // Removed by someone else meanwhile: not found (exit 4), like any lookup.
        CHECK(code_of([&] { store.objects(sandbox_kind).remove(id); }) == ErrorCode::not_found);

        // A kind whose names are reused: bury() twice under one name never collides.
        ObjectDir images = store.objects(image_kind);
        std::vector<fs::path> graves;
        for (int i = 0; i < 2; ++i) {
            fs::create_directories(images.path() / "base/rootfs");
            write_file_atomic(images.path() / "base/image.json", "{}");
            graves.push_back(images.bury("base"));
            CHECK_FALSE(images.exists("base"));
            CHECK(fs::exists(graves.back() / "rootfs"));
            CHECK(graves.back().filename().string().rfind(".rm-base-", 0) == 0);
        }
        CHECK(graves[0] != graves[1]);
        CHECK(images.ids().empty());  // graveyards are hidden
    }

    TEST_CASE("a sweep removes a killed remover's lone lock, never a held one") {
        TempDir t;
        StateStore store(t.path);
        ObjectDir sandboxes = store.objects(sandbox_kind);
        // Killed between taking its lock and renaming: the lock, no graveyard.
        const fs::path lone = sandboxes.path() / ".rm-sw-0123456789ab-00000000.lock";
        write_file_atomic(lone, "");
        // A remover at work: its lock held, its graveyard there.
        const fs::path grave = sandboxes.path() / ".rm-sw-0123456789ac-00000000";
        fs::create_directories(grave / "upper");
        FileLock held(grave.string() + ".lock");
        CHECK(sandboxes.sweep_graveyards() == 0);
        CHECK_FALSE(fs::exists(lone));
        CHECK(fs::exists(grave / "upper"));
        CHECK(fs::exists(grave.string() + ".lock"));
    }

    TEST_CASE("the layout has a directory for every kind") {
        TempDir t;
        StateStore store(t.path / "state");
        for (const ObjectKind* k : {&sandbox_kind, &snapshot_kind, &pool_kind, &image_kind}) {
            CAPTURE(k->noun);
            CHECK(fs::is_directory(store.objects(*k).path()));
        }
        CHECK(store.objects(image_kind).path() == store.images_dir());
        CHECK(store.objects(sandbox_kind).object_dir("sw-1") == store.sandbox_dir("sw-1"));
    }

}  // TEST_SUITE
