// Decoding each message type into one JSONL record, and surviving hostile payloads.

#include <doctest/doctest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "lib/audit/decoder.hpp"
#include "lib/audit/state.hpp"
#include "lib/core/fsutil.hpp"
#include "trace_points.pb.h"

using namespace sandweave::audit;
namespace w = sandweave::audit::wire;

namespace {

struct Decoded {
    RecordFormatter::Result result;
    nlohmann::json json;
    std::string line;
};

Decoded decode(const std::string& message, std::uint64_t seq = 1, std::uint64_t dropped = 0) {
    static RecordFormatter fmt;
    JsonOut out;
    Decoded d;
    d.result = fmt.message(out, seq, dropped, message);
    d.line = out.buf();
    REQUIRE(!d.line.empty());
    CHECK(d.line.back() == '\n');
    CHECK(d.line.find('\n') == d.line.size() - 1);  // exactly one line
    d.json = parse_log_line(d.line);                // always valid JSON
    return d;
}

w::TaskContext context(int tid) {
    w::TaskContext c;
    c.set_time_ns(1234567890123);
    c.set_thread_id(tid);
    c.set_container_id("sb-1");
    c.set_cwd("/tmp");
    c.set_process_name("sh");
    c.mutable_credentials()->set_real_uid(1001);
    c.mutable_credentials()->set_effective_gid(1001);
    return c;
}

}  // namespace

TEST_CASE("audit decoder: container/start with args, env and context") {
    w::ContainerStarted m;
    *m.mutable_context_data() = context(1);
    m.set_id("sb-1");
    m.add_args("/bin/sleep");
    m.add_args("1000");
    m.add_env("PATH=/bin");
    auto d = decode(frame_message(1, m.SerializeAsString(), 0), 1, 0);
    CHECK(d.result.outcome == RecordFormatter::Outcome::event);
    CHECK(d.result.container_start);
    CHECK(d.json["seq"] == 1);
    CHECK(d.json["point"] == "container/start");
    CHECK(d.json["dropped"] == 0);
    CHECK(d.json["id"] == "sb-1");
    CHECK(d.json["args"] == nlohmann::json::array({"/bin/sleep", "1000"}));
    CHECK(d.json["env"] == nlohmann::json::array({"PATH=/bin"}));
    CHECK(d.json["context_data"]["thread_id"] == 1);
    CHECK(d.json["context_data"]["time_ns"] == 1234567890123);
    CHECK(d.json["context_data"]["credentials"]["real_uid"] == 1001);
    CHECK(d.json["context_data"]["process_name"] == "sh");
    // keys come first in a fixed order: seq, point, dropped
    CHECK(d.line.rfind("{\"seq\":1,\"point\":\"container/start\",\"dropped\":0,", 0) == 0);
}

TEST_CASE("audit decoder: lifecycle points 2-5") {
    w::TaskCloned c;
    c.set_created_thread_id(7);
    c.set_flags(0x11);
    auto d = decode(frame_message(2, c.SerializeAsString()));
    CHECK(d.json["point"] == "sentry/clone");
    CHECK(d.json["created_thread_id"] == 7);
    CHECK(d.json["flags"] == 17);

    w::TaskExecved e;
    e.set_binary_path("/bin/busybox");
    e.add_argv("cat");
    e.add_argv("/etc/passwd");
    e.set_binary_sha256(std::string(32, '\x01'));
    d = decode(frame_message(3, e.SerializeAsString()));
    CHECK(d.json["point"] == "sentry/execve");
    CHECK(d.json["argv"] == nlohmann::json::array({"cat", "/etc/passwd"}));
    CHECK(d.json["binary_sha256"] == "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=");

    w::ParentNotified p;
    p.set_exit_status(-9);
    d = decode(frame_message(4, p.SerializeAsString()));
    CHECK(d.json["point"] == "sentry/exit_notify_parent");
    CHECK(d.json["exit_status"] == -9);

    w::TaskExited x;
    x.set_exit_status(256);
    d = decode(frame_message(5, x.SerializeAsString()));
    CHECK(d.json["point"] == "sentry/task_exit");
    CHECK(d.json["exit_status"] == 256);
}

TEST_CASE("audit decoder: raw syscall records name the syscall, keep pointer args exact") {
    w::RawSyscall r;
    r.set_sysno(*syscall_number("newfstatat"));
    r.mutable_exit()->set_result(6209536);
    r.set_arg1(0);
    r.set_arg2(0x7ffd1c2e0a10ull);
    r.set_arg4(0xffffffffffffffffull);
    auto d = decode(frame_message(6, r.SerializeAsString()));
    const std::string n = std::to_string(*syscall_number("newfstatat"));
    CHECK(d.json["point"] == "syscall/sysno/" + n + "/exit");
    CHECK(d.json["sysno"] == *syscall_number("newfstatat"));
    CHECK(d.json["syscall"] == "newfstatat");
    CHECK(d.json["exit"]["result"] == 6209536);
    // Arguments are hex strings: exact for every JSON reader.
    CHECK(d.json["arg4"] == "0xffffffffffffffff");
    CHECK(d.json["arg2"] == "0x7ffd1c2e0a10");
    // Zero values are absent on the wire (proto3) but always written here.
    for (const char* a : {"arg1", "arg3", "arg5", "arg6"}) CHECK_MESSAGE(d.json[a] == "0x0", a);
    CHECK(d.json["exit"] == nlohmann::json{{"result", 6209536}, {"errorno", 0}});
    // Field order follows the schema: exit, sysno (and its name), arg1..arg6.
    CHECK(d.line.find("\"exit\":{\"result\":6209536,\"errorno\":0},\"sysno\":" + n +
                      ",\"syscall\":\"newfstatat\",\"arg1\":\"0x0\",\"arg2\":\"0x7ffd1c2e0a10\","
                      "\"arg3\":\"0x0\",\"arg4\":\"0xffffffffffffffff\",\"arg5\":\"0x0\","
                      "\"arg6\":\"0x0\"}") != std::string::npos);

    w::RawSyscall zero;  // a zero result and a zero sysno (read on x86-64)
    zero.mutable_exit();
    d = decode(frame_message(6, zero.SerializeAsString()));
    CHECK(d.json["point"] == "syscall/sysno/0/exit");
    CHECK(d.json["sysno"] == 0);
    CHECK(d.json["syscall"] == *syscall_name(0));
    CHECK(d.json["exit"] == nlohmann::json{{"result", 0}, {"errorno", 0}});
    for (const char* a : {"arg1", "arg2", "arg3", "arg4", "arg5", "arg6"})
        CHECK_MESSAGE(d.json[a] == "0x0", a);

    w::RawSyscall enter;
    enter.set_sysno(12);
    d = decode(frame_message(6, enter.SerializeAsString()));
    CHECK(d.json["point"] == "syscall/sysno/12/enter");
    CHECK_FALSE(d.json.contains("exit"));  // an enter record has no exit to default
    CHECK(d.json["arg1"] == "0x0");

    w::RawSyscall unnamed;  // a number without a name: no "syscall" key
    unnamed.set_sysno(100000);
    d = decode(frame_message(6, unnamed.SerializeAsString()));
    CHECK(d.json["sysno"] == 100000);
    CHECK_FALSE(d.json.contains("syscall"));
}

TEST_CASE("audit decoder: 64-bit values beyond 2^53 are decimal strings") {
    w::OpenCall o;
    *o.mutable_context_data() = context(3);
    o.mutable_context_data()->set_time_ns(1764590000123456789);  // > 2^53
    o.set_sysno(*syscall_number("openat"));
    o.set_fd(-100);
    auto d = decode(frame_message(7, o.SerializeAsString()));
    CHECK(d.json["context_data"]["time_ns"] == "1764590000123456789");
    CHECK(d.json["fd"] == -100);  // small values stay numbers
    JsonOut out;
    out.exact_u64(1ull << 53);
    out.ch(' ');
    out.exact_u64((1ull << 53) + 1);
    out.ch(' ');
    out.exact_i64(INT64_MIN);
    out.ch(' ');
    out.hex64(0);
    out.ch(' ');
    out.hex64(UINT64_MAX);
    CHECK(out.buf() ==
          "9007199254740992 \"9007199254740993\" \"-9223372036854775808\" \"0x0\" "
          "\"0xffffffffffffffff\"");
}

TEST_CASE("audit decoder: schematized syscalls use the syscall's own name") {
    w::OpenCall o;
    *o.mutable_context_data() = context(3);
    o.mutable_exit()->set_result(3);
    o.set_sysno(*syscall_number("openat"));
    o.set_fd(-100);
    o.set_pathname("/etc/passwd");
    o.set_flags(0x80000);
    auto d = decode(frame_message(7, o.SerializeAsString()));
    CHECK(d.json["point"] == "syscall/openat/exit");
    CHECK(d.json["pathname"] == "/etc/passwd");
    CHECK(d.json["fd"] == -100);
    CHECK(d.json["exit"]["result"] == 3);

    w::ExecveCall e;
    e.mutable_exit();  // present but all-zero: still an exit record
    e.set_sysno(*syscall_number("execve"));
    e.set_pathname("/bin/id");
    e.add_argv("/bin/id");
    d = decode(frame_message(11, e.SerializeAsString()));
    CHECK(d.json["point"] == "syscall/execve/exit");
    // A zero result is written, not an ambiguous "exit":{}.
    CHECK(d.json["exit"] == nlohmann::json{{"result", 0}, {"errorno", 0}});
    CHECK_FALSE(d.json.contains("fd"));  // other proto3 defaults stay absent
    CHECK(d.json["argv"] == nlohmann::json::array({"/bin/id"}));

    w::ReadCall r;  // sysno 0 (read on x86-64) is absent on the wire
    r.mutable_exit()->set_result(62);
    r.set_fd(3);
    r.set_fd_path("/etc/passwd");
    d = decode(frame_message(9, r.SerializeAsString()));
    CHECK(d.json["fd_path"] == "/etc/passwd");
    CHECK(d.json["point"] == "syscall/" + std::string(*syscall_name(0)) + "/exit");
    CHECK(d.json["sysno"] == 0);  // always written for syscall records
    CHECK(d.json["exit"] == nlohmann::json{{"result", 62}, {"errorno", 0}});

    w::TimerfdSetTimeCall t;  // three levels of nesting
    t.mutable_exit();
    t.mutable_new_value()->mutable_value()->set_sec(5);
    d = decode(frame_message(27, t.SerializeAsString()));
    CHECK(d.json["new_value"]["value"]["sec"] == 5);

    w::PrlimitCall p;
    p.mutable_exit();
    p.mutable_new_limit()->set_cur(10);
    p.set_resource(7);
    d = decode(frame_message(16, p.SerializeAsString()));
    CHECK(d.json["new_limit"]["cur"] == 10);

    w::ConnectCall c;
    c.mutable_exit()->set_errorno(111);
    c.set_address(std::string("\x01\x00/x", 4));
    d = decode(frame_message(10, c.SerializeAsString()));
    CHECK(d.json["address"] == "AQAveA==");
    CHECK(d.json["exit"]["errorno"] == 111);
    CHECK(d.json["exit"]["result"] == 0);
}

TEST_CASE("audit decoder: every type 7-34 decodes an exit record") {
    for (std::uint16_t t = 7; t <= 34; ++t) {
        w::ForkCall m;  // fields 1-3 are common to every schematized syscall
        m.mutable_exit()->set_result(1);
        m.set_sysno(1);
        auto d = decode(frame_message(t, m.SerializeAsString()));
        CHECK_MESSAGE(d.result.outcome == RecordFormatter::Outcome::event, "type ", t);
        CHECK(d.json["point"].get<std::string>().find("/exit") != std::string::npos);
    }
}

TEST_CASE("audit decoder: unknown types are kept raw, base64") {
    auto d = decode(frame_message(40, "\x08\x01", 3), 9, 3);
    CHECK(d.result.outcome == RecordFormatter::Outcome::unknown_type);
    CHECK(d.json["point"] == "writer/unknown_message");
    CHECK(d.json["type"] == 40);
    CHECK(d.json["raw"] == "CAE=");
    CHECK(d.json["seq"] == 9);
    CHECK(d.json["dropped"] == 3);
    CHECK(decode(frame_message(0, "")).result.outcome == RecordFormatter::Outcome::unknown_type);
}

TEST_CASE("audit decoder: malformed messages become raw records, not crashes") {
    // header problems
    auto d = decode(std::string("\x01\x02", 2));
    CHECK(d.result.outcome == RecordFormatter::Outcome::malformed);
    CHECK(d.json["point"] == "writer/malformed_message");
    d = decode(frame_message(7, "", 0, 3));
    CHECK(d.result.outcome == RecordFormatter::Outcome::malformed);
    // payload problems: truncated length, bad varint, group wire type, field 0
    for (std::string bad :
         {std::string("\x2a\x10", 2), std::string(11, '\xff'), std::string("\x0b"),
          std::string("\x00\x01", 2), std::string("\x12\x05\x08", 3)}) {
        d = decode(frame_message(7, bad));
        CHECK(d.result.outcome == RecordFormatter::Outcome::malformed);
        CHECK(d.json.contains("raw"));
    }
    // a bad nested message rolls back what was already emitted for the record
    w::OpenCall o;
    o.set_pathname("/ok");
    std::string payload = o.SerializeAsString() + std::string("\x0a\x02\x2a\x10", 4);
    d = decode(frame_message(7, payload));
    CHECK(d.result.outcome == RecordFormatter::Outcome::malformed);
    CHECK_FALSE(d.json.contains("pathname"));
}

TEST_CASE("audit decoder: unknown fields are kept, wrong wire types too") {
    w::CloseCall c;
    c.set_fd(4);
    std::string payload = c.SerializeAsString() + std::string("\xa0\x06\x01", 3);  // field 100
    payload += std::string("\x22\x01x", 3);  // field 4 (fd, varint) sent as bytes
    auto d = decode(frame_message(8, payload));
    CHECK(d.result.outcome == RecordFormatter::Outcome::event);
    CHECK(d.json["fd"] == 4);
    CHECK(d.json.contains("unknown_fields"));
}

TEST_CASE("audit decoder: hostile strings are escaped; bytes that are not UTF-8 are kept") {
    w::OpenCall o;
    o.set_pathname(std::string("a\"b\\c\n\x01\xe2\x82\xac", 10));
    auto d = decode(frame_message(7, o.SerializeAsString()));
    CHECK_FALSE(d.result.escaped);
    CHECK(d.json["pathname"] == std::string("a\"b\\c\n\x01\xe2\x82\xac", 10));
    // Bypass protobuf's UTF-8 check by writing the bytes field by hand.
    std::string bad = std::string("\x32\x03", 2) + "\xff\xfe" + "x";
    d = decode(frame_message(7, bad));
    CHECK(d.result.escaped);
    // Python's surrogateescape: byte 0xNN is the escape \udcNN.
    CHECK(d.line.find(R"("pathname":"\udcff\udcfex")") != std::string::npos);
    // Sequences that look like UTF-8 but are not (overlong, a surrogate, past
    // U+10FFFF, cut short) are escaped byte by byte; valid ones are kept.
    bad = std::string("\x32\x0e", 2) +
          std::string("\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80\xe2\x82", 11) + "\xc3\xa9" + "\\";
    d = decode(frame_message(7, bad));
    CHECK(d.result.escaped);
    CHECK(d.line.find(
              R"("pathname":"\udcc0\udcaf\udced\udca0\udc80\udcf4\udc90\udc80\udc80\udce2\udc82)"
              "\xc3\xa9"
              R"(\\")") != std::string::npos);
}

TEST_CASE("audit decoder: the recorded runsc corpus decodes without a malformed record") {
    namespace fs = std::filesystem;
    fs::path dir = fs::path(SANDWEAVE_TEST_DATA) / "audit" / "corpus";
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        if (e.path().filename() == "handshake.bin") continue;
        // batch-*.bin are built from recorded points (fuzz seeds); the writer
        // takes them apart (writer test), the formatter alone does not.
        if (e.path().filename().string().rfind("batch-", 0) == 0) continue;
        auto d = decode(sandweave::read_file(e.path()));
        CHECK_MESSAGE(d.result.outcome == RecordFormatter::Outcome::event, e.path().string());
        ++n;
    }
    CHECK(n > 20);
}

TEST_CASE("audit decoder: gap records") {
    JsonOut out;
    format_gap(out, 5, 12, 7, "runtime");
    auto j = nlohmann::json::parse(out.buf());
    CHECK(j ==
          nlohmann::json{
              {"seq", 5}, {"point", "gap"}, {"dropped", 12}, {"lost", 7}, {"source", "runtime"}});
}

TEST_CASE("audit json: base64 and numbers") {
    CHECK(base64_encode("") == "");
    CHECK(base64_encode("f") == "Zg==");
    CHECK(base64_encode("fo") == "Zm8=");
    CHECK(base64_encode("foo") == "Zm9v");
    JsonOut o;
    o.i64(INT64_MIN);
    o.ch(' ');
    o.u64(UINT64_MAX);
    CHECK(o.buf() == "-9223372036854775808 18446744073709551615");
}

TEST_CASE("audit decoder: the context memo writes what a fresh formatter writes") {
    // A point whose context is given as raw TaskContext bytes (so that odd
    // encodings can be sent too): openat, type 7.
    auto open_with = [](const std::string& ctx_bytes) {
        w::OpenCall o;
        o.set_pathname("/etc/passwd");
        o.set_fd(3);
        std::string payload = "\x0a" + std::string(1, static_cast<char>(ctx_bytes.size())) +
                              ctx_bytes + o.SerializeAsString();
        return frame_message(7, payload, 0);
    };
    auto ctx = [](std::int64_t time_ns, const std::string& cwd) {
        w::TaskContext c = context(4);
        c.set_time_ns(time_ns);
        c.set_cwd(cwd);
        return c.SerializeAsString();
    };
    const std::string bad_name = std::string("\x4a\x02\xff", 3) + "x";  // process_name, not UTF-8
    const std::vector<std::string> contexts = {
        ctx(1, "/tmp"),
        ctx(2, "/tmp"),                            // the memo's rest
        ctx(9007199254740993, "/tmp"),             // time beyond 2^53: a string
        ctx(3, "/"),                               // a new rest
        ctx(4, "/tmp"),                            // the old one again
        ctx(5, "/") + std::string("\x08\x07", 2),  // time_ns twice: the last one wins
        ctx(6, "/"),
        ctx(0, "/"),             // no time_ns at all
        ctx(7, "/") + bad_name,  // escaped, memoized
        ctx(8, "/") + bad_name,  // escaped from the memo
        ctx(9, "/"),
    };
    RecordFormatter warm;
    for (std::size_t i = 0; i < contexts.size(); ++i) {
        CAPTURE(i);
        std::string msg = open_with(contexts[i]);
        RecordFormatter fresh;
        JsonOut a, b;
        auto ra = warm.message(a, i + 1, 0, msg);
        auto rb = fresh.message(b, i + 1, 0, msg);
        CHECK(a.buf() == b.buf());
        CHECK(ra.escaped == rb.escaped);
        CHECK(ra.outcome == RecordFormatter::Outcome::event);
    }
    JsonOut out;
    auto r = warm.message(out, 1, 0, open_with(ctx(5, "/") + std::string("\x08\x07", 2)));
    CHECK_FALSE(r.escaped);
    CHECK(nlohmann::json::parse(out.buf())["context_data"]["time_ns"] == 7);
    out.clear();
    r = warm.message(out, 1, 0, open_with(ctx(8, "/") + bad_name));
    CHECK(r.escaped);
    CHECK(parse_log_line(out.buf())["context_data"]["time_ns"] == 8);
}
