// lib/sandbox/filter: the terms of --filter, and which sandboxes they select.
#include <doctest/doctest.h>

#include "lib/core/error.hpp"
#include "lib/sandbox/filter.hpp"

using namespace sandweave;

namespace {

SandboxView view(const std::string& created_at, SandboxState live) {
    SandboxView v;
    v.record.id = "sw-0123456789ab";
    v.record.created_at = created_at;
    v.record.spec.template_name = "base";
    v.record.spec.labels = {{"team", "a"}, {"run", "7"}};
    v.record.pool = "warm";
    v.live = live;
    return v;
}

std::string usage_error(const std::vector<std::string>& terms) {
    try {
        parse_filter(terms);
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::usage);
        return e.what();
    }
    FAIL("no error for a bad filter");
    return "";
}

}  // namespace

TEST_SUITE("filter") {
    TEST_CASE("every term must hold") {
        auto now = std::chrono::system_clock::from_time_t(1764583200);  // 2025-12-01T10:00:00Z
        auto v = view("2025-12-01T08:00:00Z", SandboxState::running);
        CHECK(parse_filter({}).matches(v, now));
        CHECK(parse_filter({"label=team=a"}).matches(v, now));
        CHECK(parse_filter({"label=team"}).matches(v, now));
        CHECK_FALSE(parse_filter({"label=team=b"}).matches(v, now));
        CHECK_FALSE(parse_filter({"label=owner"}).matches(v, now));
        CHECK(parse_filter({"label=team=a", "label=run=7", "state=running"}).matches(v, now));
        CHECK_FALSE(parse_filter({"label=team=a", "state=stopped"}).matches(v, now));
        CHECK(parse_filter({"template=base", "pool=warm"}).matches(v, now));
        CHECK_FALSE(parse_filter({"template=coding"}).matches(v, now));
        CHECK_FALSE(parse_filter({"pool=cold"}).matches(v, now));
        CHECK(parse_filter({"older-than=1h"}).matches(v, now));
        CHECK_FALSE(parse_filter({"older-than=3h"}).matches(v, now));
        CHECK_FALSE(parse_filter({"older-than=1d"}).matches(v, now));
        CHECK(parse_filter({"older-than=90m"}).matches(v, now));
        // A record whose time cannot be read is never "older than".
        CHECK_FALSE(
            parse_filter({"older-than=1s"}).matches(view("garbage", SandboxState::running), now));
        CHECK(parse_filter({"state=failed"})
                  .matches(view("2025-12-01T08:00:00Z", SandboxState::failed), now));
    }

    TEST_CASE("a bad term is named, with a suggestion") {
        CHECK(usage_error({"lable=team=a"}).find("did you mean 'label'") != std::string::npos);
        CHECK(usage_error({"state=runing"}).find("did you mean 'running'") != std::string::npos);
        CHECK(usage_error({"team"}).find("expected KEY=VALUE") != std::string::npos);
        CHECK(usage_error({"label="}).find("label=KEY=VALUE") != std::string::npos);
        CHECK(usage_error({"older-than=soon"}).find("duration") != std::string::npos);
        CHECK(usage_error({"older-than=99999999999999999999d"}).find("duration") !=
              std::string::npos);
    }
}
