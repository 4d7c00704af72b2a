// What sandweave asks runsc for: metadata parsing, the default selection,
// the pod-init-config document and `runsc trace list` parsing.

#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "lib/audit/audit.hpp"
#include "lib/audit/wire.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"

using namespace sandweave::audit;

namespace {

TraceMetadata recorded() {
    return parse_trace_metadata(sandweave::read_file(std::string(SANDWEAVE_TEST_DATA) +
                                                     "/audit/runsc_trace_metadata_20221219.txt"));
}

const TracePoint* find(const std::vector<TracePoint>& v, const std::string& name) {
    auto it = std::find_if(v.begin(), v.end(), [&](const TracePoint& p) { return p.name == name; });
    return it == v.end() ? nullptr : &*it;
}

}  // namespace

TEST_CASE("audit metadata: the recorded runsc 20221219 output parses completely") {
    auto md = recorded();
    CHECK(md.points.size() == 991);
    const TracePoint* p = find(md.points, "syscall/openat/exit");
    REQUIRE(p != nullptr);
    CHECK(p->optional_fields == std::vector<std::string>{"fd_path"});
    CHECK(p->context_fields.size() == 9);
    CHECK(p->context_fields.front() == "time");
    const TracePoint* s = find(md.points, "container/start");
    REQUIRE(s != nullptr);
    CHECK(s->optional_fields == std::vector<std::string>{"env"});
    CHECK(find(md.points, "null") == nullptr);  // sinks are not points
}

TEST_CASE("audit metadata: bad or empty output is a runtime error") {
    CHECK_THROWS_AS(parse_trace_metadata(""), sandweave::Error);
    CHECK_THROWS_AS(parse_trace_metadata("POINTS (1)\nName: x, garbage\n"), sandweave::Error);
    auto md = parse_trace_metadata(
        "POINTS (1)\nName: a/b, optional fields: [], context fields: [time]\n");
    CHECK(md.points.size() == 1);
    CHECK(md.points[0].optional_fields.empty());
}

TEST_CASE("audit selection: lifecycle, every rich exit, raw exits only where no rich point") {
    auto md = recorded();
    auto sel = default_selection(md);
    for (const char* n : {"container/start", "sentry/clone", "sentry/execve",
                          "sentry/exit_notify_parent", "sentry/task_exit", "syscall/openat/exit",
                          "syscall/execve/exit", "syscall/write/exit", "syscall/clone/exit"})
        CHECK_MESSAGE(find(sel, n) != nullptr, n);
    CHECK(find(sel, "syscall/openat/enter") == nullptr);
    // openat has a rich point, so its raw twin is not selected; mmap has none.
    CHECK(find(sel, "syscall/sysno/" + std::to_string(*syscall_number("openat")) + "/exit") ==
          nullptr);
    CHECK(find(sel, "syscall/sysno/" + std::to_string(*syscall_number("mmap")) + "/exit") !=
          nullptr);
    CHECK(find(sel, "syscall/sysno/0/enter") == nullptr);
    // all optional and context fields
    CHECK(find(sel, "syscall/execve/exit")->optional_fields == std::vector<std::string>{"envv"});
    CHECK(find(sel, "sentry/execve")->optional_fields == std::vector<std::string>{"binary_info"});
    for (const auto& p : sel) CHECK(p.context_fields.size() == 9);
    // 5 lifecycle + 51 rich exits + raw exits for the remaining syscalls
    CHECK(sel.size() > 300);
    CHECK(sel.size() < 500);
}

TEST_CASE("audit selection: mappings are taken when a runtime offers them") {
    auto md = parse_trace_metadata(
        "POINTS (3)\n"
        "Name: sentry/mmap, optional fields: [], context fields: [time]\n"
        "Name: syscall/mmap/exit, optional fields: [fd_path], context fields: [time]\n"
        "Name: sentry/unrelated, optional fields: [], context fields: [time]\n");
    auto sel = default_selection(md);
    CHECK(find(sel, "sentry/mmap") != nullptr);
    CHECK(find(sel, "syscall/mmap/exit") != nullptr);
    CHECK(find(sel, "sentry/unrelated") == nullptr);
}

TEST_CASE("audit pod_init_config: the shape runsc decodes strictly") {
    std::vector<TracePoint> pts = {{"container/start", {"env"}, {"time"}}};
    auto j = nlohmann::json::parse(pod_init_config(pts, "/var/lib/sw/a/sink.sock"));
    REQUIRE(j.size() == 1);
    auto s = j.at("trace_session");
    CHECK(s["name"] == "Default");
    CHECK(s["ignore_missing"] == false);
    CHECK(s["points"][0]["name"] == "container/start");
    CHECK(s["points"][0]["optional_fields"] == nlohmann::json::array({"env"}));
    CHECK(s["points"][0]["context_fields"] == nlohmann::json::array({"time"}));
    REQUIRE(s["sinks"].size() == 1);
    CHECK(s["sinks"][0]["name"] == "remote");
    CHECK(s["sinks"][0]["config"]["endpoint"] == "/var/lib/sw/a/sink.sock");
    CHECK(s["sinks"][0]["config"]["retries"] == 0);
    for (auto& item : s.items()) {
        const std::string k = item.key();  // not a binding: doctest's macros capture it
        CHECK_MESSAGE((k == "name" || k == "points" || k == "ignore_missing" || k == "sinks"), k);
    }
}

TEST_CASE("audit trace list: the remote sink's dropped count") {
    CHECK(parse_trace_list_dropped("SESSIONS (1)\n\"Default\"\n\tSink: \"remote\", dropped: 0\n") ==
          0u);
    CHECK(parse_trace_list_dropped(
              "SESSIONS (1)\n\"Default\"\n\tSink: \"remote\", dropped: 4242\n") == 4242u);
    CHECK_FALSE(parse_trace_list_dropped("").has_value());
    CHECK_FALSE(parse_trace_list_dropped("SESSIONS (0)\n").has_value());
    CHECK_FALSE(parse_trace_list_dropped("loading sandbox: no such file\n").has_value());
    CHECK_FALSE(
        parse_trace_list_dropped("SESSIONS (1)\n\"Default\"\n\tSink: \"remote\", dropped: x\n")
            .has_value());
    CHECK_FALSE(
        parse_trace_list_dropped("SESSIONS (1)\n\"Other\"\n\tSink: \"remote\", dropped: 1\n")
            .has_value());
}

TEST_CASE("audit trace sessions: the remote sink's dropped count from the control server") {
    auto sessions = [](const nlohmann::json& sinks, const std::string& name = "Default") {
        return nlohmann::json::array(
            {{{"name", name}, {"points", nlohmann::json::array()}, {"sinks", sinks}}});
    };
    auto remote = [](const nlohmann::json& status) {
        return nlohmann::json{{"name", "remote"}, {"config", {{"retries", 0}}}, {"status", status}};
    };
    CHECK(trace_sessions_dropped(
              sessions(nlohmann::json::array({remote({{"DroppedCount", 0}})}))) == 0u);
    CHECK(trace_sessions_dropped(
              sessions(nlohmann::json::array({remote({{"DroppedCount", 4242}})}))) == 4242u);
    CHECK_FALSE(trace_sessions_dropped(nlohmann::json::array()).has_value());
    CHECK_FALSE(trace_sessions_dropped(nullptr).has_value());
    CHECK_FALSE(trace_sessions_dropped(
                    sessions(nlohmann::json::array({remote({{"DroppedCount", 1}})}), "Other"))
                    .has_value());
    CHECK_FALSE(
        trace_sessions_dropped(sessions(nlohmann::json::array({remote({{"DroppedCount", -1}})})))
            .has_value());
    CHECK_FALSE(
        trace_sessions_dropped(sessions(nlohmann::json::array({remote(nlohmann::json::object())})))
            .has_value());
    CHECK_FALSE(
        trace_sessions_dropped(sessions(nlohmann::json::array(
                                   {remote({{"DroppedCount", 1}}), remote({{"DroppedCount", 2}})})))
            .has_value());
}
