// The writer end to end in-process: a fake sentry on the sink socket, barriers,
// export and finish through the public API, hostile peers, limits, and the
// offline path used when the writer is gone.

#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <openssl/evp.h>
#include <nlohmann/json.hpp>

#include "fixtures.hpp"
#include "lib/audit/audit.hpp"
#include "lib/audit/chain.hpp"
#include "lib/audit/position.hpp"
#include "lib/audit/state.hpp"
#include "lib/audit/wire.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "trace_points.pb.h"

namespace fs = std::filesystem;
using namespace sandweave::audit;
namespace w = sandweave::audit::wire;
using sandweave::test::TempDir;

namespace {

// Under /tmp, not $TMPDIR: the writer's sockets live in it, and a Unix socket
// path must stay under 108 bytes.
const fs::path short_tmp = "/tmp";

// A writer_main running on a thread, as the daemon would.
struct RunningWriter {
    std::thread thread;
    int rc = -1;
    fs::path dir;
    explicit RunningWriter(const fs::path& d, std::uint64_t max_bytes = 1 << 30) : dir(d) {
        int p[2];
        REQUIRE(::pipe(p) == 0);
        WriterOptions o;
        o.dir = dir;
        o.sandbox_id = "sb-test";
        o.runtime_version = "runsc test";
        o.max_bytes = max_bytes;
        o.points = {{"container/start", {}, {"time"}}, {"syscall/openat/exit", {"fd_path"}, {}}};
        o.ready_fd = p[1];
        fs::create_directories(dir);
        ::chmod(dir.c_str(), 0700);
        std::ofstream(dir / "points.json")
            << "[{\"name\":\"container/start\",\"context_fields\":[\"time\"]},"
               "{\"name\":\"syscall/openat/exit\",\"optional_fields\":[\"fd_path\"]}]";
        thread = std::thread([this, o] { rc = writer_main(o); });
        char buf[128] = {};
        ssize_t n = ::read(p[0], buf, sizeof buf - 1);
        ::close(p[0]);
        REQUIRE(n > 0);
        REQUIRE(std::string(buf).rfind("ok ", 0) == 0);
    }
    ~RunningWriter() {
        if (thread.joinable()) {
            finish(dir, 0);
            thread.join();
        }
    }
};

int connect_sink(const fs::path& dir) {
    int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, sink_socket_path(dir).c_str(), sizeof a.sun_path - 1);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    return fd;
}

// Connects and handshakes like runsc's remote sink.
int sentry(const fs::path& dir) {
    int fd = connect_sink(dir);
    std::string h = encode_handshake();
    REQUIRE(::send(fd, h.data(), h.size(), 0) == static_cast<ssize_t>(h.size()));
    char buf[64];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    REQUIRE(n > 0);
    CHECK(decode_handshake(std::string_view(buf, static_cast<std::size_t>(n))) == 1u);
    return fd;
}

void send_msg(int fd, const std::string& m) {
    REQUIRE(::send(fd, m.data(), m.size(), 0) == static_cast<ssize_t>(m.size()));
}

std::string start_msg(std::uint32_t dropped = 0) {
    w::ContainerStarted s;
    s.set_id("sb-test");
    s.add_args("/bin/sleep");
    return frame_message(1, s.SerializeAsString(), dropped);
}

std::string open_msg(const std::string& path, std::uint32_t dropped = 0) {
    w::OpenCall o;
    o.mutable_exit()->set_result(3);
    o.set_sysno(*syscall_number("openat"));
    o.set_pathname(path);
    return frame_message(7, o.SerializeAsString(), dropped);
}

std::vector<nlohmann::json> lines(const fs::path& file) {
    std::vector<nlohmann::json> out;
    std::ifstream in(file);
    for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
    return out;
}

std::string sha256_file(const fs::path& p) {
    std::string data = sandweave::read_file(p, 1 << 30);
    unsigned char md[32];
    unsigned len = 0;
    EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
    std::string hex;
    for (unsigned i = 0; i < len; ++i) {
        char b[3];
        std::snprintf(b, sizeof b, "%02x", md[i]);
        hex += b;
    }
    return hex;
}

mode_t mode_of(const fs::path& p) {
    struct stat st;
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

using sandweave::test::contains;

}  // namespace

TEST_CASE("audit writer: stream, barrier, export, finish") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    RunningWriter wr(dir);
    CHECK(mode_of(dir) == 0700);

    // Before any connection: nothing to claim.
    Status st = barrier(dir, 0, std::chrono::seconds(10));
    CHECK_FALSE(st.complete);
    CHECK(contains(st.reasons, "no_sentry_connection"));

    int fd = sentry(dir);
    send_msg(fd, start_msg());
    send_msg(fd, open_msg("/etc/passwd"));
    st = barrier(dir, 0, std::chrono::seconds(10));
    CHECK(st.complete);
    CHECK(st.reasons.empty());
    CHECK(st.events == 2);
    CHECK(st.last_sequence == 3);  // stream_open + 2 events
    CHECK(st.dropped == 0);
    CHECK(st.writer_running);
    CHECK(st.connected);
    CHECK(st.sandbox_id == "sb-test");
    CHECK(st.runtime_version == "runsc test");
    CHECK(st.bytes == fs::file_size(log_path(dir)));
    CHECK(mode_of(log_path(dir)) == 0600);

    auto recs = lines(log_path(dir));
    REQUIRE(recs.size() == 3);
    for (std::size_t i = 0; i < recs.size(); ++i) CHECK(recs[i]["seq"] == i + 1);
    CHECK(recs[0]["point"] == "writer/stream_open");
    CHECK(recs[1]["point"] == "container/start");
    CHECK(recs[2]["point"] == "syscall/openat/exit");
    CHECK(recs[2]["pathname"] == "/etc/passwd");

    // Export: exact prefix, sha256, modes, sidecar fields.
    fs::path dest = t.path / "out" / "episode.jsonl";
    fs::create_directories(dest.parent_path());
    Status ex = export_log(dir, dest, 0);
    CHECK(ex.complete);
    CHECK(fs::file_size(dest) == ex.bytes);
    CHECK(ex.sha256 == sha256_file(dest));
    CHECK(mode_of(dest) == 0600);
    fs::path side = dest.string() + ".status.json";
    CHECK(mode_of(side) == 0600);
    auto sj = nlohmann::json::parse(sandweave::read_file(side));
    for (const char* k :
         {"complete", "events", "last_sequence", "bytes", "dropped", "reasons", "sandbox_id",
          "runtime_version", "sha256", "points", "exported_at", "path"})
        CHECK_MESSAGE(sj.contains(k), k);
    CHECK(sj["complete"] == true);
    CHECK(sj["points"].contains("container/start"));
    CHECK(sj["points"]["syscall/openat/exit"] == nlohmann::json{"fd_path"});
    // Context fields are listed once; a point with others lists its own.
    CHECK(sj["context_fields"] == nlohmann::json{"time"});
    CHECK(sj["point_context_fields"] ==
          nlohmann::json{{"syscall/openat/exit", nlohmann::json::array()}});
    CHECK(status_from_json(sj).points == ex.points);

    // Events after the barrier are not in that export, but are in the next.
    send_msg(fd, open_msg("/etc/shadow"));
    Status ex2 = export_log(dir, dest, 0);
    CHECK(ex2.events == 3);
    CHECK(ex2.sha256 == sha256_file(dest));

    // An unknown sentry count makes it incomplete, for this barrier only.
    st = barrier(dir, std::nullopt, std::chrono::seconds(10));
    CHECK_FALSE(st.complete);
    CHECK(contains(st.reasons, "runtime_unavailable"));
    CHECK(st.barrier);

    // A live status is no barrier: never complete, says so, invents no reason.
    Status live = live_status(dir);
    CHECK_FALSE(live.complete);
    CHECK_FALSE(live.barrier);
    CHECK(live.writer_running);
    CHECK(live.reasons.empty());
    CHECK(to_json(live)["barrier"] == false);
    CHECK(to_json(ex)["barrier"] == true);

    // finish: final barrier, the writer exits, and stays exportable.
    ::close(fd);
    Status fin = finish(dir, 0);
    wr.thread.join();
    CHECK(wr.rc == 0);
    CHECK(fin.complete);
    CHECK(fin.finished);
    CHECK_FALSE(fs::exists(dir / "control.sock"));
    Status again = finish(dir, std::nullopt);  // idempotent
    CHECK(again.complete);
    CHECK(again.events == fin.events);
    Status after = export_log(dir, t.path / "out" / "after.jsonl", std::nullopt);
    CHECK(after.complete);
    CHECK(after.events == 3);
    CHECK_FALSE(after.writer_running);
    // The saved final status is complete, but a live status never says so.
    Status stopped = live_status(dir);
    CHECK_FALSE(stopped.complete);
    CHECK_FALSE(stopped.barrier);
    CHECK(stopped.finished);
    CHECK(stopped.reasons.empty());
    CHECK(stopped.events == 3);
}

TEST_CASE("audit writer: the position it publishes is the one a status gives") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    RunningWriter wr(dir);
    REQUIRE(published_position(dir).has_value());
    CHECK(*published_position(dir) == 0);
    CHECK(mode_of(position_path(dir)) == 0600);

    int fd = sentry(dir);
    send_msg(fd, start_msg());
    send_msg(fd, open_msg("/etc/passwd"));
    Status st = barrier(dir, 0, std::chrono::seconds(10));
    CHECK(st.last_sequence == 3);
    CHECK(published_position(dir) == std::optional<std::uint64_t>(3));
    CHECK(live_position(dir) == 3);

    // Written but not yet durable: published once the writer's queue drains,
    // as the status it answers then.
    send_msg(fd, open_msg("/etc/shadow"));
    for (int i = 0; i < 500 && published_position(dir) != std::optional<std::uint64_t>(4); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(published_position(dir) == std::optional<std::uint64_t>(4));
    PositionQuery q(dir);
    CHECK(q.get(std::chrono::seconds(1)) == 4);

    // After the writer is gone (the stream's end is a record of its own), its
    // last position stays readable.
    ::close(fd);
    Status fin = finish(dir, 0);
    wr.thread.join();
    CHECK(fin.last_sequence == 5);
    CHECK(published_position(dir) == std::optional<std::uint64_t>(5));

    // Not the writer's file (short, a symlink): not read; the writer is asked
    // (here gone: its persisted state answers).
    fs::remove(position_path(dir));
    CHECK_FALSE(published_position(dir).has_value());
    CHECK(live_position(dir, std::chrono::seconds(1)) == 5);
    std::ofstream(position_path(dir)) << "1234";
    CHECK_FALSE(published_position(dir).has_value());
    fs::remove(position_path(dir));
    std::ofstream(t.path / "eight") << "12345678";
    fs::create_symlink(t.path / "eight", position_path(dir));
    CHECK_FALSE(published_position(dir).has_value());
    CHECK(live_position(dir, std::chrono::seconds(1)) == 5);
}

TEST_CASE("audit writer: runtime drops become gap records and make it incomplete") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    RunningWriter wr(dir);
    int fd = sentry(dir);
    send_msg(fd, start_msg(0));
    send_msg(fd, open_msg("/a", 0));
    send_msg(fd, open_msg("/b", 5));                        // 5 lost before this one
    send_msg(fd, open_msg("/c", 3));                        // stale count (reordered): ignored
    Status st = barrier(dir, 7, std::chrono::seconds(10));  // 2 more lost after /c
    CHECK_FALSE(st.complete);
    CHECK(st.dropped == 7);
    CHECK(contains(st.reasons, "runtime_dropped"));
    CHECK_FALSE(contains(st.reasons, "queue_overflow"));  // the runtime dropped them, not our queue
    auto recs = lines(log_path(dir));
    std::vector<std::uint64_t> gaps;
    for (auto& r : recs)
        if (r["point"] == "gap") gaps.push_back(r["lost"].get<std::uint64_t>());
    CHECK(gaps == std::vector<std::uint64_t>{5, 2});
    CHECK(recs.back()["point"] == "gap");
    CHECK(recs.back()["dropped"] == 7);
    ::close(fd);
}

std::string payload_of(const std::string& framed) {
    return framed.substr(kHeaderMinSize);
}

TEST_CASE("audit writer: batched messages become one record per point, losses stay exact") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    RunningWriter wr(dir);
    int fd = sentry(dir);
    send_msg(fd, frame_batch({{1, payload_of(start_msg())},
                              {7, payload_of(open_msg("/a"))},
                              {7, payload_of(open_msg("/b"))}}));
    // A batch of 3 the runtime could not send: the next batch's header says so.
    send_msg(fd, frame_batch({{7, payload_of(open_msg("/f"))}}, 3));
    // A batch whose tail is not a whole entry: kept raw, counted as malformed.
    send_msg(fd, frame_batch({{7, payload_of(open_msg("/g"))}}) + std::string("\x09\0\0\0\x07", 5));
    Status st = barrier(dir, 3, std::chrono::seconds(10));
    auto recs = lines(log_path(dir));
    std::vector<std::string> seen;
    for (auto& r : recs)
        if (r["point"] == "syscall/openat/exit") seen.push_back(r["pathname"]);
    CHECK(seen == std::vector<std::string>{"/a", "/b", "/f", "/g"});
    CHECK(st.events == 6);  // start, 4 opens, the malformed remainder
    CHECK(st.dropped == 3);
    CHECK(st.counters["malformed"] == 1);
    std::uint64_t lost = 0;
    for (auto& r : recs)
        if (r["point"] == "gap") lost += r["lost"].get<std::uint64_t>();
    CHECK(lost == 3);
    CHECK(message_event_count(frame_batch({{7, "a"}, {7, "b"}})) == 2);
    CHECK(message_event_count(frame_batch({{7, "a"}}) + "xx") == 2);
    CHECK(message_event_count(open_msg("/x")) == 1);
    // The export of batched records verifies like any other.
    fs::path dest = t.path / "batched.jsonl";
    export_log(dir, dest, 3);
    VerifyResult v = verify_log(dest);
    CHECK_MESSAGE(v.ok, v.discrepancy);
    ::close(fd);
}

TEST_CASE("audit writer: hostile peers are refused or recorded, never fatal") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    RunningWriter wr(dir);

    // Wrong handshakes: refused.
    for (std::string bad :
         {std::string("garbage"), std::string("\x08\x00", 2), std::string(2000, 'x')}) {
        int fd = connect_sink(dir);
        ::send(fd, bad.data(), bad.size(), 0);
        char b[16];
        CHECK(::recv(fd, b, sizeof b, 0) <= 0);  // closed without a reply
        ::close(fd);
    }
    // A handshaken peer sending junk.
    int evil = sentry(dir);
    // A second connection while one is active: refused.
    int second = connect_sink(dir);
    std::string h = encode_handshake();
    ::send(second, h.data(), h.size(), MSG_NOSIGNAL);
    char b[16];
    CHECK(::recv(second, b, sizeof b, 0) <= 0);
    ::close(second);

    send_msg(evil, "x");  // shorter than a header
    std::string beyond = frame_message(7, "");
    beyond[0] = static_cast<char>(200);  // header_size beyond the message
    send_msg(evil, beyond);
    send_msg(evil, frame_message(99, "\x01\x02\x03"));          // unknown type
    send_msg(evil, frame_message(7, std::string(11, '\xff')));  // bad protobuf
    if (::geteuid() == 0) {
        int big = 12 << 20;
        ::setsockopt(evil, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
        // The kernel itself refuses a 10 MiB seqpacket message (it cannot
        // allocate it); 3 MiB still goes through and must be cut at our limit.
        std::string huge = frame_message(3, std::string(10 << 20, 'A'));
        if (::send(evil, huge.data(), huge.size(), 0) < 0) {
            huge = frame_message(3, std::string(3 << 20, 'A'));
            CHECK(::send(evil, huge.data(), huge.size(), 0) == static_cast<ssize_t>(huge.size()));
        }
    }
    ::close(evil);

    // The real sentry afterwards is still recorded.
    int real = sentry(dir);
    send_msg(real, start_msg());
    send_msg(real, open_msg("/etc/passwd"));
    Status st = barrier(dir, 0, std::chrono::seconds(10));
    CHECK(st.writer_running);
    CHECK_FALSE(st.complete);
    CHECK(contains(st.reasons, "multiple_sentry_connections"));
    CHECK(contains(st.reasons, "malformed_message"));
    CHECK(st.counters["rejected_connections"] == 4);
    CHECK(st.counters["unknown_types"] == 1);
    CHECK(st.counters["malformed"] == 3);
    if (::geteuid() == 0) {
        CHECK(st.counters["truncated"] == 1);
        CHECK(contains(st.reasons, "truncated_message"));
    }
    auto recs = lines(log_path(dir));
    CHECK(recs.back()["pathname"] == "/etc/passwd");
    for (std::size_t i = 0; i < recs.size(); ++i) CHECK(recs[i]["seq"] == i + 1);
    ::close(real);
}

TEST_CASE("audit writer: the log stops at max_bytes on a line boundary") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    RunningWriter wr(dir, 4096);
    int fd = sentry(dir);
    send_msg(fd, start_msg());
    for (int i = 0; i < 200; ++i) send_msg(fd, open_msg("/file/" + std::to_string(i)));
    Status st = barrier(dir, 0, std::chrono::seconds(10));
    CHECK_FALSE(st.complete);
    CHECK(contains(st.reasons, "byte_limit"));
    CHECK(st.bytes <= 4096);
    CHECK(fs::file_size(log_path(dir)) <= 4096);
    CHECK(st.events + st.counters["byte_limit_dropped"].get<std::uint64_t>() == 201);
    CHECK(st.dropped == st.counters["byte_limit_dropped"]);
    std::string text = sandweave::read_file(log_path(dir));
    CHECK(text.back() == '\n');
    ::close(fd);
}

TEST_CASE("audit export: failures never leave a sidecar claiming completeness") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    RunningWriter wr(dir);
    int fd = sentry(dir);
    send_msg(fd, start_msg());
    fs::path good = t.path / "good.jsonl";
    REQUIRE(export_log(dir, good, 0).complete);
    std::string good_side = sandweave::read_file(good.string() + ".status.json");

    // Missing directory: error, no sidecar.
    fs::path missing = t.path / "nope" / "x.jsonl";
    CHECK_THROWS_AS(export_log(dir, missing, 0), sandweave::Error);
    CHECK_FALSE(fs::exists(missing.string() + ".status.json"));

    // A destination that cannot be replaced (a directory): the old sidecar
    // there is gone, and the new one says complete:false with the error.
    fs::path blocked = t.path / "blocked.jsonl";
    fs::create_directories(blocked / "sub");
    sandweave::write_file_atomic(blocked.string() + ".status.json", "{\"complete\":true}");
    CHECK_THROWS_AS(export_log(dir, blocked, 0), sandweave::Error);
    auto side = nlohmann::json::parse(sandweave::read_file(blocked.string() + ".status.json"));
    CHECK(side["complete"] == false);
    CHECK(side.contains("error"));

    // The earlier export is untouched.
    CHECK(sandweave::read_file(good.string() + ".status.json") == good_side);
    ::close(fd);
}

TEST_CASE("audit offline: a dead writer's log is exported with writer_died") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    fs::create_directories(dir);
    // A state persisted at seq 2, then two more whole lines and a torn one.
    // Lines as the writer writes them: each sealed with its chain.
    Chain chain;
    auto sealed = [&](std::string line) {
        chain.seal(line, 0);
        return line;
    };
    std::string l1 = sealed("{\"seq\":1,\"point\":\"writer/stream_open\",\"dropped\":0}\n");
    std::string l2 = sealed("{\"seq\":2,\"point\":\"container/start\",\"dropped\":0}\n");
    const std::string chain_at_2 = chain_hex(chain.value());
    std::string l3 = sealed("{\"seq\":3,\"point\":\"syscall/openat/exit\",\"dropped\":0}\n");
    std::string l4 = sealed("{\"seq\":4,\"point\":\"syscall/read/exit\",\"dropped\":0}\n");
    // A fifth whole line that does not continue the chain is not part of it.
    std::string l5 = "{\"seq\":5,\"point\":\"syscall/read/exit\",\"dropped\":0,\"chain\":\"" +
                     std::string(32, '0') + "\"}\n";
    std::ofstream(log_path(dir)) << l1 << l2 << l3 << l4 << l5 << "{\"seq\":6,\"po";
    WriterState s;
    s.chain = chain_at_2;
    s.bytes = l1.size() + l2.size();
    s.events = 1;
    s.last_sequence = 2;
    s.streams = 1;
    s.connected = true;
    s.container_start_seen = true;
    s.pid = 999999;  // not running
    s.pid_start_time = 1;
    s.sandbox_id = "dead";
    sandweave::write_file_atomic(dir / "writer-state.json", state_to_json(s).dump());

    Status st = barrier(dir, 0, std::chrono::seconds(2));
    CHECK_FALSE(st.complete);
    CHECK(contains(st.reasons, "writer_died"));
    CHECK(st.events == 3);
    CHECK(st.last_sequence == 4);
    CHECK(st.bytes == l1.size() + l2.size() + l3.size() + l4.size());
    CHECK(st.chain == chain_hex(chain.value()));
    CHECK_FALSE(st.writer_running);

    fs::path dest = t.path / "dead.jsonl";
    Status ex = export_log(dir, dest, 0);
    CHECK_FALSE(ex.complete);
    CHECK(fs::file_size(dest) == ex.bytes);
    CHECK(sandweave::read_file(dest).back() == '\n');

    // The sentry reports 22 drops while the sandbox still runs (export,
    // terminate's finish); after that it cannot be asked, and later exports
    // must still report them: the merged state was persisted.
    Status k = export_log(dir, t.path / "k1.jsonl", 22);
    CHECK(k.dropped == 22);
    Status fin = finish(dir, 22);
    CHECK(fin.dropped == 22);
    CHECK_FALSE(fin.complete);
    CHECK(contains(fin.reasons, "writer_died"));
    auto saved =
        state_from_json(nlohmann::json::parse(sandweave::read_file(dir / "writer-state.json")));
    CHECK(saved.runtime_dropped == 22);
    CHECK(saved.runtime_reported == std::optional<std::uint64_t>(22));
    CHECK(saved.writer_died);
    CHECK_FALSE(saved.finished);
    CHECK(saved.bytes == st.bytes);  // the intact tail is part of the saved prefix
    CHECK(saved.last_sequence == 4);
    Status later = export_log(dir, t.path / "k2.jsonl", std::nullopt);
    CHECK(later.dropped == 22);
    CHECK(later.events == 3);
    CHECK_FALSE(later.complete);
    CHECK(contains(later.reasons, "writer_died"));
    CHECK(contains(later.reasons, "runtime_dropped"));
    // A smaller (older) count never lowers it; a live status reports it too.
    CHECK(barrier(dir, 5, std::chrono::seconds(1)).dropped == 22);
    Status live = live_status(dir);
    CHECK(live.dropped == 22);
    CHECK_FALSE(live.complete);
    CHECK(contains(live.reasons, "writer_died"));
    CHECK_FALSE(contains(live.reasons, "runtime_unavailable"));

    // No state at all: the writer never started (a create killed before it
    // ran). Nothing was written, and the status says so instead of failing.
    TempDir empty("audit", short_tmp);
    Status none = barrier(empty.path, 0, std::chrono::seconds(1));
    CHECK_FALSE(none.complete);
    CHECK(none.events == 0);
    CHECK(none.bytes == 0);
    CHECK(none.last_sequence == 0);
    CHECK(contains(none.reasons, "writer_never_started"));
    Status exported = export_log(empty.path, empty.path / "out.jsonl", std::nullopt);
    CHECK_FALSE(exported.complete);
    CHECK(fs::file_size(empty.path / "out.jsonl") == 0);
    CHECK(exported.sha256 == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST_CASE("audit writer argv round-trips and rejects bad input") {
    TempDir t("audit", short_tmp);
    WriterOptions o;
    o.dir = t.path;
    o.sandbox_id = "sb";
    o.max_bytes = 65536;
    o.runtime_version = "v";
    o.points = {TracePoint{"sentry/clone", {}, {"time"}}};
    auto args = writer_argv(o);
    CHECK(args[0] == "__audit-writer");
    auto back = parse_writer_argv(args);
    CHECK(back.dir == o.dir);
    CHECK(back.sandbox_id == "sb");
    CHECK(back.max_bytes == 65536);
    CHECK(back.runtime_version == "v");
    // Only whether container/start is selected travels, not the list.
    CHECK(back.points.empty());
    CHECK(back.container_start == false);
    CHECK(!selects_container_start(back));
    o.points.push_back(TracePoint{"container/start", {"env"}, {"time"}});
    CHECK(parse_writer_argv(writer_argv(o)).container_start == true);
    o.points.clear();  // no list: everything the runtime has, container/start included
    CHECK(parse_writer_argv(writer_argv(o)).container_start == true);
    args.erase(args.begin());  // the verb is optional
    CHECK(parse_writer_argv(args).sandbox_id == "sb");

    auto usage = [](std::vector<std::string> a) {
        try {
            parse_writer_argv(a);
        } catch (const sandweave::Error& e) {
            return e.code() == sandweave::ErrorCode::usage;
        }
        return false;
    };
    CHECK(usage({"--dir"}));
    CHECK(usage({"--sandbox-id", "x"}));
    CHECK(usage({"--dir", "/x", "--max-bytes", "0"}));
    CHECK(usage({"--dir", "/x", "--max-bytes", "12abc"}));
    CHECK(usage({"--dir", "/x", "--bogus", "1"}));
    CHECK(usage({"--dir", "/x", "--container-start", "maybe"}));
    CHECK(usage({"--dir", "/x", "--points-file", "/x/points.json"}));  // no longer an option
}

namespace {
// An execve exit point whose argv is `n` arguments of 128 KiB - 1 bytes
// (gVisor's largest), each telling its index in its first bytes.
std::string big_execve(int n, std::size_t env_bytes = 0) {
    w::ExecveCall e;
    e.mutable_exit()->set_result(0);
    e.set_sysno(*syscall_number("execve"));
    e.set_pathname("/bin/true");
    for (int i = 0; i < n; ++i) {
        std::string a = std::to_string(i) + ":";
        a.resize((128u << 10) - 1, 'a');
        e.add_argv(a);
    }
    for (std::size_t k = 0; k * 100000 < env_bytes; ++k)
        e.add_envv("E" + std::to_string(k) + "=" + std::string(100000, 'e'));
    return e.SerializeAsString();
}
}  // namespace

TEST_CASE("audit writer: a point of megabytes arrives in fragments and is written whole") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    RunningWriter wr(dir);
    int fd = sentry(dir);
    send_msg(fd, start_msg());
    // 1.5 MiB of argv and 1 MiB of environment after a small point, in one
    // batch: more than one message may hold, so the runtime fragments it
    // (smaller fragments than its 256 KiB: the default send buffer).
    std::string body = payload_of(
        frame_batch({{7, payload_of(open_msg("/before"))}, {11, big_execve(12, 1 << 20)}}));
    REQUIRE(body.size() > kMaxMessageSize);
    for (const auto& m : frame_fragments(body, 100u << 10)) send_msg(fd, m);
    send_msg(fd, open_msg("/after"));

    // A series that stopped early (the runtime could not send the rest and
    // counted its 2 points as dropped): nothing of it is written twice.
    auto cut = frame_fragments(body, 100u << 10);
    send_msg(fd, cut[0]);
    send_msg(fd, cut[1]);
    send_msg(fd, open_msg("/later", 2));

    Status st = barrier(dir, 2, std::chrono::seconds(20));
    auto recs = lines(log_path(dir));
    std::vector<std::string> opens;
    std::vector<nlohmann::json> execs;
    int incomplete = 0;
    for (auto& r : recs) {
        if (r["point"] == "syscall/openat/exit") opens.push_back(r["pathname"]);
        if (r["point"] == "syscall/execve/exit") execs.push_back(r);
        if (r["point"] == "writer/fragments_incomplete") ++incomplete;
    }
    CHECK(opens == std::vector<std::string>{"/before", "/after", "/later"});
    REQUIRE(execs.size() == 1);
    REQUIRE(execs[0]["argv"].size() == 12);
    for (int i = 0; i < 12; ++i) {
        std::string a = execs[0]["argv"][static_cast<std::size_t>(i)];
        CHECK(a.size() == (128u << 10) - 1);
        CHECK(a.rfind(std::to_string(i) + ":aaa", 0) == 0);
    }
    CHECK(execs[0]["envv"].size() == 11);
    CHECK(incomplete == 1);
    CHECK(st.counters["truncated"] == 0);
    CHECK(st.counters["malformed"] == 0);
    CHECK(st.counters["runtime_dropped"] == 2);
    CHECK(st.counters["queue_overflow"] == 0);
    CHECK(st.events == 5);  // start, 3 opens, the execve
    ::close(fd);
}

TEST_CASE(
    "audit writer: a point over every limit is kept truncated, named, with its first arguments") {
    TempDir t("audit", short_tmp);
    fs::path dir = t.path / "w";
    RunningWriter wr(dir);
    int fd = sentry(dir);
    send_msg(fd, start_msg());
    // 80 arguments of 128 KiB: 10 MiB, more than kMaxAssembledBody (no real
    // runtime makes one; a hostile sentry could).
    std::string body =
        payload_of(frame_batch({{7, payload_of(open_msg("/first"))}, {11, big_execve(80)}}));
    REQUIRE(body.size() > kMaxAssembledBody);
    for (const auto& m : frame_fragments(body, 100u << 10)) send_msg(fd, m);
    // The same, unfragmented: one message over kMaxMessageSize (root: the
    // default send buffer refuses it before the writer sees it).
    bool whole = false;
    if (::geteuid() == 0) {
        int big = 8 << 20;
        ::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
        send_msg(fd, frame_batch({{11, big_execve(12)}}));
        whole = true;
    }
    send_msg(fd, open_msg("/last"));
    Status st = barrier(dir, 0, std::chrono::seconds(20));
    auto recs = lines(log_path(dir));
    std::vector<nlohmann::json> cut;
    std::vector<std::string> opens;
    for (auto& r : recs) {
        if (r["point"] == "writer/truncated_message") cut.push_back(r);
        if (r["point"] == "syscall/openat/exit") opens.push_back(r["pathname"]);
    }
    CHECK(opens == std::vector<std::string>{"/first", "/last"});
    REQUIRE(cut.size() == (whole ? 2u : 1u));
    for (auto& c : cut) {
        CHECK(c["of"] == "syscall/execve/exit");
        CHECK(c["point_type"] == 11);
        CHECK(c["record"]["pathname"] == "/bin/true");
        auto& argv = c["record"]["argv"];
        REQUIRE(argv.size() >= 7);  // the whole arguments of the kept bytes
        for (std::size_t i = 0; i < argv.size(); ++i)
            CHECK(argv[i].get<std::string>().rfind(std::to_string(i) + ":aaa", 0) == 0);
    }
    CHECK(cut[0]["size"] == body.size());
    CHECK(cut[0]["kept"] == kMaxAssembledBody);
    CHECK(st.counters["truncated"] == cut.size());
    CHECK_FALSE(st.complete);
    CHECK(contains(st.reasons, "truncated_message"));
    ::close(fd);
}

TEST_CASE("audit wire: fragments and whole-field prefixes") {
    std::string body(1000, 'x');
    auto frags = frame_fragments(body, 300);
    REQUIRE(frags.size() == 4);
    std::string joined;
    for (auto& m : frags) {
        WireHeader h;
        std::string_view payload;
        REQUIRE(parse_header(m, h, payload) == HeaderError::none);
        CHECK(h.message_type == kFragmentMessage);
        Fragment f;
        REQUIRE(parse_fragment(payload, f));
        CHECK(f.offset == joined.size());
        CHECK(f.total == 1000);
        joined += f.data;
    }
    CHECK(joined == body);
    Fragment f;
    CHECK_FALSE(parse_fragment("short", f));
    std::string over = frags[3].substr(kHeaderMinSize);
    over[4] = 10;  // total 10, data past it
    over[5] = over[6] = over[7] = 0;
    CHECK_FALSE(parse_fragment(over, f));

    w::ExecveCall e;
    e.set_pathname("/bin/x");
    e.add_argv("one");
    e.add_argv("two");
    std::string pb = e.SerializeAsString();
    CHECK(whole_fields_prefix(pb) == pb.size());
    CHECK(whole_fields_prefix(pb.substr(0, pb.size() - 1)) == pb.size() - 5);
    CHECK(whole_fields_prefix("") == 0);
    CHECK(whole_fields_prefix("\x0a\x7f") == 0);
}
