// sandweave cp's rules (wire/copy.c through lib/core/copy_stream): which
// paths and link targets stay inside a copy, what a hostile stream cannot
// make the receiver do, and docker cp's names and endpoints.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "lib/api/api.hpp"
#include "lib/core/copy_stream.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"

extern "C" {
#include "wire/copy.h"
}

namespace fs = std::filesystem;
using namespace sandweave;

namespace {

bool path_ok(const std::string& p) {
    return sw_copy_path_ok(p.data(), p.size()) == 0;
}

std::string record(std::uint8_t type, const std::string& path, const std::string& link = "",
                   const std::string& data = "", std::uint32_t mode = 0644) {
    sw_copy_entry e{};
    e.type = type;
    e.mode = mode;
    e.size = data.size();
    std::memcpy(e.path, path.c_str(), path.size() + 1);
    std::memcpy(e.link, link.c_str(), link.size() + 1);
    std::string out(SW_COPY_RECORD + path.size() + link.size(), '\0');
    out.resize(sw_copy_encode(&e, reinterpret_cast<unsigned char*>(out.data())));
    return out + data;
}

// Receives `stream` at dest; the error message, or "" when it succeeded.
std::string receive(const std::string& stream, const fs::path& dest, const std::string& name,
                    bool contents = false) {
    Pipe p = make_pipe();
    REQUIRE(stream.size() < 60000);  // fits the pipe
    REQUIRE(write_all(p.write.get(), stream));
    p.write.reset();
    try {
        copy::receive_local(p.read.get(), dest.string(), name, contents);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

struct TempDir {
    fs::path path;
    TempDir() {
        char tmpl[] = "/tmp/sw-unit-cp.XXXXXX";
        path = ::mkdtemp(tmpl);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::size_t entries() const {
        return static_cast<std::size_t>(std::distance(fs::directory_iterator(path), {}));
    }
};

}  // namespace

TEST_CASE("copy entry paths: plain relative names only") {
    CHECK(path_ok("a"));
    CHECK(path_ok("a/b/c.txt"));
    CHECK(path_ok(".hidden/..x"));
    CHECK_FALSE(path_ok(""));
    CHECK_FALSE(path_ok("/abs"));
    CHECK_FALSE(path_ok("../x"));
    CHECK_FALSE(path_ok("a/../../x"));
    CHECK_FALSE(path_ok("a/./b"));
    CHECK_FALSE(path_ok("a//b"));
    CHECK_FALSE(path_ok("a/"));
    CHECK_FALSE(path_ok(std::string("a\0b", 3)));
    CHECK_FALSE(path_ok(std::string(256, 'x')));
    CHECK(path_ok(std::string(255, 'x')));
}

TEST_CASE("copy symlinks: a link inside a tree may not point out of it") {
    CHECK(sw_copy_link_ok("l", "target") == 0);
    CHECK(sw_copy_link_ok("d/l", "../target") == 0);
    CHECK(sw_copy_link_ok("d/e/l", "../../x/./y") == 0);
    CHECK(sw_copy_link_ok("l", "../escape") != 0);
    CHECK(sw_copy_link_ok("d/l", "../../escape") != 0);
    CHECK(sw_copy_link_ok("d/l", "x/../../../escape") != 0);
    CHECK(sw_copy_link_ok("l", "/etc/passwd") != 0);
    CHECK(sw_copy_link_ok("l", "") != 0);
    // The copied path itself: kept as it is, never followed.
    CHECK(sw_copy_link_ok("", "/etc/passwd") == 0);
}

TEST_CASE("copy names and endpoints, as docker cp") {
    CHECK(copy::root_name("/a/b") == "b");
    CHECK(copy::root_name("/a/b/") == "b");
    CHECK(copy::root_name("/a/b/.") == "b");
    CHECK(copy::root_name("/") == ".");
    CHECK(copy::wants_contents("/a/."));
    CHECK_FALSE(copy::wants_contents("/a/.x"));
    auto e = api::parse_copy_endpoint("sw-1:/tmp/x");
    CHECK(e.sandbox == std::optional<std::string>("sw-1"));
    CHECK(e.path == "/tmp/x");
    CHECK_FALSE(api::parse_copy_endpoint("./a:b").sandbox);
    CHECK_FALSE(api::parse_copy_endpoint("/abs/a:b").sandbox);
    CHECK_FALSE(api::parse_copy_endpoint("-").sandbox);
    // Relative to the sandbox's working directory, resolved in the guest.
    auto rel = api::parse_copy_endpoint("sw-1:relative/x");
    CHECK(rel.sandbox == std::optional<std::string>("sw-1"));
    CHECK(rel.path == "relative/x");
    CHECK_THROWS_AS(api::parse_copy_endpoint("sw-1:"), Error);
}

TEST_CASE("a hostile stream cannot write outside, through a symlink, or half a copy") {
    TempDir t;
    std::string root = record(SW_ENT_DIR, "", "", "", 0755);
    SUBCASE("a member with .. is refused, nothing written") {
        // Received one level down, so `..` names this test's own directory,
        // not the shared temporary directory where an `x` may well exist.
        fs::create_directory(t.path / "in");
        auto err = receive(root + record(SW_ENT_FILE, "../x", "", "hi") + "Z", t.path / "in", "r");
        CHECK(err.find("refused") != std::string::npos);
        CHECK(fs::is_empty(t.path / "in"));
        CHECK_FALSE(fs::exists(t.path / "x"));
    }
    SUBCASE("a member through a symlink of the copy is refused") {
        auto err = receive(
            root + record(SW_ENT_SYMLINK, "l", "sub") + record(SW_ENT_FILE, "l/x", "", "hi") + "Z",
            t.path, "r");
        CHECK(err.find("refused") != std::string::npos);
        CHECK(t.entries() == 0);
    }
    SUBCASE("an absolute link target inside a tree is refused") {
        auto err = receive(root + record(SW_ENT_SYMLINK, "l", "/etc") + "Z", t.path, "r");
        CHECK(err.find("points outside") != std::string::npos);
        CHECK(t.entries() == 0);
    }
    SUBCASE("a stream cut short leaves nothing, and the old file intact") {
        std::ofstream(t.path / "f") << "old";
        auto err =
            receive(record(SW_ENT_FILE, "", "", "new content").substr(0, 50), t.path / "f", "f");
        CHECK(err.find("ended before") != std::string::npos);
        CHECK(t.entries() == 1);
        std::ifstream in(t.path / "f");
        std::string s;
        in >> s;
        CHECK(s == "old");
    }
    SUBCASE("a file content bigger than declared is not an entry") {
        auto err = receive(root + record(SW_ENT_FILE, "a", "", "12") + "34Z", t.path, "r");
        CHECK(err.find("malformed") != std::string::npos);
        CHECK(t.entries() == 0);
    }
    SUBCASE("a good tree lands under its name, modes applied") {
        auto err = receive(root + record(SW_ENT_DIR, "d", "", "", 0700) +
                               record(SW_ENT_FILE, "d/f", "", "hi", 0640) +
                               record(SW_ENT_SYMLINK, "d/l", "f") + "Z",
                           t.path, "r");
        CHECK(err == "");
        CHECK(fs::is_symlink(t.path / "r/d/l"));
        struct stat st {};
        REQUIRE(::stat((t.path / "r/d/f").c_str(), &st) == 0);
        CHECK((st.st_mode & 07777) == 0640);
        CHECK(t.entries() == 1);
    }
}
