// lib/core/agent_wire: the host's decoder of what a guest agent sends. The
// guest is hostile: every length, kind and range is checked.
#include <doctest/doctest.h>

#include "lib/core/agent_wire.hpp"

using namespace sandweave::agent;

namespace {

std::string u32(std::uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; i++) s[i] = static_cast<char>(v >> (8 * i));
    return s;
}

std::string exit_payload(std::uint32_t kind, std::uint32_t code, std::string msg = "") {
    return u32(kind) + u32(code) + u32(static_cast<std::uint32_t>(msg.size())) + msg;
}

}  // namespace

TEST_SUITE("agent wire") {
    TEST_CASE("frames survive any split of the stream") {
        std::string stream = encode(SW_STDOUT, 3, "hello") + encode(SW_EXIT, 3, exit_payload(0, 0));
        for (std::size_t cut = 0; cut <= stream.size(); cut++) {
            FrameReader r;
            r.feed(std::string_view(stream).substr(0, cut));
            std::vector<Frame> got;
            while (auto f = r.next()) got.push_back(*f);
            r.feed(std::string_view(stream).substr(cut));
            while (auto f = r.next()) got.push_back(*f);
            REQUIRE(got.size() == 2);
            CHECK(got[0].type == SW_STDOUT);
            CHECK(got[0].session == 3);
            CHECK(got[0].payload == "hello");
            CHECK(decode_exit(got[1].payload).kind == SW_EXITED);
        }
    }

    TEST_CASE("an oversized or malformed header is refused, not buffered") {
        FrameReader r(1024);
        r.feed(u32(1025) + std::string("\x05\0\0\0", 4) + u32(1));
        CHECK_THROWS_AS(r.next(), ProtocolError);
        FrameReader reserved;
        reserved.feed(u32(0) + std::string("\x05\x01\0\0", 4) + u32(1));
        CHECK_THROWS_AS(reserved.next(), ProtocolError);
    }

    TEST_CASE("EXIT: kinds and codes out of range are lies") {
        CHECK(decode_exit(exit_payload(SW_SIGNALED, 9)).code == 9);
        CHECK(decode_exit(exit_payload(SW_NOT_STARTED, 2, "exec: No such file")).message ==
              "exec: No such file");
        CHECK_THROWS_AS(decode_exit(exit_payload(9, 0)), ProtocolError);
        CHECK_THROWS_AS(decode_exit(exit_payload(SW_EXITED, 256)), ProtocolError);
        CHECK_THROWS_AS(decode_exit(exit_payload(SW_SIGNALED, 0)), ProtocolError);
        CHECK_THROWS_AS(decode_exit(exit_payload(SW_EXITED, 0) + "x"), ProtocolError);
        CHECK_THROWS_AS(decode_exit(u32(0) + u32(0) + u32(100) + "short"), ProtocolError);
        CHECK_THROWS_AS(decode_u32("abc"), ProtocolError);
    }

    TEST_CASE("EXEC round-trips and refuses an empty command") {
        ExecSpec e;
        e.uid = 1001;
        e.gid = 1002;
        e.flags = SW_EXEC_PTY | SW_EXEC_STDIN;
        e.timeout_ms = 2000;
        e.rows = 40;
        e.cols = 120;
        e.cwd = "/tmp";
        e.argv = {"/bin/echo", "a b", ""};
        e.env = {"PATH=/bin"};
        ExecSpec d = decode_exec(encode_exec(e));
        CHECK(d.uid == 1001);
        CHECK(d.gid == 1002);
        CHECK(d.flags == e.flags);
        CHECK(d.rows == 40);
        CHECK(d.cols == 120);
        CHECK(d.argv == e.argv);
        CHECK(d.env == e.env);
        e.argv = {};
        CHECK_THROWS_AS(decode_exec(encode_exec(e)), ProtocolError);
    }

    TEST_CASE("HELLO: the reply is found after leftovers of an earlier connection") {
        std::string nonce = "0123456789abcdef";
        std::string hello = encode(SW_HELLO, 0, u32(SW_AGENT_PROTOCOL) + nonce + u32(4) + "init");
        FrameReader r;
        r.feed("\x07half a frame of before" + hello + encode_u32(SW_STARTED, 1, 5));
        REQUIRE(r.sync_to_hello(nonce));
        auto f = r.next();
        REQUIRE(f);
        auto h = decode_hello(f->payload);
        CHECK(h.nonce == nonce);
        CHECK(h.name == "init");
        CHECK(r.next()->type == SW_STARTED);
        FrameReader none;
        none.feed(std::string(10000, 'x'));
        CHECK_FALSE(none.sync_to_hello(nonce));
        CHECK(none.buffered() <= 64);  // what cannot hold the reply is let go
    }
}
