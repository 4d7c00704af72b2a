// lib/batch: the episode spec (one JSON object per line), checked before
// anything runs; every refusal names the line and the key.
#include <doctest/doctest.h>

#include <fstream>

#include "lib/batch/batch.hpp"
#include "lib/core/error.hpp"
#include "tests/unit/fixtures.hpp"

using namespace sandweave;
using batch::parse_episode;

namespace {

// The message of the usage error parse_episode throws for `line`.
std::string refusal(const std::string& line) {
    try {
        parse_episode(line, "spec:7");
    } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::usage);
        return e.what();
    }
    FAIL("accepted: " << line);
    return "";
}

}  // namespace

TEST_SUITE("batch") {
    TEST_CASE("an episode with every key") {
        auto e = parse_episode(
            R"({"id": "ep-1.a_b", "template": "coding", "hidepid": 2, "audit": false,
                "user": "1001:1001", "command": ["sh", "-c", "true"], "files_out": ["/out"],
                "env": {"A": "1"}, "timeout": 1.5, "labels": {"task": "t"}})",
            "spec:1");
        CHECK(e.id == "ep-1.a_b");
        CHECK(e.template_ref == "coding");
        CHECK(e.hidepid == 2);
        CHECK_FALSE(e.audit);
        CHECK(e.user == "1001:1001");
        CHECK(e.argv == std::vector<std::string>{"sh", "-c", "true"});
        CHECK(e.files_out == std::vector<std::string>{"/out"});
        CHECK(e.env == std::vector<std::string>{"A=1"});
        CHECK(e.timeout_ms == 1500);
        CHECK(e.labels.at("task") == "t");
    }

    TEST_CASE("defaults: audit on, script through /bin/sh") {
        auto e = parse_episode(R"({"id": "a", "script": "echo hi"})", "spec:1");
        CHECK(e.audit);
        CHECK_FALSE(e.hidepid);
        CHECK_FALSE(e.timeout_ms);
        CHECK(e.argv == std::vector<std::string>{"/bin/sh", "-c", "echo hi"});
    }

    TEST_CASE("each refusal names the line and what is wrong") {
        CHECK(refusal(R"({"id": "a", "comand": ["x"]})").find("spec:7: unknown key 'comand'") == 0);
        CHECK(refusal(R"({"id": "a", "comand": ["x"]})").find("did you mean 'command'") !=
              std::string::npos);
        CHECK(refusal(R"({"script": "x"})") == "spec:7: 'id' is required");
        CHECK(refusal(R"({"id": "a"})").find("either 'command'") != std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "command": ["x"]})").find("not both") !=
              std::string::npos);
        for (const char* id : {"", "../x", ".hidden", "a/b", "summary.json", "a b"})
            CHECK(refusal(std::string(R"({"script": "x", "id": ")") + id + "\"}").find("'id'") !=
                  std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "hidepid": 3})").find("'hidepid'") !=
              std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "audit": "yes"})").find("'audit'") !=
              std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "user": "root"})").find("UID[:GID]") !=
              std::string::npos);
        CHECK(refusal(R"({"id": "a", "command": []})").find("non-empty") != std::string::npos);
        CHECK(refusal(R"({"id": "a", "command": ["x", 1]})").find("expected a string") !=
              std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "timeout": 0})").find("'timeout'") !=
              std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "timeout": "5s"})").find("'timeout'") !=
              std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "files_out": ["rel"]})")
                  .find("not an absolute guest path") != std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "files_out": ["/a/../etc"]})").find("'..'") !=
              std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "files_in": {"/x": "/no/such/file"}})")
                  .find("does not exist") != std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "env": {"A=B": "1"}})").find("'env'") !=
              std::string::npos);
        CHECK(refusal(R"({"id": "a", "script": "x", "labels": {"sandweave.batch": "1"}})")
                  .find("the batch's") != std::string::npos);
        CHECK(refusal("[1]").find("expected a JSON object") != std::string::npos);
        CHECK(refusal(R"({"id": )").find("not JSON") != std::string::npos);
    }

    TEST_CASE("parse_spec: blank lines skipped, duplicate ids and long lines refused") {
        test::TempDir dir;
        auto write = [&](const std::string& text) {
            std::ofstream(dir.path / "s.jsonl") << text;
            return dir.path / "s.jsonl";
        };
        auto eps = batch::parse_spec(
            write("{\"id\": \"a\", \"script\": \"x\"}\n\n{\"id\": \"b\", \"script\": \"x\"}\n"));
        REQUIRE(eps.size() == 2);
        CHECK(eps[1].line == 3);
        CHECK_THROWS_WITH_AS(
            batch::parse_spec(write("{\"id\": \"a\", \"script\": \"x\"}\n{\"id\": \"a\", "
                                    "\"script\": \"y\"}\n")),
            doctest::Contains(":2: 'id': 'a' was used on an earlier line"), Error);
        CHECK_THROWS_WITH_AS(batch::parse_spec(write(std::string(batch::max_line_bytes + 1, ' '))),
                             doctest::Contains(":1: line longer than"), Error);
        CHECK_THROWS_WITH_AS(batch::parse_spec(write("\n\n")), doctest::Contains("no episodes"),
                             Error);
    }

    TEST_CASE("the batch key is the absolute folder's") {
        CHECK(batch::batch_key("/a/b") == batch::batch_key("/a/./b/"));
        CHECK(batch::batch_key("/a/b") != batch::batch_key("/a/c"));
        CHECK(batch::batch_key("/a/b").size() == 16);
    }
}
