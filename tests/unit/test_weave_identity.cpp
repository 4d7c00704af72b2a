// Who a controller's client is: the token store (hashed, 0600), hello's
// credentials, and what an identity may see (lib/controller/identity.hpp).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "lib/controller/controller_api.hpp"
#include "lib/controller/identity.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/sha256.hpp"

using namespace sandweave;
using namespace sandweave::controller;
namespace fs = std::filesystem;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        char tmpl[] = "/tmp/sw-identity-XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_SUITE("weave identity") {
    TEST_CASE("a token is printed once and kept as its SHA-256 only, 0600") {
        TempDir d;
        TokenStore store(d.path);
        const std::string me = own_unix_user();
        std::string t = store.add("ops", true, "");
        CHECK(t.size() == 64);
        struct stat st {};
        REQUIRE(::stat((d.path / "tokens").c_str(), &st) == 0);
        CHECK((st.st_mode & 0777) == 0600);
        std::string text = read_file(d.path / "tokens");
        CHECK(text.find(t) == std::string::npos);
        CHECK(text.find(sha256_hex(t)) != std::string::npos);
        auto entries = store.list();
        REQUIRE(entries.size() == 1);
        CHECK(entries[0].name == "ops");
        CHECK(entries[0].unix_user == me);  // an admin's default: the controller's user
        CHECK(entries[0].admin);
        auto m = store.match(t);
        REQUIRE(m);
        CHECK(m->name == "ops");
        CHECK_FALSE(store.match(t + "x"));
        CHECK_FALSE(store.match(""));
    }

    TEST_CASE("token names are unique, valid, and name a Unix user that exists") {
        TempDir d;
        TokenStore store(d.path);
        const std::string me = "nobody";  // a user every Debian host has
        store.add("a", false, me);
        CHECK_THROWS_AS(store.add("a", false, me), Error);
        CHECK_THROWS_AS(store.add("bad name", false, me), Error);
        CHECK_THROWS_AS(store.add("../x", false, me), Error);
        CHECK_THROWS_AS(store.add("r", false, "root"), Error);  // root is an admin
        CHECK(store.add("r", true, "root").size() == 64);
        CHECK_THROWS_AS(store.add("b", false, "no-such-user-here"), Error);
        CHECK_THROWS_AS(store.add("no-such-user-here", false, ""), Error);  // user defaults to NAME
        store.remove("a");
        CHECK(store.list().size() == 1);
        try {
            store.remove("a");
            FAIL("removed twice");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::not_found);
        }
    }

    TEST_CASE("a token file others may read is refused") {
        TempDir d;
        TokenStore store(d.path);
        store.add("a", false, "nobody");
        ::chmod((d.path / "tokens").c_str(), 0644);
        CHECK_THROWS_AS(store.list(), Error);
    }

    TEST_CASE("hello: the admin token, a user token, or nothing") {
        TempDir d;
        TokenStore store(d.path);
        const std::string me = "nobody";
        std::string user_token = store.add("alice", false, me);
        Authenticator a{d.path, sha256_hex("the-admin-token"), ""};
        Identity admin = authenticate(a, {{"token", "the-admin-token"}});
        CHECK(admin.admin);
        CHECK(admin.name == "admin");
        Identity alice = authenticate(a, {{"token", user_token}});
        CHECK_FALSE(alice.admin);
        CHECK(alice.name == "alice");
        CHECK(alice.unix_user == me);
        CHECK_THROWS_WITH_AS(authenticate(a, {{"token", "wrong"}}),
                             "the controller did not accept the token", Error);
        CHECK_THROWS_AS(authenticate(a, nlohmann::json::object()), Error);
        CHECK_THROWS_AS(authenticate(a, {{"token", 5}}), Error);
        store.remove("alice");
        CHECK_THROWS_AS(authenticate(a, {{"token", user_token}}), Error);
    }

    TEST_CASE("an identity sees its Unix user's objects; an admin everyone's") {
        Identity alice{"alice-laptop", "alice", false, "token"};
        Identity ops{"ops", "root", true, "token"};
        CHECK(alice.sees("alice"));
        CHECK_FALSE(alice.sees("bob"));
        CHECK_FALSE(alice.sees(""));  // nobody's: an admin's to see
        CHECK(ops.sees("bob"));
        CHECK(ops.sees(""));
    }

    TEST_CASE("the caller is the thread's, the controller's when none") {
        CHECK(caller().admin);
        CHECK(caller().how == "controller");
        Identity alice{"alice", "alice", false, "token"};
        {
            CallerScope s(alice);
            CHECK(caller().name == "alice");
            Identity bob{"bob", "bob", false, "munge"};
            {
                CallerScope inner(bob);
                CHECK(caller().name == "bob");
            }
            CHECK(caller().name == "alice");
        }
        CHECK(caller().how == "controller");
    }

    TEST_CASE("a sandbox's owner: its job's user when not the controller's, else its label") {
        SandboxView v;
        v.record.spec.labels[owner_label] = "alice";
        CHECK(owner_of(v, own_unix_user()) == "alice");
        CHECK(owner_of(v, "") == "alice");
        CHECK(owner_of(v, "bob") == "bob");  // Slurm's record of a job made as its user
        CHECK(owner_of(SandboxView{}, own_unix_user()).empty());
    }
}
