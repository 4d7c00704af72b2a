// lib/runtime/limits: the guest's pids and memory limits go to the sentry as
// annotations, the host cgroup is sized for guest plus runtime and never wraps
// to something smaller, and unenforceable limits are refused with exit 5.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "lib/core/error.hpp"
#include "lib/runtime/bundle.hpp"
#include "lib/runtime/limits.hpp"

using namespace sandweave;
using nlohmann::json;

TEST_SUITE("limits") {
    TEST_CASE("the host cgroup gets the guest's limits plus the runtime's room") {
        Resources r;
        r.pids = 50;
        r.memory = 64ull << 20;
        r.cpus = 1.5;
        json h = host_resources(r);
        CHECK(h["pids"]["limit"] == host_pids_base + 50 * host_pids_per_guest_task);
        CHECK(h["memory"]["limit"] == (64ull << 20) + host_memory_headroom);
        CHECK(h["cpu"]["quota"] == 150000);
        CHECK(h["cpu"]["period"] == 100000);
        CHECK(host_resources(Resources{}).empty());
    }

    TEST_CASE("huge limits saturate at OCI's int64 instead of wrapping") {
        Resources r;
        r.memory = std::numeric_limits<std::uint64_t>::max();
        r.pids = std::numeric_limits<std::int64_t>::max();
        json h = host_resources(r);
        CHECK(h["memory"]["limit"] == std::numeric_limits<std::int64_t>::max());
        CHECK(h["pids"]["limit"] == std::numeric_limits<std::int64_t>::max());
    }

    TEST_CASE("the guest's own limits are annotations in the bundle") {
        BundleInput in;
        in.spec.resources.pids = 7;
        in.spec.resources.memory = 32ull << 20;
        json c = build_oci_config(in);
        CHECK(c["annotations"][guest_pids_annotation] == "7");
        CHECK(c["annotations"][guest_memory_annotation] == std::to_string(32ull << 20));
        CHECK(c["linux"]["resources"]["pids"]["limit"] ==
              host_pids_base + 7 * host_pids_per_guest_task);
        BundleInput none;
        CHECK(build_oci_config(none)["annotations"].empty());
    }

    TEST_CASE("limits that cannot be enforced are refused with exit 5 and the reason") {
        Resources small;
        small.memory = 1ull << 20;
        CHECK_THROWS_WITH_AS(check_limits_enforceable(small, 2),
                             doctest::Contains("at least 16 MiB"), Error);
        try {
            check_limits_enforceable(small, 2);
        } catch (const Error& e) {
            CHECK(e.code() == ErrorCode::runtime);
        }
        Resources tiny_cpu;
        tiny_cpu.cpus = 0.001;
        CHECK_THROWS_WITH_AS(check_limits_enforceable(tiny_cpu, 2), doctest::Contains("0.01 CPUs"),
                             Error);
        Resources many_cpus;
        many_cpus.cpus = 3;
        CHECK_THROWS_WITH_AS(check_limits_enforceable(many_cpus, 2),
                             doctest::Contains("only 2 CPUs"), Error);
        Resources fine;
        fine.cpus = 2;
        fine.memory = 16ull << 20;
        fine.pids = 1;
        CHECK_NOTHROW(check_limits_enforceable(fine, 2));
    }

    TEST_CASE("runsc's stats event gives what the limits counted") {
        json ev = json::parse(R"({"type": "stats", "id": "x", "data": {
            "pids": {"current": 49, "limit": 50},
            "memory": {"usage": {"limit": 67108864, "usage": 2961408, "max": 65138688,
                                 "failcnt": 3}, "raw": {"oom_kill": 1}}}})");
        LimitUsage u = limit_usage_from_stats(ev);
        CHECK(u.pids_current == 49u);
        CHECK(u.pids_limit == 50u);
        CHECK(u.memory_limit == 67108864u);
        CHECK(u.memory_failcnt == 3);
        CHECK(u.oom_kills == 1);
        LimitUsage back = limit_usage_from_json(to_json(u));
        CHECK(to_json(back) == to_json(u));
        // A stock runsc's event: no limits, nothing counted.
        LimitUsage stock = limit_usage_from_stats(json::parse(
            R"({"type": "stats", "data": {"pids": {"current": 2}, "memory": {"usage": {"limit": 0, "failcnt": 0}}}})"));
        CHECK(!stock.memory_limit);
        CHECK(!stock.pids_limit);
        CHECK_THROWS_AS(limit_usage_from_stats(json::array()), Error);
    }
}
