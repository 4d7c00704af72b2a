// The CLI side of the audit writer: starting the daemon, barrier/status/stop
// over control.sock, the offline fallback when the writer is gone, and export.
//
// Offline rule: without a live writer the last persisted state is the truth,
// extended by whole, consistent lines written after it (they are in the page
// cache even when the writer was SIGKILLed; we fsync them ourselves). Unless
// the writer finished cleanly, such a status carries writer_died (or
// writer_unresponsive) and can never be complete.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "lib/audit/audit.hpp"
#include "lib/audit/chain.hpp"
#include "lib/audit/egress_log.hpp"
#include "lib/audit/position.hpp"
#include "lib/audit/state.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fault.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/helper.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/process.hpp"
#include "lib/core/progress.hpp"
#include "lib/core/sha256.hpp"

namespace sandweave::audit {

fs::path sink_socket_path(const fs::path& dir) {
    return dir / "sink.sock";
}
fs::path log_path(const fs::path& dir) {
    return dir / "audit.jsonl";
}

fs::path points_path(const fs::path& dir) {
    return dir / "points.json";
}

namespace {

using namespace std::chrono_literals;

fs::path state_path(const fs::path& dir) {
    return dir / "writer-state.json";
}
nlohmann::json points_to_json(const std::vector<TracePoint>& points) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : points)
        a.push_back({{"name", p.name},
                     {"optional_fields", p.optional_fields},
                     {"context_fields", p.context_fields}});
    return a;
}

std::vector<TracePoint> points_from_json(const nlohmann::json& a) {
    std::vector<TracePoint> out;
    if (!a.is_array()) throw Error(ErrorCode::usage, "points file is not a JSON array");
    for (const auto& p : a)
        out.push_back({p.at("name").get<std::string>(),
                       p.value("optional_fields", std::vector<std::string>{}),
                       p.value("context_fields", std::vector<std::string>{})});
    return out;
}

// Every sandbox of one runtime lists the same points (~90 KB of JSON), and a
// status is asked for several times per sandbox (terminate's barrier, the
// export, rm): the text last seen is parsed once per process.
std::vector<TracePoint> load_points(const fs::path& dir) {
    static std::mutex mu;
    static std::string last_text;
    static std::vector<TracePoint> last_points;
    try {
        std::string text = read_file(points_path(dir));
        {
            std::lock_guard lock(mu);
            if (!last_text.empty() && text == last_text) return last_points;
        }
        auto points = points_from_json(parse_untrusted_json(text));
        std::lock_guard lock(mu);
        last_text = std::move(text);
        last_points = points;
        return points;
    } catch (const std::exception&) {
        return {};  // the status then lists no coverage, which is the truth we have
    }
}

struct Reply {
    enum Kind { ok, unreachable, timeout, failed } kind = failed;
    nlohmann::json state;
    std::string error;
};

// A control request sent and not yet answered: `sock` is open while an
// answer may come, else `early` says why none will.
struct SentRequest {
    Fd sock;
    fs::path path;
    Reply early;
};

SentRequest send_control(const fs::path& dir, const nlohmann::json& request) {
    SentRequest sent;
    sent.path = dir / "control.sock";
    Reply& r = sent.early;
    UnixAddress addr;  // a long state directory's is reached through its descriptor
    if (!unix_address(sent.path, addr)) {
        r.kind = Reply::unreachable;
        r.error = errno_message("connect " + sent.path.string());
        return sent;
    }
    Fd sock(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    if (!sock) {
        r.error = errno_message("socket");
        return sent;
    }
    int fd = sock.get();
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr.addr), addr.len) != 0) {
        r.kind = Reply::unreachable;
        r.error = errno_message("connect " + sent.path.string());
        return sent;
    }
    std::string text = request.dump();
    if (::send(fd, text.data(), text.size(), MSG_NOSIGNAL) < 0) {
        r.kind = Reply::unreachable;
        r.error = errno_message("send to " + sent.path.string());
        return sent;
    }
    sent.sock = std::move(sock);
    return sent;
}

Reply await_control(SentRequest& sent, std::chrono::milliseconds timeout) {
    if (!sent.sock) return sent.early;
    Reply r;
    int fd = sent.sock.get();
    pollfd p{fd, POLLIN, 0};
    int rc;
    do {
        rc = ::poll(&p, 1, static_cast<int>(timeout.count()));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) {
        r.kind = Reply::timeout;
        r.error =
            "the audit writer did not answer within " + std::to_string(timeout.count()) + " ms";
        return r;
    }
    // Sized to the reply (a datagram: MSG_TRUNC says its length), not a
    // zeroed MiB per request.
    ssize_t size = ::recv(fd, nullptr, 0, MSG_PEEK | MSG_TRUNC | MSG_DONTWAIT);
    std::string buf(static_cast<std::size_t>(std::clamp<ssize_t>(size, 1, 1 << 20)), '\0');
    ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n <= 0) {
        // Closed without a reply: the writer died while serving us.
        r.kind = Reply::unreachable;
        r.error = "the audit writer closed the control connection";
        return r;
    }
    buf.resize(static_cast<std::size_t>(n));
    try {
        auto j = parse_untrusted_json(buf);
        if (j.value("ok", false)) {
            r.kind = Reply::ok;
            r.state = j.at("state");
        } else {
            r.kind = Reply::failed;
            r.error = j.value("error", "unknown error");
        }
    } catch (const std::exception& e) {
        r.error = std::string("bad reply from the audit writer: ") + e.what();
    }
    return r;
}

Reply control_request(const fs::path& dir, const nlohmann::json& request,
                      std::chrono::milliseconds timeout) {
    SentRequest sent = send_control(dir, request);
    return await_control(sent, timeout);
}

bool writer_alive(const WriterState& s) {
    return s.pid > 0 && s.pid_start_time != 0 && process_start_time(s.pid) == s.pid_start_time;
}

// Extends `s` by the whole lines after its durable prefix that continue the
// sequence, then makes them durable.
void extend_with_tail(const fs::path& dir, WriterState& s) {
    Fd log_fd(::open(log_path(dir).c_str(), O_RDONLY | O_CLOEXEC));
    if (!log_fd) return;
    int fd = log_fd.get();
    struct stat st;
    if (::fstat(fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) <= s.bytes) return;
    std::uint64_t end = static_cast<std::uint64_t>(st.st_size);
    std::uint64_t pos = s.bytes;
    std::string chunk, carry;
    bool stop = false;
    // Only lines that continue the chain belong to the stream.
    Chain chain;
    ChainValue cv{};
    if (!chain_parse(s.chain, cv)) return;
    chain.reset(cv);
    while (pos < end && !stop) {
        chunk.resize(std::min<std::uint64_t>(1 << 20, end - pos));
        ssize_t n = ::pread(fd, chunk.data(), chunk.size(), static_cast<off_t>(pos));
        if (n <= 0) break;
        chunk.resize(static_cast<std::size_t>(n));
        pos += static_cast<std::uint64_t>(n);
        carry += chunk;
        std::size_t start = 0;
        for (;;) {
            auto nl = carry.find('\n', start);
            if (nl == std::string::npos) break;
            std::string_view line(carry.data() + start, nl - start);
            std::string_view body, hex;
            ChainValue carried;
            if (!split_chained_line(line, body, hex) || !chain_parse(hex, carried) ||
                chain.next(body) != carried) {
                stop = true;
                break;
            }
            nlohmann::json j;
            try {
                j = parse_log_line(line);
            } catch (...) {
                stop = true;
                break;
            }
            if (!j.is_object() || j.value("seq", std::uint64_t{0}) != s.last_sequence + 1) {
                stop = true;
                break;
            }
            std::string point = j.value("point", "");
            if (point == "gap") {
                std::uint64_t lost = j.value("lost", std::uint64_t{0});
                if (j.value("source", "") == "runtime")
                    s.runtime_dropped += lost;
                else if (j.value("source", "") == egress_log_gap_source)
                    s.egress_lost += lost;
                else
                    s.queue_overflow += lost;
            } else if (point == "writer/truncated_message") {
                ++s.truncated;
            } else if (point == "writer/stream_open") {
                ++s.streams;
            } else if (point == "writer/connection_rejected") {
                ++s.rejected_connections;
            } else if (point.rfind("writer/", 0) != 0 || point == "writer/unknown_message" ||
                       point == "writer/malformed_message") {
                ++s.events;
                if (point == "writer/unknown_message") ++s.unknown_types;
                if (point == "writer/malformed_message") ++s.malformed;
                if (point == "container/start") s.container_start_seen = true;
                if (point == refused_point) ++s.egress_refused;
            }
            s.last_sequence += 1;
            s.bytes += line.size() + 1;
            chain.reset(carried);
            s.chain = std::string(hex);
            start = nl + 1;
        }
        carry.erase(0, start);
    }
    ::fsync(fd);
}

std::string read_state_text(const fs::path& dir) {
    try {
        return read_file(state_path(dir));
    } catch (const Error& e) {
        throw e.wrap("reading the audit writer's state");
    }
}

WriterState parse_state(const fs::path& dir, const std::string& text) {
    try {
        return state_from_json(parse_untrusted_json(text));
    } catch (const std::exception& e) {
        throw Error(ErrorCode::general,
                    "audit writer state " + state_path(dir).string() + " is corrupt: " + e.what());
    }
}

// The persisted state, extended by the log's intact tail and merged with the
// sentry's count (unless the writer finished cleanly: then it is final).
WriterState offline_state(const fs::path& dir, const WriterState& saved,
                          std::optional<std::uint64_t> sentry_dropped) {
    WriterState s = saved;
    if (!s.finished) {
        // The tail first: its runtime gap records are part of the sentry's
        // cumulative count, which is merged afterwards (never added twice).
        extend_with_tail(dir, s);
        s.runtime_reported = sentry_dropped;
        s.connected = false;
    }
    if (sentry_dropped)
        s.runtime_dropped =
            unwrap_advance(s.runtime_dropped, static_cast<std::uint32_t>(*sentry_dropped));
    return s;
}

// An exclusive lock on the writer directory for the read-merge-write of a dead
// writer's state by concurrent CLI processes. Released on destruction.
struct DirLock {
    Fd fd;
    explicit DirLock(const fs::path& dir)
        : fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
        if (fd) {
            while (::flock(fd.get(), LOCK_EX) != 0 && errno == EINTR) {
            }
        }
    }
};

// Reasons that exist only because this request was a barrier; a live view
// does not ask the runtime, so it must not report that it could not.
void make_live_view(Status& st, const WriterState& s) {
    st.barrier = false;
    st.complete = false;
    if (!s.finished)  // a finished state's reasons are those of its final barrier
        std::erase(st.reasons, std::string("runtime_unavailable"));
}

Status make_status(const fs::path& dir, const WriterState& s, bool running,
                   std::vector<std::string> extra_reasons) {
    Status st;
    st.events = s.events;
    st.last_sequence = s.last_sequence;
    st.bytes = s.bytes;
    st.dropped = s.dropped();
    st.reasons = state_reasons(s);
    for (auto& r : extra_reasons)
        if (std::find(st.reasons.begin(), st.reasons.end(), r) == st.reasons.end())
            st.reasons.push_back(std::move(r));
    st.complete = st.reasons.empty() && st.dropped == 0;
    st.sandbox_id = s.sandbox_id;
    st.runtime_version = s.runtime_version;
    st.chain = s.chain;
    st.points = load_points(dir);
    st.writer_running = running;
    st.connected = s.connected;
    st.finished = s.finished;
    st.max_bytes = s.max_bytes;
    st.runtime_dropped_reported = s.runtime_reported;
    st.counters = {
        {"runtime_dropped", s.runtime_dropped},
        {"queue_overflow", s.queue_overflow},
        {"egress_lost", s.egress_lost},
        {"egress_refused", s.egress_refused},
        {"truncated", s.truncated},
        {"byte_limit_dropped", s.byte_limit_dropped},
        {"disk_dropped", s.disk_dropped},
        {"malformed", s.malformed},
        {"unknown_types", s.unknown_types},
        {"escaped_records", s.escaped_records},
        {"sentry_connections", s.streams},
        {"rejected_connections", s.rejected_connections},
        {"container_start_seen", s.container_start_seen},
        {"written_bytes", s.written_bytes},
        {"written_events", s.written_events},
        {"written_sequence", s.written_sequence},
        {"writer_pid", s.pid},
        {"updated_at", s.updated_at},
    };
    if (s.disk_failure) st.counters["disk_error"] = s.disk_error;
    return st;
}

// The status when the writer cannot answer: why, from the persisted state.
// With `persist` and a dead writer (not one that finished cleanly), the merged
// state is saved back to writer-state.json: the sentry's count is known only
// while the sandbox runs, so a later export (after terminate) must find it
// there and never report less loss for the same prefix.
Status offline_status(const fs::path& dir, std::optional<std::uint64_t> sentry_dropped,
                      const Reply& reply, bool persist, WriterState* merged = nullptr) {
    std::error_code ec;
    if (!fs::exists(state_path(dir), ec) && !ec) {
        // The writer saves its state before the sandbox may launch: without
        // it, the create that made this directory died before the writer ran.
        // No record was ever written and there is no writer to stop.
        WriterState none;
        if (merged) *merged = none;
        return make_status(dir, none, false, {"writer_never_started"});
    }
    std::optional<DirLock> lock;
    if (persist) lock.emplace(dir);
    const std::string text = read_state_text(dir);
    const WriterState saved = parse_state(dir, text);
    WriterState s = offline_state(dir, saved, sentry_dropped);
    std::vector<std::string> extra;
    bool alive = writer_alive(s);
    if (!s.finished) extra.push_back(alive ? "writer_unresponsive" : "writer_died");
    std::string persist_error;
    if (persist && !s.finished && !alive) {
        WriterState p = s;
        p.writer_died = true;
        // Keep the last count the runtime gave when it cannot be asked now.
        if (!sentry_dropped) p.runtime_reported = saved.runtime_reported;
        p.updated_at = utc_now();
        try {
            // Only if nobody replaced the state meanwhile (e.g. a writer that
            // finished cleanly just before it exited).
            if (read_state_text(dir) == text)
                write_file_atomic(state_path(dir), state_to_json(p).dump() + "\n", 0600);
        } catch (const std::exception& e) {
            persist_error = e.what();
        }
    }
    if (merged) *merged = s;
    Status st = make_status(dir, s, false, extra);
    if (!s.finished && !reply.error.empty()) st.counters["writer_error"] = reply.error;
    if (!persist_error.empty()) st.counters["state_persist_error"] = persist_error;
    return st;
}

nlohmann::json sentry_json(std::optional<std::uint64_t> v) {
    return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

constexpr std::uint64_t large_export_bytes = 64u << 20;

// Copies [0, n) of src into `out` (the new file `tmp`, left open), hashing
// the same bytes on a second thread (the copy itself stays in the kernel:
// copy_file_range).
std::string copy_prefix(const fs::path& src, int out, const fs::path& tmp, std::uint64_t n) {
    // An empty prefix of a log never created (its writer never started).
    Fd in_fd(::open(src.c_str(), O_RDONLY | O_CLOEXEC));
    if (!in_fd && errno == ENOENT && n == 0) in_fd = Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!in_fd) throw_errno("open " + src.string());
    const int in = in_fd.get();
    struct stat st;
    if (::fstat(in, &st) != 0) throw_errno("stat " + src.string());
    if (static_cast<std::uint64_t>(st.st_size) < n)
        throw Error(ErrorCode::general,
                    src.string() + " is shorter (" + std::to_string(st.st_size) +
                        " bytes) than its durable prefix (" + std::to_string(n) + " bytes)");
    if (::fchmod(out, 0600) != 0) throw_errno("chmod " + tmp.string());

    std::string hash_error;
    std::string digest;
    std::thread hasher([&] {
        Sha256 h;
        void* map = nullptr;
        if (n > 0) {
            map = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, in, 0);
            if (map == MAP_FAILED) {
                hash_error = errno_message("mmap " + src.string());
                return;
            }
            ::madvise(map, n, MADV_SEQUENTIAL);
            h.update(map, n);
            ::munmap(map, n);
        }
        digest = h.hex_digest();
    });
    std::string copy_error;
    std::uint64_t done = 0;
    bool fallback = false;
    // A large export shows its progress (a small one would only flicker).
    std::optional<Progress> progress;
    if (n >= large_export_bytes) progress.emplace("exporting audit log", ProgressUnit::bytes, n);
    while (done < n) {
        if (progress) progress->set(done);
        loff_t off_in = static_cast<loff_t>(done);
        ssize_t k = fallback ? -1
                             : ::copy_file_range(in, &off_in, out, nullptr,
                                                 std::min<std::uint64_t>(n - done, 64u << 20), 0);
        if (k < 0 && !fallback &&
            (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP)) {
            fallback = true;
        }
        if (fallback) {
            static thread_local std::string buf(1 << 20, '\0');
            ssize_t r = ::pread(in, buf.data(), std::min<std::uint64_t>(buf.size(), n - done),
                                static_cast<off_t>(done));
            if (r <= 0) {
                copy_error = errno_message("read " + src.string());
                break;
            }
            std::size_t w = 0;
            while (w < static_cast<std::size_t>(r)) {
                ssize_t m = ::write(out, buf.data() + w, static_cast<std::size_t>(r) - w);
                if (m < 0) {
                    if (errno == EINTR) continue;
                    copy_error = errno_message("write " + tmp.string());
                    break;
                }
                w += static_cast<std::size_t>(m);
            }
            if (!copy_error.empty()) break;
            done += static_cast<std::uint64_t>(r);
            continue;
        }
        if (k < 0) {
            if (errno == EINTR) continue;
            copy_error = errno_message("copy to " + tmp.string());
            break;
        }
        if (k == 0) {
            copy_error = "copy to " + tmp.string() + ": unexpected end of " + src.string();
            break;
        }
        done += static_cast<std::uint64_t>(k);
    }
    hasher.join();
    if (!copy_error.empty()) throw Error(ErrorCode::general, copy_error);
    if (!hash_error.empty()) throw Error(ErrorCode::general, hash_error);
    if (::fsync(out) != 0) throw_errno("fsync " + tmp.string());
    return digest;
}

bool parse_u64(std::string_view s, std::uint64_t& v) {
    auto r = std::from_chars(s.data(), s.data() + s.size(), v);
    return r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty();
}

}  // namespace

// ------------------------------------------------------------- argv -------

bool selects_container_start(const WriterOptions& o) {
    if (o.container_start) return *o.container_start;
    return o.points.empty() || std::any_of(o.points.begin(), o.points.end(), [](const auto& p) {
               return p.name == "container/start";
           });
}

std::vector<std::string> writer_argv(const WriterOptions& o) {
    std::vector<std::string> a = {writer_verb,
                                  "--dir",
                                  o.dir.string(),
                                  "--sandbox-id",
                                  o.sandbox_id,
                                  "--max-bytes",
                                  std::to_string(o.max_bytes),
                                  "--runtime-version",
                                  o.runtime_version,
                                  "--container-start",
                                  selects_container_start(o) ? "yes" : "no"};
    if (o.egress_log_group) {
        a.push_back("--egress-log-group");
        a.push_back(std::to_string(*o.egress_log_group));
    }
    if (o.ready_fd >= 0) {
        a.push_back("--ready-fd");
        a.push_back(std::to_string(o.ready_fd));
    }
    return a;
}

WriterOptions parse_writer_argv(const std::vector<std::string>& args) {
    WriterOptions o;
    std::size_t i = 0;
    if (!args.empty() && args[0] == writer_verb) i = 1;
    auto bad = [](const std::string& m) { return Error(ErrorCode::usage, "audit writer: " + m); };
    bool have_dir = false;
    for (; i < args.size(); ++i) {
        const std::string& k = args[i];
        if (i + 1 >= args.size()) throw bad("option " + k + " needs a value");
        const std::string& v = args[++i];
        if (k == "--dir") {
            if (v.empty()) throw bad("--dir is empty");
            o.dir = v;
            have_dir = true;
        } else if (k == "--sandbox-id") {
            o.sandbox_id = v;
        } else if (k == "--runtime-version") {
            o.runtime_version = v;
        } else if (k == "--max-bytes") {
            if (!parse_u64(v, o.max_bytes) || o.max_bytes == 0)
                throw bad("--max-bytes must be a positive integer, not '" + v + "'");
        } else if (k == "--container-start") {
            if (v != "yes" && v != "no")
                throw bad("--container-start must be yes or no, not '" + v + "'");
            o.container_start = v == "yes";
        } else if (k == "--egress-log-group") {
            std::uint64_t g;
            if (!parse_u64(v, g) || g > 65535)
                throw bad("--egress-log-group must be a number from 0 to 65535, not '" + v + "'");
            o.egress_log_group = static_cast<std::uint16_t>(g);
        } else if (k == "--ready-fd") {
            std::uint64_t fd;
            if (!parse_u64(v, fd) || fd > 1 << 20)
                throw bad("--ready-fd must be a descriptor number");
            o.ready_fd = static_cast<int>(fd);
        } else {
            throw bad("unknown option " + k);
        }
    }
    if (!have_dir) throw bad("--dir is required");
    return o;
}

int writer_entry(const std::vector<std::string>& args) {
    try {
        return writer_main(parse_writer_argv(args));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sandweave audit writer: %s\n", e.what());
        return 1;
    }
}

// ------------------------------------------------------------ start -------

pid_t start_writer(const fs::path& self_exe, const WriterOptions& opts) {
    return with_context("starting audit writer", [&]() -> pid_t {
        if (opts.max_bytes == 0) throw Error(ErrorCode::usage, "audit max bytes must be positive");
        make_dirs(opts.dir, 0700);
        struct stat st;
        if (::lstat(opts.dir.c_str(), &st) != 0) throw_errno("stat " + opts.dir.string());
        if (!S_ISDIR(st.st_mode))
            throw Error(ErrorCode::general, opts.dir.string() + " is not a directory");
        if (::chmod(opts.dir.c_str(), 0700) != 0) throw_errno("chmod " + opts.dir.string());
        if (fs::exists(log_path(opts.dir)))
            throw Error(ErrorCode::general, "an audit log already exists in " + opts.dir.string());
        // Flushed to disk by the writer once it is ready, off the create's path.
        write_file_atomic(points_path(opts.dir), points_to_json(opts.points).dump() + "\n", 0600,
                          Durability::live);
        SANDWEAVE_FAULT_POINT("audit.points-written");  // no writer state yet

        WriterOptions child_opts = opts;
        child_opts.ready_fd = helper_report_fd;
        HelperSpec spec;
        spec.argv = writer_argv(child_opts);
        spec.argv.insert(spec.argv.begin(), self_exe.string());
        spec.log = opts.dir / "writer.log";
        spec.timeout = 30s;
        HelperReport report = launch_helper(spec);
        std::uint64_t pid = 0;
        switch (report.outcome) {
            case HelperReport::Outcome::ready:
                if (parse_u64(report.detail, pid)) return static_cast<pid_t>(pid);
                throw Error(ErrorCode::general,
                            "unexpected readiness message: ok " + report.detail);
            case HelperReport::Outcome::failed:
                throw Error(ErrorCode::general, report.detail);
            case HelperReport::Outcome::garbled:
                throw Error(ErrorCode::general, "unexpected readiness message: " + report.detail);
            case HelperReport::Outcome::silent:
            case HelperReport::Outcome::timed_out:
                break;
        }
        throw Error(ErrorCode::general,
                    "the writer exited without reporting (see " + spec.log.string() + ")");
    });
}

// ------------------------------------------------------ barrier/status ----

Status barrier(const fs::path& dir, std::optional<std::uint64_t> sentry_dropped,
               std::chrono::milliseconds timeout) {
    nlohmann::json req = {{"op", "barrier"},
                          {"sentry_dropped", sentry_json(sentry_dropped)},
                          {"timeout_ms", timeout.count()}};
    Reply r = control_request(dir, req, timeout + 5s);
    if (r.kind == Reply::ok) return make_status(dir, state_from_json(r.state), true, {});
    return offline_status(dir, sentry_dropped, r, true);
}

Status live_status(const fs::path& dir) {
    Reply r = control_request(dir, {{"op", "status"}}, 10s);
    WriterState s;
    Status st;
    if (r.kind == Reply::ok) {
        s = state_from_json(r.state);
        st = make_status(dir, s, true, {});
    } else {
        st = offline_status(dir, std::nullopt, r, false, &s);
    }
    make_live_view(st, s);
    return st;
}

struct PositionQuery::Sent {
    SentRequest request;
};

PositionQuery::PositionQuery(const fs::path& dir) : dir_(dir), published_(published_position(dir)) {
    if (!published_) sent_ = std::make_unique<Sent>(Sent{send_control(dir, {{"op", "status"}})});
}

PositionQuery::PositionQuery(PositionQuery&&) noexcept = default;
PositionQuery& PositionQuery::operator=(PositionQuery&&) noexcept = default;
PositionQuery::~PositionQuery() = default;

std::uint64_t PositionQuery::get(std::chrono::milliseconds timeout) {
    if (published_) return *published_;
    Reply r = await_control(sent_->request, timeout);
    WriterState s;
    if (r.kind == Reply::ok)
        s = state_from_json(r.state);
    else
        offline_status(dir_, std::nullopt, r, false, &s);
    return std::max(s.last_sequence, s.written_sequence);
}

std::uint64_t live_position(const fs::path& dir, std::chrono::milliseconds timeout) {
    return PositionQuery(dir).get(timeout);
}

std::string writer_gone(const fs::path& dir) {
    std::string text;
    try {
        text = read_file(state_path(dir));
    } catch (const Error& e) {
        return std::string("its state cannot be read (") + e.what() + ")";
    }
    WriterState s;
    try {
        s = parse_state(dir, text);
    } catch (const Error& e) {
        return e.what();
    }
    if (s.finished) return "it has stopped";
    if (!writer_alive(s)) return "it died (pid " + std::to_string(s.pid) + ")";
    return {};
}

Status finish(const fs::path& dir, std::optional<std::uint64_t> sentry_dropped) {
    nlohmann::json req = {
        {"op", "stop"}, {"sentry_dropped", sentry_json(sentry_dropped)}, {"timeout_ms", 30000}};
    Reply r = control_request(dir, req, 35s);
    if (r.kind == Reply::ok) {
        WriterState s = state_from_json(r.state);
        // The writer exits right after this reply (threads joined, sockets
        // removed); wait up to 5 s for it so the caller may remove the
        // sandbox. It answered cleanly, so it is not killed. (An in-process
        // writer, as in the unit tests, shares our pid: never wait on ourselves.)
        if (s.pid != ::getpid())
            if (auto writer = PinnedProcess::open(s.pid); writer && writer_alive(s))
                writer->wait_exit(5s);
        return make_status(dir, s, false, {});
    }
    if (r.kind == Reply::timeout || r.kind == Reply::failed) {
        // A stuck (e.g. SIGSTOPped) writer: terminate must still end it.
        try {
            WriterState s = state_from_json(parse_untrusted_json(read_file(state_path(dir))));
            if (s.pid != ::getpid() && writer_alive(s)) {
                ::kill(s.pid, SIGKILL);
                for (int i = 0; i < 100 && writer_alive(s); ++i) std::this_thread::sleep_for(50ms);
            }
        } catch (const std::exception&) {
        }
    }
    return offline_status(dir, sentry_dropped, r, true);
}

// ------------------------------------------------------------ export ------

Status export_log(const fs::path& dir, const fs::path& dest,
                  std::optional<std::uint64_t> sentry_dropped, const nlohmann::json& network) {
    const fs::path sidecar = dest.string() + ".status.json";
    const fs::path dest_dir = dest.parent_path().empty() ? fs::path(".") : dest.parent_path();
    // An older sidecar must never survive next to a new (or failed) export.
    if (::unlink(sidecar.c_str()) == 0) {
        try {
            fsync_dir(dest_dir);
        } catch (const Error&) {
        }
    } else if (errno != ENOENT && errno != ENOTDIR) {
        throw Error(ErrorCode::general,
                    errno_message("exporting audit log: removing old " + sidecar.string()));
    }
    // What an export killed before (SIGKILL: no chance to unlink) left here.
    remove_stale_temps(dest);
    remove_stale_temps(sidecar);
    Status st = barrier(dir, sentry_dropped);
    st.network = network;
    fs::path tmp;
    try {
        if (dest.filename().empty()) throw Error(ErrorCode::usage, "export path names no file");
        TempFile out = create_temp_beside(dest, 0600);
        tmp = out.path;
        st.sha256 = copy_prefix(log_path(dir), out.fd.get(), tmp, st.bytes);
        if (::rename(tmp.c_str(), dest.c_str()) != 0) throw_errno("rename to " + dest.string());
        tmp.clear();
        // Closed only now: its lock kept remove_stale_temps away until the rename.
        // close() can report a write error: checked, not left to ~Fd.
        if (::close(out.fd.release()) != 0) throw_errno("close " + dest.string());
        fsync_dir(dest_dir);
        st.exported_at = utc_now();
        st.path = fs::absolute(dest).lexically_normal().string();
        write_file_atomic(sidecar, to_json(st).dump(2) + "\n", 0600);
        return st;
    } catch (const Error& e) {
        if (!tmp.empty()) ::unlink(tmp.c_str());
        st.complete = false;
        st.error = e.what();
        st.sha256.clear();
        st.exported_at = utc_now();
        st.path = fs::absolute(dest).lexically_normal().string();
        try {
            write_file_atomic(sidecar, to_json(st).dump(2) + "\n", 0600);
        } catch (const Error&) {
            // Nothing claims completeness: the old sidecar is already gone.
        }
        throw e.wrap("exporting audit log to " + dest.string());
    } catch (...) {
        if (!tmp.empty()) ::unlink(tmp.c_str());
        throw;
    }
}

}  // namespace sandweave::audit
