// The create options' one codec: what a pool stores reads back the same, and
// each bad value is refused with the line a user sees.

#include <doctest/doctest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"
#include "lib/options/create_options.hpp"

using namespace sandweave;
using json = nlohmann::json;

namespace {

std::string refusal(const json& j) {
    try {
        (void)create_options_from_json(j);
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::usage);
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("create options: every key round-trips, and only set keys are written") {
    json all = {{"hidepid", 2},
                {"audit", true},
                {"user", "1001:1002"},
                {"labels", {{"team", "a"}}},
                {"ttl_ms", 60000},
                {"idle_timeout_ms", 5000},
                {"cpus", 1.5},
                {"memory", 1073741824},
                {"allow", {"10.0.0.0/8:443/tcp", "example.org"}},
                {"deny", {"10.9.0.0/16"}},
                {"publish", {"8080:80"}}};
    FlagOverrides f = create_options_from_json(all);
    CHECK(*f.hidepid == 2);
    CHECK(f.user->str() == "1001:1002");
    CHECK(f.allow.size() == 2);
    json back = create_options_to_json(f);
    CHECK(back == all);
    for (const auto& item : back.items()) {
        const std::string k = item.key();  // not a binding: doctest's macros capture it
        CHECK_MESSAGE(std::find(create_option_keys().begin(), create_option_keys().end(), k) !=
                          create_option_keys().end(),
                      k);
    }
    CHECK(create_options_to_json(FlagOverrides{}) == json{{"labels", json::object()}});
    json none = create_options_to_json(create_options_from_json({{"network", "none"}}));
    CHECK(none["network"] == "none");
    // Keys that are not create options are left alone.
    CHECK_NOTHROW(create_options_from_json({{"template", "base"}, {"name", "x"}}));
}

TEST_CASE("create options: each bad value is refused with its own line") {
    CHECK(refusal({{"hidepid", 3}}) == "hidepid 3: expected 0, 1 or 2");
    CHECK(refusal({{"hidepid", -1}}) == "hidepid -1: expected 0, 1 or 2");
    CHECK(refusal({{"hidepid", "2"}}) == "hidepid: expected an integer, got \"2\"");
    CHECK(refusal({{"audit", 1}}) == "audit: expected true or false, got 1");
    CHECK(refusal({{"user", "alice"}}) ==
          "user 'alice': expected UID[:GID] with numeric ids (e.g. 1001:1001)");
    CHECK(refusal({{"labels", {{"a=b", "c"}}}}) ==
          "label 'a=b': a key must be non-empty, without '='");
    CHECK(refusal({{"ttl_ms", 0}}) == "ttl_ms 0: must be positive");
    CHECK(refusal({{"idle_timeout_ms", -5}}) == "idle_timeout_ms -5: must be positive");
    CHECK(refusal({{"cpus", 0}}).rfind("cpus 0", 0) == 0);
    CHECK(refusal({{"memory", 0}}) == "memory 0: must be positive");
    CHECK(refusal({{"network", "host"}}) ==
          "network 'host': expected none (a policy is given by allow and deny)");
    CHECK(refusal({{"allow", {"not a destination"}}}).rfind("allow 'not a destination': ", 0) == 0);
    CHECK(refusal({{"publish", {"8080:80", "8080:81"}}}) ==
          "publish '8080:81': host port 8080 is published twice");
    CHECK(hidepid_problem(2) == std::nullopt);
    CHECK(hidepid_problem(3).has_value());
}
