// Wire header and handshake parsing: every malformed shape is reported, never trusted.

#include <doctest/doctest.h>

#include "lib/audit/wire.hpp"

using namespace sandweave::audit;

TEST_CASE("audit wire: a framed message parses back to its header and payload") {
    std::string m = frame_message(7, "payload", 0xdeadbeef);
    WireHeader h;
    std::string_view body;
    REQUIRE(parse_header(m, h, body) == HeaderError::none);
    CHECK(h.header_size == 8);
    CHECK(h.message_type == 7);
    CHECK(h.dropped_count == 0xdeadbeef);
    CHECK(body == "payload");
}

TEST_CASE("audit wire: a larger header_size is skipped (future header fields)") {
    std::string m = frame_message(2, "abc", 1, 12);
    REQUIRE(m.size() == 15);
    WireHeader h;
    std::string_view body;
    REQUIRE(parse_header(m, h, body) == HeaderError::none);
    CHECK(h.header_size == 12);
    CHECK(body == "abc");
}

TEST_CASE("audit wire: short and inconsistent headers are errors") {
    WireHeader h;
    std::string_view body;
    CHECK(parse_header("", h, body) == HeaderError::too_short);
    CHECK(parse_header("\x08\x00\x01", h, body) == HeaderError::too_short);
    CHECK(parse_header(frame_message(1, "x", 0, 4), h, body) == HeaderError::header_size_too_small);
    std::string beyond = frame_message(1, "", 0, 8);
    beyond[0] = 100;  // header_size 100 in an 8-byte message
    CHECK(parse_header(beyond, h, body) == HeaderError::header_size_beyond_message);
    std::string exact = frame_message(1, "", 0, 8);
    CHECK(parse_header(exact, h, body) == HeaderError::none);
    CHECK(body.empty());
}

TEST_CASE("audit wire: handshake encode/decode and rejection of garbage") {
    CHECK(encode_handshake() == std::string("\x08\x01", 2));
    CHECK(decode_handshake(encode_handshake()) == 1u);
    CHECK(decode_handshake(encode_handshake(300)) == 300u);
    CHECK_FALSE(decode_handshake("").has_value());
    CHECK_FALSE(decode_handshake("garbage").has_value());
    CHECK_FALSE(decode_handshake(std::string("\x08", 1)).has_value());      // truncated varint
    CHECK_FALSE(decode_handshake(std::string("\x10\x01", 2)).has_value());  // wrong field
    CHECK_FALSE(decode_handshake(std::string(12, '\xff')).has_value());
}

TEST_CASE("audit wire: message types 1-34 are known, others are not") {
    CHECK(message_type_info(0) == nullptr);
    CHECK(std::string(message_type_info(1)->fixed_point) == "container/start");
    CHECK(std::string(message_type_info(5)->fixed_point) == "sentry/task_exit");
    CHECK(std::string(message_type_info(34)->family) == "write");
    CHECK(message_type_info(35) == nullptr);
    CHECK(message_type_info(0xffff) == nullptr);
}

TEST_CASE("audit wire: host syscall names round-trip") {
    auto n = syscall_number("openat");
    REQUIRE(n.has_value());
    CHECK(syscall_name(*n) == "openat");
    CHECK_FALSE(syscall_number("no_such_syscall").has_value());
}
