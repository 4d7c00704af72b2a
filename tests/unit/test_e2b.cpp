// sandweave e2b's request decoding and keys (lib/e2b/wire.hpp, keys.hpp).
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/e2b/e2b.hpp"
#include "lib/e2b/keys.hpp"
#include "lib/e2b/wire.hpp"

using namespace sandweave;
using nlohmann::json;

TEST_CASE("e2b: a Connect envelope decodes only when whole and uncompressed") {
    std::string why;
    std::string env = e2b::envelope(json{{"process", {{"pid", 1000}}}});
    auto j = e2b::decode_stream_request(env, 1u << 20, why);
    REQUIRE(j);
    CHECK((*j)["process"]["pid"] == 1000);
    CHECK_FALSE(e2b::decode_stream_request(env.substr(0, env.size() - 1), 1u << 20, why));
    CHECK_FALSE(e2b::decode_stream_request(env + "x", 1u << 20, why));
    std::string compressed = env;
    compressed[0] = 1;
    CHECK_FALSE(e2b::decode_stream_request(compressed, 1u << 20, why));
    CHECK(why.find("compression") != std::string::npos);
    CHECK_FALSE(e2b::decode_stream_request(std::string("\0\xff\xff\xff\xff", 5), 1u << 20, why));
    CHECK_FALSE(e2b::decode_stream_request(e2b::envelope(json::array()), 1u << 20, why));
    CHECK_FALSE(e2b::decode_stream_request("", 1u << 20, why));
    // The end-of-stream frame: flag 2, an error when given.
    std::string fin = e2b::end_stream("not_found", "gone");
    CHECK(static_cast<unsigned char>(fin[0]) == 2);
    CHECK(json::parse(fin.substr(5))["error"]["code"] == "not_found");
}

TEST_CASE("e2b: JSON bodies are objects within the limit") {
    std::string why;
    CHECK(e2b::decode_json_object("", 10, why)->empty());
    CHECK(e2b::decode_json_object("{\"a\":1}", 10, why));
    CHECK_FALSE(e2b::decode_json_object("{\"a\":12345}", 10, why));
    CHECK_FALSE(e2b::decode_json_object("[1]", 100, why));
    CHECK_FALSE(e2b::decode_json_object("{", 100, why));
}

TEST_CASE("e2b: users") {
    CHECK(e2b::uid_of_user("root") == "0:0");
    CHECK(e2b::uid_of_user("user") == "1000:1000");
    CHECK(e2b::uid_of_user("1001") == "1001");
    CHECK(e2b::uid_of_user("1001:1002") == "1001:1002");
    CHECK_THROWS_AS(e2b::uid_of_user("alice"), Error);
    CHECK_THROWS_AS(e2b::uid_of_user("1:"), Error);
    CHECK_THROWS_AS(e2b::uid_of_user(""), Error);
    CHECK(e2b::basic_user("Basic dXNlcjo=") == std::optional<std::string>("user"));
    CHECK_FALSE(e2b::basic_user(""));
    CHECK_THROWS_AS(e2b::basic_user("Bearer x"), Error);
    CHECK_THROWS_AS(e2b::basic_user("Basic !!!"), Error);
}

TEST_CASE("e2b: the metadata filter is decoded twice, as the SDK encodes it") {
    auto m = e2b::parse_metadata_query("tag%3Da%2520b=x&n=1");
    REQUIRE(m);
    REQUIRE(m->size() == 2);
    CHECK((*m)[1] == std::pair<std::string, std::string>{"n", "1"});
    CHECK_FALSE(e2b::parse_metadata_query("novalue"));
    CHECK_FALSE(e2b::parse_metadata_query("a=%zz"));
    CHECK_FALSE(e2b::url_decode("%4"));
}

TEST_CASE("e2b: keys are stored hashed; tokens are per sandbox") {
    auto dir = std::filesystem::temp_directory_path() / ("sw-e2b-keys-" + random_hex(8));
    auto file = dir / "keys.json";
    std::string alice = e2b::add_key(file, "alice");
    std::string bob = e2b::add_key(file, "bob");
    CHECK(alice != bob);
    CHECK_THROWS_AS(e2b::add_key(file, "alice"), Error);
    CHECK_THROWS_AS(e2b::add_key(file, "a b"), Error);
    struct stat st {};
    REQUIRE(::stat(file.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    CHECK(read_file(file).find(alice) == std::string::npos);
    e2b::Keys keys(file);
    CHECK(keys.identity_of(alice) == std::optional<std::string>("alice"));
    CHECK(keys.identity_of(bob) == std::optional<std::string>("bob"));
    CHECK_FALSE(keys.identity_of("e2b_nope"));
    std::string t1 = keys.token_for("sw-1"), t2 = keys.token_for("sw-2");
    CHECK(t1 != t2);
    CHECK(keys.token_matches("sw-1", t1));
    CHECK_FALSE(keys.token_matches("sw-2", t1));
    e2b::remove_key(file, "bob");
    CHECK_FALSE(e2b::Keys(file).identity_of(bob));
    CHECK(e2b::Keys(file).token_for("sw-1") == t1);  // the secret stays
    std::filesystem::remove_all(dir);
}

TEST_CASE("e2b: the guest watcher's records, with entries, in any pieces") {
    const std::string out =
        "ready\n"
        "E 100640 5 1700000000 root users 12 /tmp/w/a.txt\n"
        "C 5 a.txt\n"
        "R 5 b.txt\n"
        "E 40755 4096 -1 1000 1000 8 /tmp/w/d\n"
        "W 1 d\n";
    // Fed a byte at a time or whole, the records are the same.
    for (std::size_t piece : {std::size_t{1}, std::size_t{7}, out.size()}) {
        e2b::WatchReader r;
        std::string why;
        std::vector<e2b::WatchRecord> got;
        for (std::size_t i = 0; i < out.size(); i += piece) {
            INFO("piece ", piece, " at ", i, ": ", why);
            REQUIRE(r.feed(std::string_view(out).substr(i, piece), why));
            for (auto& rec : r.take()) got.push_back(std::move(rec));
        }
        REQUIRE(got.size() == 3);
        CHECK(got[0].type == 'C');
        CHECK(got[0].name == "a.txt");
        REQUIRE(got[0].entry);
        CHECK(got[0].entry->mode == 0100640);
        CHECK(got[0].entry->size == 5);
        CHECK(got[0].entry->mtime == 1700000000);
        CHECK(got[0].entry->owner == "root");
        CHECK(got[0].entry->group == "users");
        CHECK(got[0].entry->path == "/tmp/w/a.txt");
        CHECK_FALSE(got[1].entry);
        REQUIRE(got[2].entry);
        CHECK(got[2].entry->mtime == -1);
        CHECK(got[2].entry->path == "/tmp/w/d");
    }
}

TEST_CASE("e2b: a malformed entry breaks the watch") {
    auto fails = [](const std::string& line) {
        e2b::WatchReader r;
        std::string why;
        bool ok = r.feed("ready\n" + line, why);
        return !ok && why.find("malformed") != std::string::npos;
    };
    CHECK(fails("E 100640 5 1 root root 5 /a/b/c\nC 1 c\n"));  // length is not the path's
    CHECK(fails("E 100648 5 1 root root 2 /a\nC 1 a\n"));      // mode not octal
    CHECK(fails("E 100644 -5 1 root root 2 /a\nC 1 a\n"));     // negative size
    CHECK(fails("E 100644 5 1 ro:ot root 2 /a\nC 1 a\n"));     // owner not a plain name
    CHECK(fails("E 100644 5 1 root root 1 a\nC 1 a\n"));       // path not absolute
    CHECK(fails("E 100644 5 1 root root 2 /a\nR 1 a\n"));      // entry for a removal
    CHECK(fails("E 100644 5 1 root root 2 /a\nE 100644 5 1 root root 2 /a\n"));
    CHECK(fails("E 100644 5 1 root root 99999 /a\n"));  // path too long
    CHECK(fails("E " + std::string(200, '1') + "\n"));  // header too long
}
