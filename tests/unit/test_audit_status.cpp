// When is an export complete? The reasons logic, counter unwrapping, JSON round trips.

#include <doctest/doctest.h>

#include <algorithm>

#include "lib/audit/audit.hpp"
#include "lib/audit/state.hpp"
#include "tests/unit/fixtures.hpp"

using namespace sandweave::audit;

namespace {

WriterState clean() {
    WriterState s;
    s.streams = 1;
    s.container_start_seen = true;
    s.runtime_reported = 0;
    s.events = 10;
    return s;
}

using sandweave::test::contains;

}  // namespace

TEST_CASE("audit status: a clean barrier has no reasons") {
    CHECK(state_reasons(clean()).empty());
    CHECK(clean().dropped() == 0);
}

TEST_CASE("audit status: each fault is a reason") {
    auto s = clean();
    s.queue_overflow = 1;
    CHECK(contains(state_reasons(s), "queue_overflow"));
    s = clean();
    s.runtime_dropped = 3;
    CHECK(state_reasons(s) == std::vector<std::string>{"runtime_dropped"});
    CHECK(s.dropped() == 3);
    // Bytes that are not UTF-8 are kept (escaped): nothing is missing.
    s = clean();
    s.escaped_records = 1;
    CHECK(state_reasons(s).empty());
    s = clean();
    s.disk_failure = true;
    CHECK(contains(state_reasons(s), "disk_failure"));
    s = clean();
    s.byte_limit = true;
    CHECK(contains(state_reasons(s), "byte_limit"));
    s = clean();
    s.runtime_reported.reset();
    CHECK(contains(state_reasons(s), "runtime_unavailable"));
    s = clean();
    s.truncated = 1;
    CHECK(contains(state_reasons(s), "truncated_message"));
    CHECK(s.dropped() == 1);
    s = clean();
    s.malformed = 1;
    CHECK(contains(state_reasons(s), "malformed_message"));
    // A barrier that could not drain the socket in time vouches for nothing.
    s = clean();
    s.barrier_drain_timeout = true;
    CHECK(contains(state_reasons(s), "barrier_timeout"));
    CHECK(state_from_json(state_to_json(s)).barrier_drain_timeout);
}

TEST_CASE("audit status: no connection, two connections, or no container/start is suspect") {
    auto s = clean();
    s.streams = 0;
    CHECK(contains(state_reasons(s), "no_sentry_connection"));
    s = clean();
    s.streams = 2;
    CHECK(contains(state_reasons(s), "multiple_sentry_connections"));
    s = clean();
    s.container_start_seen = false;
    CHECK(contains(state_reasons(s), "no_container_start"));
    s.container_start_selected = false;  // a custom selection without it
    CHECK(state_reasons(s).empty());
}

TEST_CASE("audit status: unknown message types are counted but kept, not a loss") {
    auto s = clean();
    s.unknown_types = 4;
    CHECK(state_reasons(s).empty());
}

TEST_CASE("audit status: the 32-bit dropped count unwraps and ignores stale values") {
    CHECK(unwrap_advance(0, 5) == 5);
    CHECK(unwrap_advance(5, 3) == 5);  // an older header arrived late
    CHECK(unwrap_advance(0xfffffff0ull, 0x10) == 0x100000010ull);
    CHECK(unwrap_advance(0x100000010ull, 0xfffffff0u) == 0x100000010ull);
}

TEST_CASE("audit status: state and status JSON round trips") {
    auto s = clean();
    s.disk_error = "write: No space left on device";
    s.runtime_reported.reset();
    auto back = state_from_json(state_to_json(s));
    CHECK(back.events == 10);
    CHECK_FALSE(back.runtime_reported.has_value());
    CHECK(back.disk_error == s.disk_error);

    Status st;
    st.complete = true;
    st.events = 3;
    st.points = {{"container/start", {"env"}, {"time"}}};
    st.error = "boom";
    st.sha256 = "ab";
    auto j = to_json(st);
    for (const char* k : {"complete", "events", "last_sequence", "bytes", "dropped", "reasons",
                          "sandbox_id", "runtime_version", "sha256", "points", "error"})
        CHECK_MESSAGE(j.contains(k), k);
    auto st2 = status_from_json(j);
    CHECK(st2.points == st.points);
    CHECK(st2.error == st.error);
    CHECK(st2.complete);
}

// reasons agree with the counters: every counter of lost events names its
// own reason and no other, so a status never blames a loss that did not
// happen (a runtime drop was once reported as a queue overflow).
TEST_CASE("audit status: each loss counter has exactly its own reason") {
    const std::vector<std::pair<std::uint64_t WriterState::*, std::string>> losses = {
        {&WriterState::runtime_dropped, "runtime_dropped"},
        {&WriterState::queue_overflow, "queue_overflow"},
        {&WriterState::truncated, "truncated_message"},
        {&WriterState::byte_limit_dropped, "byte_limit"},
        {&WriterState::disk_dropped, "disk_failure"},
    };
    for (const auto& loss : losses) {
        // Not a structured binding: CAPTURE takes reason in a lambda.
        const auto counter = loss.first;
        const auto& reason = loss.second;
        CAPTURE(reason);
        auto s = clean();
        s.*counter = 2;
        CHECK(s.dropped() == 2);
        CHECK(state_reasons(s) == std::vector<std::string>{reason});
    }
    auto s = clean();
    for (const auto& [counter, reason] : losses) s.*counter = 1;
    CHECK(s.dropped() == losses.size());
    CHECK(state_reasons(s).size() == losses.size());
}

TEST_CASE("audit status: a log line with escaped bytes parses for its framing") {
    auto j =
        parse_log_line(R"({"seq":3,"point":"syscall/execve/exit","argv":["a\udcffb","\\udcff"]})");
    CHECK(j["seq"] == 3);
    CHECK(j["argv"][0] ==
          "a\xef\xbf\xbd"
          "b");
    CHECK(j["argv"][1] == "\\udcff");  // an escaped backslash, then text
}
