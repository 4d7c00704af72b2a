// lib/sandbox/pool: a pool stores the create options it was made with
// (pool.json's "request") and makes every member from them. The round trip
// request -> pool.json -> request must give the same options, so a member made
// by a refill an hour later is the sandbox `create` with those options makes.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "lib/options/options.hpp"
#include "lib/sandbox/pool.hpp"

using namespace sandweave;
using nlohmann::json;

namespace {

// Through text, as it is stored.
CreateRequest round_trip(const CreateRequest& req, const std::string& pool = "warm") {
    json stored = json::parse(pool_request_to_json(req).dump(2));
    return pool_request_from_json(stored, pool);
}

ResolvedTemplate coding_template() {
    ResolvedTemplate t;
    t.name = "coding";
    t.doc = json::parse(R"({"image": "coding", "user": "0:0",
        "runtime_options": {"hidepid": 0, "audit": false}})");
    return t;
}

}  // namespace

TEST_SUITE("pool") {
    TEST_CASE("request round trip: every option given comes back, unset ones stay unset") {
        CreateRequest req;
        req.template_ref = "coding";
        req.template_given = true;
        req.flags.hidepid = 2;
        req.flags.audit = true;
        req.flags.user = UserSpec{1001, 1002};
        req.flags.labels = {{"episode", "7"}, {"team", "a"}};

        CreateRequest back = round_trip(req);
        CHECK(back.template_ref == "coding");
        CHECK(back.template_given);
        REQUIRE(back.flags.hidepid);
        CHECK(*back.flags.hidepid == 2);
        REQUIRE(back.flags.audit);
        CHECK(*back.flags.audit);
        REQUIRE(back.flags.user);
        CHECK(back.flags.user->uid == 1001u);
        CHECK(back.flags.user->gid == 1002u);
        CHECK(back.flags.labels == req.flags.labels);
        CHECK(back.from_snapshot.empty());
        // Members belong to the pool, wait idle, and have no name.
        CHECK(back.pool == "warm");
        CHECK_FALSE(back.pool_acquired);
        CHECK(back.name.empty());

        // The same options resolve to the same settings, origins included.
        CHECK(to_json(resolve_spec(coding_template(), nullptr, "", back.flags)) ==
              to_json(resolve_spec(coding_template(), nullptr, "", req.flags)));

        CreateRequest plain;  // nothing given: defaults stay defaults, not flags
        CreateRequest plain_back = round_trip(plain);
        CHECK(plain_back.template_ref == "base");
        CHECK_FALSE(plain_back.flags.hidepid);
        CHECK_FALSE(plain_back.flags.audit);
        CHECK_FALSE(plain_back.flags.user);
        CHECK(plain_back.flags.labels.empty());
    }

    TEST_CASE("request round trip: explicit off values and a snapshot survive") {
        CreateRequest req;
        req.flags.hidepid = 0;    // an explicit --hidepid 0 beats a template's 2
        req.flags.audit = false;  // an explicit --no-audit
        req.from_snapshot = "snap-0123456789ab";
        CreateRequest back = round_trip(req, "restored");
        REQUIRE(back.flags.hidepid);
        CHECK(*back.flags.hidepid == 0);
        REQUIRE(back.flags.audit);
        CHECK_FALSE(*back.flags.audit);
        CHECK(back.from_snapshot == "snap-0123456789ab");
        // A snapshot carries its settings: the template is not "given" with it.
        CHECK_FALSE(back.template_given);
        CHECK(back.pool == "restored");
    }

    TEST_CASE("pool.json's request names options as a user would write them") {
        CreateRequest req;
        req.template_ref = "coding";
        req.flags.hidepid = 1;
        req.flags.user = UserSpec{1001, 1001};
        json j = pool_request_to_json(req);
        CHECK(j == json{{"template", "coding"},
                        {"labels", json::object()},
                        {"hidepid", 1},
                        {"user", "1001:1001"}});
    }
}  // TEST_SUITE
