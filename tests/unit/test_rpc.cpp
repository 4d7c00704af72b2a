// lib/rpc/jsonrpc: the framing of `sandweave serve`, fed hostile lines.
#include <doctest/doctest.h>

#include "lib/rpc/jsonrpc.hpp"

using namespace sandweave::rpc;
using nlohmann::json;

namespace {

DecodeError refused(std::string_view line) {
    auto d = decode_request(line);
    REQUIRE(std::holds_alternative<DecodeError>(d));
    return std::get<DecodeError>(d);
}

}  // namespace

TEST_SUITE("rpc") {
    TEST_CASE("a request decodes with its id, method and params") {
        auto d = decode_request(R"({"jsonrpc":"2.0","id":7,"method":"sandbox.ls"})");
        REQUIRE(std::holds_alternative<Request>(d));
        auto r = std::get<Request>(d);
        CHECK(r.id == 7);
        CHECK(r.method == "sandbox.ls");
        CHECK(r.params == json::object());
        CHECK(!r.is_notification());
        auto n =
            std::get<Request>(decode_request(R"({"jsonrpc":"2.0","method":"m","params":{"a":1}})"));
        CHECK(n.is_notification());
        CHECK(n.params.at("a") == 1);
        CHECK(std::get<Request>(decode_request(R"({"jsonrpc":"2.0","id":"x","method":"m"})")).id ==
              "x");
    }

    TEST_CASE("bad lines are refused with the right code, keeping the id when readable") {
        CHECK(refused("not json").code == code::parse_error);
        CHECK(refused("").code == code::parse_error);
        CHECK(refused("[1,2]").code == code::invalid_request);
        CHECK(refused("\"str\"").code == code::invalid_request);
        auto e = refused(R"({"jsonrpc":"1.0","id":3,"method":"m"})");
        CHECK(e.code == code::invalid_request);
        CHECK(e.id == 3);
        CHECK(refused(R"({"jsonrpc":"2.0","id":1.5,"method":"m"})").code == code::invalid_request);
        CHECK(refused(R"({"jsonrpc":"2.0","id":null,"method":"m"})").code == code::invalid_request);
        CHECK(refused(R"({"jsonrpc":"2.0","id":{},"method":"m"})").code == code::invalid_request);
        CHECK(refused(R"({"jsonrpc":"2.0","id":1,"method":5})").code == code::invalid_request);
        CHECK(refused(R"({"jsonrpc":"2.0","id":1,"method":"m","params":[1]})").code ==
              code::invalid_params);
        CHECK(refused(R"({"jsonrpc":"2.0","id":1,"method":"m","extra":1})").code ==
              code::invalid_request);
        CHECK(refused("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}").code ==
              code::parse_error);
        std::string huge =
            R"({"jsonrpc":"2.0","id":1,"method":")" + std::string(max_line_bytes, 'a') + "\"}";
        CHECK(refused(huge).code == code::invalid_request);
        // Nesting is checked before parsing (docs/protocol.md, "Framing").
        std::string deep(100000, '[');
        CHECK(refused(deep).code == code::invalid_request);
        // 64 levels are parsed (and refused for being an array), 65 are not.
        CHECK(refused(std::string(64, '[') + std::string(64, ']')).message.find("batches") !=
              std::string::npos);
        CHECK(refused(std::string(65, '[') + std::string(65, ']')).message.find("nested deeper") !=
              std::string::npos);
    }

    TEST_CASE("encoded lines are single-line JSON-RPC 2.0") {
        auto line = encode_error(5, 4, "no such sandbox: 'x'\nsecond", json{{"exit_status", 4}});
        CHECK(line.find('\n') == std::string::npos);
        auto j = json::parse(line);
        CHECK(j.at("jsonrpc") == "2.0");
        CHECK(j.at("id") == 5);
        CHECK(j.at("error").at("code") == 4);
        CHECK(j.at("error").at("data").at("exit_status") == 4);
        // Invalid UTF-8 from a guest's message does not break the line.
        auto bad = json::parse(encode_notification("log", {{"message", std::string("\xff\xfe")}}));
        CHECK(bad.at("method") == "log");
        CHECK(json::parse(encode_result("a", {{"x", 1}})).at("result").at("x") == 1);
    }

    TEST_CASE("base64 round-trips every byte and refuses what is not canonical") {
        std::string all;
        for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
        for (std::size_t n = 0; n < 260; n += 1) {
            std::string s = all.substr(0, n % 257);
            CHECK(base64_decode(base64_encode(s)) == s);
        }
        CHECK(base64_encode("hello\n") == "aGVsbG8K");
        CHECK(base64_decode("ZG9uZQo=") == std::string("done\n"));
        CHECK(base64_decode("") == std::string());
        for (const char* bad : {"a", "abc", "ab=c", "a===", "====", "ZG9uZQo",
                                "ZG9u ZQo=", "ZG9uZQp=", "ZA==ZA==", "Zm9v\n"})
            CHECK_MESSAGE(!base64_decode(bad), bad);
    }
}
