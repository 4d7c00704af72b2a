// lib/units: the quantities a user types (sizes, durations, user specs) and the
// "did you mean" hint every unknown-name error carries.
#include <doctest/doctest.h>

#include "lib/core/units.hpp"

using namespace sandweave;
using std::chrono::milliseconds;

TEST_SUITE("units") {
    TEST_CASE("parse_size accepts plain byte counts and binary/decimal units") {
        CHECK(parse_size("1048576") == 1048576u);
        CHECK(parse_size("1") == 1u);
        CHECK(parse_size("10B") == 10u);
        CHECK(parse_size("64KiB") == 64u * 1024);
        CHECK(parse_size("64K") == 64u * 1024);
        CHECK(parse_size("64kb") == 64u * 1000);
        CHECK(parse_size("3MiB") == 3u * 1024 * 1024);
        CHECK(parse_size("3MB") == 3u * 1000 * 1000);
        CHECK(parse_size("8GiB") == 8ull << 30);
        CHECK(parse_size("8gib") == 8ull << 30);  // units are case-insensitive
        CHECK(parse_size("2GB") == 2000000000ull);
        CHECK(parse_size("1TiB") == 1ull << 40);
        CHECK(parse_size("18446744073709551615") == 18446744073709551615ull);
    }

    TEST_CASE("parse_size rejects zero, negatives, fractions, junk and overflow") {
        for (const char* bad :
             {"", "0", "0KiB", "-1", "-1KiB", "1.5GiB", "KiB", "12 MiB", "12XB", "1KiBx",
              "18446744073709551616", "99999999999999999999999", "17179869184GiB", "0x10"}) {
            std::string shown_bad = bad;
            CAPTURE(shown_bad);
            CHECK_FALSE(parse_size(bad).has_value());
        }
    }

    TEST_CASE("parse_duration: Go/Docker style and bare seconds") {
        CHECK(parse_duration("2s") == milliseconds(2000));
        CHECK(parse_duration("150ms") == milliseconds(150));
        CHECK(parse_duration("1m30s") == milliseconds(90000));
        CHECK(parse_duration("1h") == milliseconds(3600000));
        CHECK(parse_duration("1.5s") == milliseconds(1500));
        CHECK(parse_duration("5") == milliseconds(5000));
        CHECK(parse_duration("1h2m3s4ms") == milliseconds(3723004));
    }

    TEST_CASE("parse_duration rejects junk, zero and negatives") {
        for (const char* bad :
             {"", "s", "abc", "2x", "-1s", "0s", "0", "1..5s", ".s", "2 s", "1s-"}) {
            std::string shown_bad = bad;
            CAPTURE(shown_bad);
            CHECK_FALSE(parse_duration(bad).has_value());
        }
    }

    TEST_CASE("parse_user: UID[:GID], GID defaults to UID") {
        auto u = parse_user("1001:1002");
        REQUIRE(u);
        CHECK(u->uid == 1001u);
        CHECK(u->gid == 1002u);
        CHECK(u->str() == "1001:1002");

        auto only_uid = parse_user("1001");
        REQUIRE(only_uid);
        CHECK(only_uid->uid == 1001u);
        CHECK(only_uid->gid == 1001u);

        auto root = parse_user("0:0");
        REQUIRE(root);
        CHECK(root->str() == "0:0");

        auto largest = parse_user("4294967294:4294967294");
        REQUIRE(largest);
        CHECK(largest->uid == 4294967294u);
    }

    TEST_CASE("parse_user rejects names, empty parts, negatives and (uid_t)-1") {
        for (const char* bad :
             {"", "abc", "root", "1001:", ":1001", "-1:0", "0:-1", "1001:abc", "1001:1001:1",
              "4294967295", "0:4294967295", "99999999999", " 1001", "1001 "}) {
            std::string shown_bad = bad;
            CAPTURE(shown_bad);
            CHECK_FALSE(parse_user(bad).has_value());
        }
    }

    TEST_CASE("suggest finds a plausible typo and nothing else") {
        const std::vector<std::string> verbs{"create",    "run", "ls",    "inspect",
                                             "terminate", "rm",  "prune", "template"};
        CHECK(suggest("crete", verbs) == std::optional<std::string>("create"));
        CHECK(suggest("CREATE", verbs) ==
              std::optional<std::string>("create"));  // case-insensitive
        CHECK(suggest("termniate", verbs) == std::optional<std::string>("terminate"));
        CHECK_FALSE(suggest("xyzzyplugh", verbs).has_value());
        CHECK_FALSE(suggest("anything", {}).has_value());

        const std::vector<std::string> flags{"--hidepid", "--audit", "--no-audit",
                                             "--name",    "--user",  "--label"};
        CHECK(suggest("--hidepd", flags) == std::optional<std::string>("--hidepid"));

        const std::vector<std::string> keys{"hidepid", "audit", "audit_max_bytes", "platform",
                                            "network"};
        CHECK(suggest("hidepd", keys) == std::optional<std::string>("hidepid"));
        CHECK(suggest("audit_max_byte", keys) == std::optional<std::string>("audit_max_bytes"));
    }

    TEST_CASE("did_you_mean formats the hint or nothing") {
        CHECK(did_you_mean("basee", {"base", "coding"}) == " (did you mean 'base'?)");
        CHECK(did_you_mean("zzzzzzzz", {"base", "coding"}) == "");
    }

}  // TEST_SUITE
