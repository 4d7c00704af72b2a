// lib/core/json_input and the temp-file helpers of lib/core/fsutil: what keeps
// hostile input from overflowing a stack or ending in an internal error, and
// what a killed export leaves from staying.
#include <doctest/doctest.h>

#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"

using namespace sandweave;

TEST_SUITE("json_input") {
    TEST_CASE("nesting is counted outside strings only") {
        CHECK(json_depth_within("[[1]]", 2));
        CHECK_FALSE(json_depth_within("[[[1]]]", 2));
        CHECK(json_depth_within(R"({"a":"[[[[{{{{"})", 1));
        CHECK(json_depth_within(R"({"a":"\"[[[["})", 1));  // an escaped quote stays inside
        CHECK(json_depth_within(R"({"a":"\\"} )", 1));     // an escaped backslash ends nothing
        CHECK_FALSE(json_depth_within(R"({"a":"\\",[[[1]]]})", 3));
        CHECK(json_depth_within("]]]]][", 1));  // not JSON: json::parse says so
    }

    TEST_CASE("a document nested deeper than the limit is a parse error, before parsing") {
        std::string deep = std::string(150000, '[') + std::string(150000, ']');
        CHECK_THROWS_AS(parse_untrusted_json(deep), nlohmann::json::parse_error);
        std::string at_limit = std::string(max_json_depth, '[') + std::string(max_json_depth, ']');
        CHECK(parse_untrusted_json(at_limit).is_array());
        CHECK_THROWS_AS(parse_untrusted_json("{"), nlohmann::json::parse_error);
    }

    TEST_CASE("UTF-8 as RFC 3629 has it") {
        CHECK(invalid_utf8_at("plain") == std::string_view::npos);
        CHECK(invalid_utf8_at("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") ==
              std::string_view::npos);
        CHECK(invalid_utf8_at("k=\xff") == 2);
        CHECK(invalid_utf8_at("caf\xe9") == 3);           // Latin-1
        CHECK(invalid_utf8_at("\xc0\xaf") == 0);          // overlong
        CHECK(invalid_utf8_at("\xed\xa0\x80") == 0);      // a surrogate
        CHECK(invalid_utf8_at("\xf4\x90\x80\x80") == 0);  // over U+10FFFF
        CHECK(invalid_utf8_at("ab\xe2\x82") == 2);        // cut short
        try {
            require_utf8("k=\xff", "--label");
            FAIL("no error");
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::usage);
            CHECK(std::string(e.what()) == "--label: not UTF-8 (byte 0xFF at offset 2)");
        }
    }
}

TEST_SUITE("fsutil") {
    TEST_CASE("remove_stale_temps removes only what a dead writer of that path left") {
        namespace fs = std::filesystem;
        fs::path dir = fs::temp_directory_path() / ("sw-stale-" + random_hex(8));
        fs::create_directories(dir);
        fs::path path = dir / "ep.jsonl";
        fs::path dead;
        {
            TempFile t = create_temp_beside(path);
            dead = t.path;
        }  // closed without a rename: as if its writer had been killed
        TempFile live = create_temp_beside(path);
        write_file_atomic(dir / ".ep.jsonl.tmp-notours", "x");
        write_file_atomic(dir / ".other.jsonl.tmp-0123abcd", "x");
        fs::create_symlink(dead, dir / ".ep.jsonl.tmp-0123abcd");
        CHECK(fs::exists(dead));
        CHECK(remove_stale_temps(path) == 1);
        CHECK_FALSE(fs::exists(dead));
        CHECK(fs::exists(live.path));  // its writer is alive (holds the lock)
        CHECK(fs::exists(dir / ".ep.jsonl.tmp-notours"));
        CHECK(fs::exists(dir / ".other.jsonl.tmp-0123abcd"));
        CHECK(fs::is_symlink(dir / ".ep.jsonl.tmp-0123abcd"));
        live.fd.reset();
        CHECK(remove_stale_temps(path) == 1);
        fs::remove_all(dir);
    }
}
