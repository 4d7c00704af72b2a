// The writer daemon (writer_main): three threads around one bounded queue.
//
//   reader   accept + handshake + recvmmsg on the sink socket, enqueue only.
//            Never blocks on anything but poll, so the sentry's non-blocking
//            sends succeed whenever the CPU lets us run.
//   writer   decode + format + append to audit.jsonl, fsync on barriers and
//            once a second, then persist writer-state.json.
//            With an egress policy it also reads the kernel's log of the
//            packets the policy refused (egress_log.hpp).
//   control  (the main thread) serves control.sock and signals; a barrier is
//            a marker the reader enqueues after draining the socket, so when
//            the writer thread reaches it everything sent before is on disk.
//
// Everything in the log and the counters flows through the queue in order,
// so a barrier's counts describe exactly the prefix written before it.

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "lib/audit/audit.hpp"
#include "lib/audit/chain.hpp"
#include "lib/audit/decoder.hpp"
#include "lib/audit/egress_log.hpp"
#include "lib/audit/position.hpp"
#include "lib/audit/queue.hpp"
#include "lib/audit/state.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/helper.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"

namespace sandweave::audit {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

enum EntryKind : std::uint16_t {
    kMsg = 1,
    kGap = 2,
    kTruncated = 3,
    kStreamOpen = 4,
    kStreamClosed = 5,
    kRejected = 6,
    kBarrier = 7,
    kStop = 8,
    kRefused = 9,      // a packet the egress policy refused: its record's fields
    kEgressLost = 10,  // arg: refusals the kernel's log dropped
};

constexpr int kBatch = 16;
constexpr std::size_t kFlushBytes = 1u << 20;
// An idle writer keeps an output buffer of at most this much.
constexpr std::size_t kIdleBufferBytes = 64u << 10;
constexpr auto kHandshakeTimeout = 5s;
constexpr auto kSyncInterval = 1s;
constexpr std::size_t kReserveBytes = 64u << 10;
// Once on disk (fdatasync), the log's pages are dropped from the page cache
// (POSIX_FADV_DONTNEED): nothing reads them back soon, and the writer's next
// pages then reuse memory just freed instead of fresh free memory. On a VM
// whose free memory goes back to the host (virtio-balloon free page
// reporting), each fresh page costs a host fault on first touch: measured on
// the 2-CPU dev VM, writing 1 GiB in 1 MiB writes with an fdatasync per
// 16 MiB took 1.6-7.1 s of system CPU with the pages kept and 0.17-0.20 s
// with them dropped; at 470 bytes a record, that was most of the writer's
// CPU under a dd guest. A second benefit anywhere: an audit log of gigabytes
// does not push everyone else's files out of the cache.
constexpr std::uint64_t kPageBytes = 4096;
// After the sink socket was drained, the reader leaves it alone this long so
// that a busy sentry's messages are taken in batches (recvmmsg) instead of one
// wakeup of the reader and the writer thread per message, which costs more
// CPU than decoding them and takes it from the guest on small machines. The
// socket holds the messages meanwhile: the runtime's send buffer is 8 MiB
// (runtime/audit-sink.patch; ~12k small points), and even the stock 208 KiB holds
// ~160, i.e. more than a 1 ms pause accumulates below ~160k points/s. Barrier
// requests and new connections are still served at once. A drain that took
// kHoldMaxBatch messages or more means the socket fills fast (a high rate or
// a small send buffer, e.g. a runtime without the patch): then the next read
// follows at once, and the pause resumes when the batches get small again.
constexpr int kCoalesceMs = 1;
constexpr std::size_t kHoldMaxBatch = 64;
// Once the stream has been quiet this long, the reader gives back the pages
// of its receive slots and of the queue's free part: a burst leaves the whole
// 8 MiB ring (and up to 16 MiB of slots) resident otherwise, for as long as
// the sandbox then idles.
constexpr int kIdleReleaseMs = 1000;
// The reader thread's nice value. It does little per message (recvmmsg and a
// copy into the ring) but must run soon after its pause even on a busy host,
// or the sentry's socket fills and points are lost; the writer thread, which
// does the decoding, keeps the default priority. Measured on 2 loaded CPUs
// (load 9-12, dd bs=1 count=200000): 3 of 6 runs lost points at nice 0, none
// at -10.
constexpr int kReaderNice = -10;
// Room the queue must have before the reader takes another round of messages
// off the socket (kBatch of them; a batch of points from
// runtime/audit-sink.patch is 64 KiB and one point more at most, so 16 take
// a little over 1 MiB). With less, the messages stay in the socket, which
// then buffers too: a full socket makes the sentry drop and count, as a full
// queue would have made us drop and count, but the two buffers add up
// instead of the queue overflowing while the socket is full. A push into an
// empty ring that starts again at its beginning counts the rest of the ring as
// used until the disk thread passes it, at most three quarters (queue.hpp):
// the quarter left is this much, so a round still fits.
constexpr std::size_t kReadRoom = 2u << 20;

struct BarrierRequest {
    std::optional<std::uint64_t> sentry_dropped;
    bool stop = false;
    bool done = false;
    bool abandoned = false;
    WriterState result;
};

Fd listen_seqpacket(const fs::path& path) {
    // A long state directory's path is bound through its directory's descriptor.
    UnixAddress addr;
    if (!unix_address(path, addr)) throw_errno("socket address of " + path.string());
    Fd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw_errno("socket");
    ::unlink(path.c_str());
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr.addr), addr.len) != 0)
        throw_errno("bind " + path.string());
    ::chmod(path.c_str(), 0600);
    // The backlog bounds pending connections only (the kernel caps it at
    // net.core.somaxconn). It does not bound the data queue of an accepted
    // SOCK_SEQPACKET connection: net/unix/af_unix.c unix_dgram_sendmsg checks
    // unix_recvq_full (queue length > sk_max_ack_backlog) only when
    // unix_peer(other) != sk, i.e. for senders the receiver is not connected
    // to. The sentry's connected socket is bounded by its own SO_SNDBUF
    // (sock_alloc_send_pskb), which runtime/audit-sink.patch raises to 8 MiB.
    if (::listen(fd.get(), SOMAXCONN) != 0) throw_errno("listen " + path.string());
    return fd;
}

std::string peer_json(int fd) {
    nlohmann::json j = nlohmann::json::object();
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
        j["peer_pid"] = cred.pid;
        j["peer_uid"] = cred.uid;
        j["peer_gid"] = cred.gid;
        char exe[512];
        std::string link = "/proc/" + std::to_string(cred.pid) + "/exe";
        ssize_t n = ::readlink(link.c_str(), exe, sizeof exe - 1);
        if (n > 0) j["peer_exe"] = std::string(exe, static_cast<std::size_t>(n));
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool line_is_event(std::string_view line) {
    // Records of sentry messages are events; the writer's own lines are not
    // (except the raw records it keeps for unknown/malformed messages).
    auto p = line.find("\"point\":\"");
    if (p == std::string_view::npos) return false;
    auto point = line.substr(p + 9);
    if (point.substr(0, 4) == "gap\"") return false;
    if (point.substr(0, 7) != "writer/") return true;
    return point.substr(7, 16) == "unknown_message\"" ||
           point.substr(7, 18) == "malformed_message\"";
}

class Writer {
  public:
    explicit Writer(WriterOptions o)
        : opts_(std::move(o)),
          ready_(opts_.ready_fd >= 0 ? ReadinessReporter(Fd(opts_.ready_fd))
                                     : ReadinessReporter()) {}
    int run();

  private:
    void setup();
    void settle_after_ready();

    // reader thread
    void reader_loop();
    void accept_connection();
    void do_handshake();
    void reject(const std::string& reason);
    void close_stream(const std::string& reason);
    bool drain(int max_rounds);
    // The egress log's waiting refusals, at most max_messages; true when it is empty.
    bool drain_egress(int max_messages);
    // At a barrier: a log overrun no later message numbered is at least one loss.
    void note_unnumbered_egress_loss();
    std::size_t drained_ = 0;  // messages taken by the last drain()
    bool queue_full_ = false;  // the last drain() stopped for want of queue room (kReadRoom)
    // Messages came in since the reader last gave back its idle pages.
    bool pages_to_release_ = false;
    bool peer_closed();
    // `events`: how many events the entry stands for (a batch: its points).
    void enqueue_event(std::uint16_t kind, std::uint64_t arg, std::string_view data,
                       std::uint64_t events = 1);
    void enqueue_meta(std::uint16_t kind, std::uint64_t arg, std::string_view data);
    bool handle_wake();

    // writer thread
    void writer_loop();
    void handle_entry(const ByteQueue::Entry& e);
    void message_entry(std::string_view data);
    void batch_records(std::string_view body);
    void fragment_entry(std::string_view payload);
    void end_assembly();
    void truncated_batch(std::string_view prefix, std::uint64_t size, std::uint16_t message_type);
    std::string truncated_point_fields(std::uint16_t type, std::string_view payload);
    void note_runtime_dropped(std::uint32_t count);
    void truncated_entry(const ByteQueue::Entry& e);
    void barrier_entry(const ByteQueue::Entry& e);
    void answer_request(std::uint64_t id, const WriterState& s);
    void event_record(std::uint16_t type, std::string_view payload);
    void count_outcome(const RecordFormatter::Result& r);
    bool append_line(std::size_t mark, bool is_event);
    bool meta_line(const char* point, std::string_view fields_json, bool is_event = false);
    void refused_record(std::string_view fields_json);
    void emit_gap(std::uint64_t lost, const char* source);
    void flush_output();
    void sync_log();
    void drop_synced_pages();
    void release_idle_memory();
    WriterState snapshot() const;
    void persist(const WriterState& s);
    void publish_live();
    std::uint64_t dropped_total() const {
        return runtime_dropped_ + queue_overflow_ + truncated_ + byte_limit_dropped_ +
               disk_dropped_ + egress_lost_;
    }
    void count_unwritten_event() {
        if (stop_reason_ == StopReason::disk)
            ++disk_dropped_;
        else
            ++byte_limit_dropped_;
    }

    // control (main) thread
    void control_loop();
    bool handle_client(int fd);
    std::optional<WriterState> request_barrier(std::optional<std::uint64_t> sentry_dropped,
                                               bool stop, std::chrono::milliseconds timeout);

    WriterOptions opts_;
    ReadinessReporter ready_;  // the launcher's end: "ok PID" or "error MESSAGE"
    fs::path log_path_, state_path_, reserve_path_;
    Fd log_fd_, sink_fd_, control_fd_, wake_fd_, signal_fd_;
    dev_t dir_dev_ = 0;
    ino_t dir_ino_ = 0;
    std::uint64_t start_time_ = 0;
    ByteQueue queue_;

    // reader state
    enum class Conn { none, handshake, streaming };
    Fd conn_fd_;
    Conn conn_state_ = Conn::none;
    Clock::time_point handshake_deadline_;
    std::string conn_peer_;
    std::uint64_t stream_no_ = 0;
    std::uint64_t pending_overflow_ = 0;
    std::unique_ptr<char[]> slots_;
    std::unique_ptr<EgressLog> egress_;

    // writer state (writer thread only)
    RecordFormatter fmt_;
    // The batch body being put together from fragments (kFragmentMessage):
    // its first kMaxAssembledBody bytes, and how many of its assembly_total_
    // arrived (assembly_seen_, beyond the kept bytes when it is larger).
    std::string assembly_;
    bool assembling_ = false;
    std::uint32_t assembly_total_ = 0, assembly_seen_ = 0;
    JsonOut out_;
    // The chain after the last line formatted, flushed (committed) and fsynced.
    Chain chain_;
    ChainValue committed_chain_{}, synced_chain_{};
    std::uint64_t seq_ = 0, events_ = 0;
    std::uint64_t committed_bytes_ = 0, committed_seq_ = 0, committed_events_ = 0;
    std::uint64_t synced_bytes_ = 0, synced_seq_ = 0, synced_events_ = 0;
    std::uint64_t dropped_bytes_ = 0;  // the log's page cache is dropped up to here (kPageBytes)
    std::uint64_t runtime_dropped_ = 0, queue_overflow_ = 0, truncated_ = 0;
    std::uint64_t byte_limit_dropped_ = 0, disk_dropped_ = 0;
    std::uint64_t egress_lost_ = 0, egress_refused_ = 0;
    std::uint64_t malformed_ = 0, unknown_types_ = 0, escaped_ = 0;
    std::uint64_t streams_ = 0, rejected_ = 0;
    bool connected_ = false, container_start_seen_ = false;
    enum class StopReason { none, byte_limit, disk };
    StopReason stop_reason_ = StopReason::none;
    bool byte_limit_ = false, disk_failure_ = false;
    std::string disk_error_;
    bool dirty_ = true;
    bool writer_done_ = false;

    // shared
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::uint64_t, BarrierRequest> requests_;
    std::deque<std::uint64_t> pending_ids_;
    std::uint64_t next_id_ = 0;
    WriterState live_;
    std::optional<PositionPublisher> position_;  // live_'s, for readers that must not wake us
};

// What needs a disk flush but not the create's wait, once the writer has
// said it is ready: the ballast released on ENOSPC so the final state can
// still be written, and the point list start_writer wrote without a flush
// (with the directory holding both).
void Writer::settle_after_ready() {
    Fd fd(::open(reserve_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd) {
        std::string zeros(kReserveBytes, '\0');
        (void)!::write(fd.get(), zeros.data(), zeros.size());
        ::fsync(fd.get());
    }
    Fd points(::open(points_path(opts_.dir).c_str(), O_RDONLY | O_CLOEXEC));
    if (points) ::fsync(points.get());
    Fd dir(::open(opts_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir) ::fsync(dir.get());
}

void Writer::setup() {
    ::umask(077);
    struct stat st;
    if (::lstat(opts_.dir.c_str(), &st) != 0) throw_errno("stat " + opts_.dir.string());
    if (!S_ISDIR(st.st_mode))
        throw Error(ErrorCode::general, opts_.dir.string() + " is not a directory");
    if (st.st_uid != ::geteuid())
        throw Error(ErrorCode::general, opts_.dir.string() + " is not owned by the writer's user");
    if (::chmod(opts_.dir.c_str(), 0700) != 0) throw_errno("chmod " + opts_.dir.string());
    dir_dev_ = st.st_dev;
    dir_ino_ = st.st_ino;

    log_path_ = log_path(opts_.dir);
    state_path_ = opts_.dir / "writer-state.json";
    reserve_path_ = opts_.dir / "reserve";
    // A fresh stream per writer: never append to an older log.
    log_fd_.reset(
        ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600));
    if (!log_fd_) throw_errno("create " + log_path_.string());
    start_time_ = process_start_time(::getpid());
    live_.container_start_selected = selects_container_start(opts_);
    // Nothing else needs the points (hundreds of strings): not kept for life.
    std::vector<TracePoint>().swap(opts_.points);

    wake_fd_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_fd_) throw_errno("eventfd");
    slots_.reset(new char[static_cast<std::size_t>(kBatch) * kMaxMessageSize]);

    sink_fd_ = listen_seqpacket(sink_socket_path(opts_.dir));
    // Bound before the create goes on: the policy's rules log to this group
    // from the guest's first packet, and a group we cannot hold fails the create.
    if (opts_.egress_log_group) egress_ = std::make_unique<EgressLog>(*opts_.egress_log_group);
    control_fd_ = listen_seqpacket(opts_.dir / "control.sock");
    try {
        position_.emplace(opts_.dir);
    } catch (const Error& e) {
        // Readers then ask over control.sock, as they ask older writers.
        log().warn(std::string("audit writer: publishing the position: ") + e.what());
    }
    persist(snapshot());
}

// ---------------------------------------------------------------- reader ----

void Writer::enqueue_event(std::uint16_t kind, std::uint64_t arg, std::string_view data,
                           std::uint64_t events) {
    if (pending_overflow_ > 0) {
        if (!queue_.push(kGap, pending_overflow_, {})) {
            pending_overflow_ += events;
            return;
        }
        pending_overflow_ = 0;
    }
    if (!queue_.push(kind, arg, data)) pending_overflow_ += events;
}

void Writer::enqueue_meta(std::uint16_t kind, std::uint64_t arg, std::string_view data) {
    // Meta entries (streams, barriers) must not be lost: wait for room. The
    // guest is not blocked by this, only our reading (the sentry counts drops).
    if (pending_overflow_ > 0) {
        while (!queue_.push(kGap, pending_overflow_, {})) std::this_thread::sleep_for(200us);
        pending_overflow_ = 0;
    }
    while (!queue_.push(kind, arg, data)) std::this_thread::sleep_for(200us);
}

void Writer::accept_connection() {
    for (;;) {
        Fd fd(::accept4(sink_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
        if (!fd) return;
        std::string peer = peer_json(fd.get());
        if (conn_state_ == Conn::streaming && peer_closed()) {
            // The previous stream ended but we have not read its EOF yet (the
            // reader may be pausing, kCoalesceMs): finish it first.
            while (conn_state_ == Conn::streaming && !drain(64))
                if (queue_full_) std::this_thread::sleep_for(200us);
            if (conn_state_ == Conn::streaming) close_stream("closed by peer");
        }
        if (conn_state_ != Conn::none) {
            // Only one sentry connects per sandbox; a second peer (root only:
            // the directory is 0700) is refused so it cannot interleave records.
            nlohmann::json j = nlohmann::json::parse(peer);
            j["reason"] = "another connection is active";
            enqueue_meta(kRejected, 0, j.dump());
            continue;  // closes it
        }
        conn_fd_ = std::move(fd);
        conn_state_ = Conn::handshake;
        conn_peer_ = std::move(peer);
        handshake_deadline_ = Clock::now() + kHandshakeTimeout;
    }
}

void Writer::reject(const std::string& reason) {
    nlohmann::json j = nlohmann::json::parse(conn_peer_);
    j["reason"] = reason;
    enqueue_meta(kRejected, 0, j.dump());
    conn_fd_.reset();
    conn_state_ = Conn::none;
}

void Writer::do_handshake() {
    char buf[kMaxHandshakeSize + 1];
    ssize_t n = ::recv(conn_fd_.get(), buf, sizeof buf, MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        reject(errno_message("receiving the handshake"));
        return;
    }
    if (n == 0) return reject("closed or empty before the handshake");
    if (static_cast<std::size_t>(n) > kMaxHandshakeSize) return reject("oversized handshake");
    auto version = decode_handshake(std::string_view(buf, static_cast<std::size_t>(n)));
    if (!version || *version < 1) return reject("not a version >= 1 handshake");
    std::string reply = encode_handshake(kWireVersion);
    if (::send(conn_fd_.get(), reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        static_cast<ssize_t>(reply.size()))
        return reject(errno_message("sending the handshake reply"));
    ++stream_no_;
    conn_state_ = Conn::streaming;
    nlohmann::json j = nlohmann::json::parse(conn_peer_);
    j["stream"] = stream_no_;
    j["version"] = *version;
    enqueue_meta(kStreamOpen, stream_no_, j.dump());
}

void Writer::close_stream(const std::string& reason) {
    nlohmann::json j = {{"stream", stream_no_}, {"reason", reason}};
    enqueue_meta(kStreamClosed, stream_no_, j.dump());
    conn_fd_.reset();
    conn_state_ = Conn::none;
}

bool Writer::peer_closed() {
    pollfd p{conn_fd_.get(), POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

// Receives until the socket is empty (true) or max_rounds batches were taken
// (false: more may be waiting). Closes the stream at EOF.
bool Writer::drain(int max_rounds) {
    mmsghdr hdrs[kBatch];
    iovec iov[kBatch];
    for (int i = 0; i < kBatch; ++i) {
        iov[i] = {slots_.get() + static_cast<std::size_t>(i) * kMaxMessageSize, kMaxMessageSize};
        hdrs[i] = {};
        hdrs[i].msg_hdr.msg_iov = &iov[i];
        hdrs[i].msg_hdr.msg_iovlen = 1;
    }
    drained_ = 0;
    queue_full_ = false;
    for (int round = 0; round < max_rounds; ++round) {
        if (queue_.capacity() - queue_.used() < kReadRoom) {
            queue_full_ = true;
            return false;
        }
        int n = ::recvmmsg(conn_fd_.get(), hdrs, kBatch, MSG_DONTWAIT | MSG_TRUNC, nullptr);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
            close_stream(errno_message("receive"));
            return true;
        }
        drained_ += static_cast<std::size_t>(n);
        for (int i = 0; i < n; ++i) {
            std::size_t len = hdrs[i].msg_len;
            bool trunc = (hdrs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0 || len > kMaxMessageSize;
            const char* data = static_cast<const char*>(iov[i].iov_base);
            if (len == 0 && !trunc && peer_closed()) {
                // recvmmsg reports EOF as zero-length entries: the stream ended.
                close_stream("closed by peer");
                return true;
            }
            if (trunc) {
                // The slot holds the message's first kMaxMessageSize bytes:
                // what they say is kept (truncated_batch).
                enqueue_event(kTruncated, len,
                              std::string_view(data, std::min(len, kMaxMessageSize)));
            } else if (len >= 4 &&
                       static_cast<unsigned char>(data[2]) == (kFragmentMessage & 0xff) &&
                       static_cast<unsigned char>(data[3]) == kFragmentMessage >> 8) {
                // A fragment is part of a batch the writer puts together: it
                // waits for room rather than be lost (a round of them is larger
                // than kReadRoom). Meanwhile the sentry's socket buffers, and
                // it counts what does not fit there: the guest never waits.
                enqueue_meta(kMsg, 0, std::string_view(data, len));
            } else {
                std::string_view m(data, len);
                enqueue_event(kMsg, 0, m, message_event_count(m));
            }
        }
        if (n < kBatch) return true;
    }
    return false;
}

bool Writer::drain_egress(int max_messages) {
    EgressLog::Batch batch;
    bool empty = egress_->read(batch, max_messages);
    if (batch.lost > 0) enqueue_meta(kEgressLost, batch.lost, {});
    // Like the sentry's points: a full queue counts them as lost (a gap).
    for (const auto& r : batch.records) enqueue_event(kRefused, 0, r);
    return empty;
}

void Writer::note_unnumbered_egress_loss() {
    if (egress_->take_unnumbered_loss()) enqueue_meta(kEgressLost, 1, {});
}

// Barrier and stop requests from the control thread. Returns true to stop.
bool Writer::handle_wake() {
    std::uint64_t v;
    (void)!::read(wake_fd_.get(), &v, sizeof v);
    std::vector<std::pair<std::uint64_t, bool>> ids;
    {
        std::lock_guard lock(mu_);
        for (auto id : pending_ids_) {
            auto it = requests_.find(id);
            ids.emplace_back(id, it != requests_.end() && it->second.stop);
        }
        pending_ids_.clear();
    }
    if (ids.empty()) return false;
    // Everything the sentry sent before the request is in the socket now:
    // take it all (bounded, in case the guest keeps the socket full).
    auto deadline = Clock::now() + 2s;
    if (egress_) {
        while (!drain_egress(256) && Clock::now() < deadline) {
        }
        note_unnumbered_egress_loss();
    }
    bool drained = conn_state_ != Conn::streaming;
    while (!drained && Clock::now() < deadline) {
        drained = drain(64) || conn_state_ != Conn::streaming;
        if (!drained && queue_full_) std::this_thread::sleep_for(200us);
    }
    // Not drained in time: this barrier cannot vouch for what was sent before
    // it, and its status says so (barrier_timeout) instead of claiming it.
    std::string_view note = drained ? std::string_view() : std::string_view("drain_timeout");
    bool stop = false;
    for (auto [id, is_stop] : ids) {
        enqueue_meta(is_stop ? kStop : kBarrier, id, note);
        stop = stop || is_stop;
    }
    return stop;
}

void Writer::reader_loop() {
    bool hold = false;  // the stream was just drained: let it batch up (kCoalesceMs)
    // Best effort (needs CAP_SYS_NICE): see kReaderNice.
    (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kReaderNice);
    for (;;) {
        pollfd p[4];
        nfds_t n = 0;
        p[n++] = {sink_fd_.get(), POLLIN, 0};
        p[n++] = {wake_fd_.get(), POLLIN, 0};
        const nfds_t egress_at = egress_ ? n++ : 0;
        if (egress_) p[egress_at] = {egress_->fd(), POLLIN, 0};
        const nfds_t conn_at = n;
        if (conn_fd_ && !hold) p[n++] = {conn_fd_.get(), POLLIN | POLLRDHUP, 0};
        const bool release_due = !hold && pages_to_release_;
        int timeout = hold ? kCoalesceMs : release_due ? kIdleReleaseMs : -1;
        if (conn_state_ == Conn::handshake) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(handshake_deadline_ -
                                                                              Clock::now());
            timeout = static_cast<int>(std::max<std::int64_t>(0, left.count()));
        }
        int rc = ::poll(p, n, timeout);
        if (rc < 0 && errno != EINTR) break;
        if (rc == 0 && release_due && conn_state_ != Conn::handshake) {
            queue_.release_free();
            release_whole_pages(slots_.get(), static_cast<std::size_t>(kBatch) * kMaxMessageSize);
            pages_to_release_ = false;
        }
        hold = false;
        if (egress_ && p[egress_at].revents) drain_egress(256);
        if (n > conn_at && p[conn_at].revents) {
            if (conn_state_ == Conn::handshake)
                do_handshake();
            else if (conn_state_ == Conn::streaming)
                hold = (drain(64) && conn_state_ == Conn::streaming && drained_ < kHoldMaxBatch) ||
                       queue_full_;
            pages_to_release_ = pages_to_release_ || drained_ > 0;
        }
        if (p[1].revents & POLLIN) {
            if (handle_wake()) break;
        }
        if (p[0].revents & POLLIN) accept_connection();
        if (conn_state_ == Conn::handshake && Clock::now() >= handshake_deadline_)
            reject("no handshake within 5 s");
    }
    conn_fd_.reset();
    sink_fd_.reset();
}

// ---------------------------------------------------------------- writer ----

bool Writer::append_line(std::size_t mark, bool is_event) {
    // The byte limit is checked per line: the log never exceeds max_bytes and
    // always ends on a whole line. Once reached, nothing more is written.
    if (committed_bytes_ + out_.size() + kChainTail > opts_.max_bytes) {
        out_.truncate(mark);
        byte_limit_ = true;
        stop_reason_ = StopReason::byte_limit;
        if (is_event) ++byte_limit_dropped_;
        return false;
    }
    chain_.seal(out_, mark);
    ++seq_;
    if (is_event) ++events_;
    return true;
}

// A line of the writer's own (is_event: one the status counts as an event);
// false when it was not written.
bool Writer::meta_line(const char* point, std::string_view fields_json, bool is_event) {
    if (stop_reason_ != StopReason::none) return false;
    std::size_t mark = out_.size();
    out_.raw("{\"seq\":");
    out_.u64(seq_ + 1);
    out_.raw(",\"point\":\"");
    out_.raw(point);
    out_.raw("\",\"dropped\":");
    out_.u64(dropped_total());
    // fields_json is an object we produced with nlohmann: splice its members.
    if (fields_json.size() > 2) {
        out_.ch(',');
        out_.raw(fields_json.substr(1, fields_json.size() - 2));
    }
    out_.raw("}\n");
    return append_line(mark, is_event);
}

// A packet the egress policy refused: an event of the host's, not the sentry's.
void Writer::refused_record(std::string_view fields_json) {
    if (stop_reason_ != StopReason::none) {
        count_unwritten_event();
        return;
    }
    if (meta_line(refused_point, fields_json, true)) ++egress_refused_;
}

void Writer::emit_gap(std::uint64_t lost, const char* source) {
    if (stop_reason_ != StopReason::none) return;
    std::size_t mark = out_.size();
    format_gap(out_, seq_ + 1, dropped_total(), lost, source);
    append_line(mark, false);
}

void Writer::count_outcome(const RecordFormatter::Result& r) {
    if (r.outcome == RecordFormatter::Outcome::malformed) ++malformed_;
    if (r.outcome == RecordFormatter::Outcome::unknown_type) ++unknown_types_;
    if (r.escaped) ++escaped_;
    if (r.container_start) container_start_seen_ = true;
}

// One point of a batch; type kBatchMessage marks the malformed remainder,
// kFragmentMessage a fragment that is not part of a series.
void Writer::event_record(std::uint16_t type, std::string_view payload) {
    if (stop_reason_ != StopReason::none) {
        count_unwritten_event();
        return;
    }
    std::size_t mark = out_.size();
    RecordFormatter::Result r =
        type == kBatchMessage      ? fmt_.malformed(out_, seq_ + 1, dropped_total(), type,
                                                    "batch remainder is not a whole entry", payload)
        : type == kFragmentMessage ? fmt_.malformed(out_, seq_ + 1, dropped_total(), type,
                                                    "fragment does not continue a series", payload)
                                   : fmt_.payload(out_, seq_ + 1, dropped_total(), type, payload);
    if (append_line(mark, true)) count_outcome(r);
}

void Writer::handle_entry(const ByteQueue::Entry& e) {
    dirty_ = true;
    switch (e.kind) {
        case kMsg:
            message_entry(e.data);
            return;
        case kGap:
            queue_overflow_ += e.arg;
            emit_gap(e.arg, "queue_overflow");
            return;
        case kTruncated:
            truncated_entry(e);
            return;
        case kStreamOpen:
            ++streams_;
            connected_ = true;
            meta_line("writer/stream_open", std::string(e.data));
            log().info("audit writer: sentry stream " + std::to_string(e.arg) + " open " +
                       std::string(e.data));
            return;
        case kStreamClosed:
            if (assembling_) end_assembly();
            connected_ = false;
            meta_line("writer/stream_closed", std::string(e.data));
            log().info("audit writer: sentry stream closed " + std::string(e.data));
            return;
        case kRefused:
            refused_record(e.data);
            return;
        case kEgressLost:
            egress_lost_ += e.arg;
            emit_gap(e.arg, egress_log_gap_source);
            return;
        case kRejected:
            ++rejected_;
            meta_line("writer/connection_rejected", std::string(e.data));
            log().warn("audit writer: rejected connection " + std::string(e.data));
            return;
        case kBarrier:
        case kStop:
            barrier_entry(e);
            return;
        default:
            return;
    }
}

// The sentry's count of what it dropped (32 bits, wrapping) has grown: a gap
// record says how many, at the place it was detected.
void Writer::note_runtime_dropped(std::uint32_t count) {
    std::uint64_t before = runtime_dropped_;
    runtime_dropped_ = unwrap_advance(runtime_dropped_, count);
    if (runtime_dropped_ > before) emit_gap(runtime_dropped_ - before, "runtime");
}

// One sentry message: a record of each point of a batch, or one of the
// message (a raw one when its header does not parse).
void Writer::message_entry(std::string_view data) {
    WireHeader h;
    std::string_view body;
    HeaderError he = parse_header(data, h, body);
    if (he == HeaderError::none) note_runtime_dropped(h.dropped_count);
    if (he == HeaderError::none && h.message_type == kFragmentMessage) return fragment_entry(body);
    // Any other message ends a series of fragments: the rest of it was not
    // sent, and the sentry counted its points as dropped.
    if (assembling_) end_assembly();
    if (he == HeaderError::none && h.message_type == kBatchMessage) return batch_records(body);
    if (stop_reason_ != StopReason::none) {
        count_unwritten_event();
        return;
    }
    std::size_t mark = out_.size();
    RecordFormatter::Result r =
        he == HeaderError::none
            ? fmt_.payload(out_, seq_ + 1, dropped_total(), h.message_type, body)
            : fmt_.message(out_, seq_ + 1, dropped_total(), data);
    if (!append_line(mark, true)) return;
    count_outcome(r);
}

// Several points (runtime/audit-sink.patch): one record each.
void Writer::batch_records(std::string_view body) {
    std::string_view rest = body;
    BatchEntry be;
    while (next_batch_entry(rest, be)) event_record(be.type, be.payload);
    if (!rest.empty()) event_record(kBatchMessage, rest);
}

// One fragment of a batch too big for one message (kFragmentMessage). They
// come in order and back to back; the body is handled once whole.
void Writer::fragment_entry(std::string_view payload) {
    Fragment f;
    if (!parse_fragment(payload, f)) {
        if (assembling_) end_assembly();
        event_record(kFragmentMessage, payload);
        return;
    }
    if (f.offset == 0) {
        if (assembling_) end_assembly();
        assembling_ = true;
        assembly_total_ = f.total;
        assembly_seen_ = 0;
        assembly_.clear();
    } else if (!assembling_ || f.offset != assembly_seen_ || f.total != assembly_total_) {
        // Not the continuation of what came before: nothing the runtime
        // sends (it stops a series at its first unsent fragment).
        if (assembling_) end_assembly();
        event_record(kFragmentMessage, payload);
        return;
    }
    const std::size_t room = kMaxAssembledBody - assembly_.size();
    assembly_.append(f.data.substr(0, room));
    assembly_seen_ += static_cast<std::uint32_t>(f.data.size());
    if (assembly_seen_ < assembly_total_) return;
    if (assembly_total_ <= kMaxAssembledBody)
        batch_records(assembly_);
    else
        truncated_batch(assembly_, assembly_total_, kFragmentMessage);
    assembling_ = false;
    assembly_.clear();
    // A batch of megabytes is rare: its buffer is not kept for the next.
    if (assembly_.capacity() > kMaxMessageSize) std::string().swap(assembly_);
}

// A series of fragments that stopped before its end. The runtime stops one
// only when it could not send a fragment, and then counts every point of the
// batch as dropped (runtime_dropped): the part received is not written, so a
// point is not counted twice; a note says it was seen.
void Writer::end_assembly() {
    nlohmann::json j = {{"received", assembly_seen_}, {"total", assembly_total_}};
    meta_line("writer/fragments_incomplete", j.dump());
    assembling_ = false;
    assembly_.clear();
    if (assembly_.capacity() > kMaxMessageSize) std::string().swap(assembly_);
}

// A batch body of `size` bytes of which only `prefix` could be kept: every
// whole point in it is written as usual, and the point it cuts is recorded
// as writer/truncated_message with what of it was kept (its point name, its
// context and its first arguments, from its whole fields), counted as
// truncated: the export is not complete.
void Writer::truncated_batch(std::string_view prefix, std::uint64_t size,
                             std::uint16_t message_type) {
    std::string_view rest = prefix;
    BatchEntry be;
    while (next_batch_entry(rest, be)) event_record(be.type, be.payload);
    ++truncated_;
    nlohmann::json j = {{"size", size}, {"type", message_type}, {"kept", prefix.size()}};
    if (rest.size() >= kBatchEntryHeader) {
        const auto u = [&](std::size_t i) {
            return static_cast<std::uint32_t>(static_cast<unsigned char>(rest[i]));
        };
        const std::uint16_t type = static_cast<std::uint16_t>(u(4) | u(5) << 8);
        std::string_view payload = rest.substr(kBatchEntryHeader);
        payload = payload.substr(0, whole_fields_prefix(payload));
        j["point_type"] = type;
        j["point_size"] = u(0) | u(1) << 8 | u(2) << 16 | u(3) << 24;
        std::string fields = j.dump();
        fields.pop_back();
        fields += truncated_point_fields(type, payload);
        fields += '}';
        meta_line("writer/truncated_message", fields);
        return;
    }
    meta_line("writer/truncated_message", j.dump());
}

// `,"of":"<point>","record":{<its fields>}` for the whole fields of a point
// cut short, as the decoder writes them (bytes that are not UTF-8 escaped as
// in any record), or "" when they do not make a record.
std::string Writer::truncated_point_fields(std::uint16_t type, std::string_view payload) {
    JsonOut partial;
    RecordFormatter::Result r = fmt_.payload(partial, 0, 0, type, payload);
    if (r.outcome != RecordFormatter::Outcome::event) return "";
    // The decoder's record: {"seq":0,"point":"<name>","dropped":0<,fields>}\n
    constexpr std::string_view head = "{\"seq\":0,\"point\":\"", mid = "\",\"dropped\":0";
    std::string_view rec = partial.buf();
    if (rec.size() < head.size() + 3 || rec.substr(0, head.size()) != head) return "";
    const auto name_end = rec.find(mid, head.size());
    if (name_end == std::string_view::npos) return "";
    std::string_view name = rec.substr(head.size(), name_end - head.size());
    std::string_view rest = rec.substr(name_end + mid.size());  // ",...}\n" or "}\n"
    rest.remove_suffix(1);
    if (r.escaped) ++escaped_;
    std::string out = ",\"of\":\"";
    out += name;
    out += "\",\"record\":{";
    if (!rest.empty() && rest.front() == ',') rest.remove_prefix(1);
    out += rest;
    return out;
}

// A message larger than kMaxMessageSize (the runtime fragments those): its
// first kMaxMessageSize bytes.
void Writer::truncated_entry(const ByteQueue::Entry& e) {
    if (assembling_) end_assembly();
    WireHeader h;
    std::string_view body;
    if (parse_header(e.data, h, body) == HeaderError::none) {
        note_runtime_dropped(h.dropped_count);
        if (h.message_type == kBatchMessage) {
            truncated_batch(body, e.arg, h.message_type);
            return;
        }
    }
    ++truncated_;
    nlohmann::json j = {{"size", e.arg}};
    if (e.data.size() >= 4) {
        int lo = static_cast<unsigned char>(e.data[2]), hi = static_cast<unsigned char>(e.data[3]);
        j["type"] = lo | hi << 8;
    }
    meta_line("writer/truncated_message", j.dump());
}

// A barrier (or the final stop) asked for by request e.arg: everything before
// it is written, fsynced and in the state file, and the request gets that
// state as its answer.
void Writer::barrier_entry(const ByteQueue::Entry& e) {
    std::optional<std::uint64_t> reported;
    bool known = false;
    {
        std::lock_guard lock(mu_);
        if (auto it = requests_.find(e.arg); it != requests_.end()) {
            reported = it->second.sentry_dropped;
            known = true;
        }
    }
    // Drops the sentry counted after its last message reached us show up
    // only here: record where they were detected.
    if (reported) note_runtime_dropped(static_cast<std::uint32_t>(*reported));
    flush_output();
    sync_log();
    WriterState s = snapshot();
    s.runtime_reported = reported;
    s.barrier_drain_timeout = e.data == "drain_timeout";
    if (e.kind == kStop) {
        s.finished = true;
        writer_done_ = true;
    }
    persist(s);
    publish_live();
    if (known) answer_request(e.arg, s);
    cv_.notify_all();
}

void Writer::answer_request(std::uint64_t id, const WriterState& s) {
    std::lock_guard lock(mu_);
    auto& req = requests_[id];
    req.result = s;
    req.done = true;
    if (req.abandoned) requests_.erase(id);
}

void Writer::flush_output() {
    if (out_.size() == 0) return;
    std::size_t off = 0;
    int err = 0;
    while (off < out_.size()) {
        ssize_t n = ::write(log_fd_.get(), out_.data() + off, out_.size() - off);
        if (n < 0) {
            if (errno == EINTR) continue;
            err = errno;
            break;
        }
        off += static_cast<std::size_t>(n);
    }
    if (err == 0) {
        committed_bytes_ += off;
        committed_seq_ = seq_;
        committed_events_ = events_;
        committed_chain_ = chain_.value();
        out_.clear();
        return;
    }
    // ENOSPC, EIO, EFBIG...: keep the whole lines that made it, drop the rest,
    // stop writing for good (a log with holes in the middle would lie about
    // order), keep counting what is lost.
    disk_failure_ = true;
    stop_reason_ = StopReason::disk;
    disk_error_ = errno_message("write " + log_path_.string(), err);
    log().error("audit writer: " + disk_error_);
    std::string_view buf = out_.buf();
    std::size_t good = 0;
    if (off > 0) {
        auto nl = buf.substr(0, off).rfind('\n');
        good = nl == std::string_view::npos ? 0 : nl + 1;
    }
    std::size_t pos = 0;
    std::uint64_t lines_good = 0, events_good = 0, events_lost = 0;
    while (pos < buf.size()) {
        auto nl = buf.find('\n', pos);
        std::string_view line = buf.substr(pos, nl - pos);
        bool ev = line_is_event(line);
        if (nl < good) {
            ++lines_good;
            if (ev) ++events_good;
        } else if (ev) {
            ++events_lost;
        }
        pos = nl + 1;
    }
    committed_seq_ += lines_good;
    committed_events_ += events_good;
    committed_bytes_ += good;
    disk_dropped_ += events_lost;
    // The chain ends at the last whole line that made it.
    if (good > 0) {
        std::string_view kept = buf.substr(0, good - 1), body, hex;
        auto nl = kept.rfind('\n');
        std::string_view last_line = nl == std::string_view::npos ? kept : kept.substr(nl + 1);
        ChainValue last;
        if (split_chained_line(last_line, body, hex) && chain_parse(hex, last))
            committed_chain_ = last;
    }
    chain_.reset(committed_chain_);
    if (off > good) (void)!::ftruncate(log_fd_.get(), static_cast<off_t>(committed_bytes_));
    seq_ = committed_seq_;
    events_ = committed_events_;
    out_.clear();
    // Release the ballast so the state file can still be replaced.
    ::unlink(reserve_path_.c_str());
}

void Writer::sync_log() {
    if (committed_bytes_ == synced_bytes_ && committed_seq_ == synced_seq_) return;
    if (::fdatasync(log_fd_.get()) != 0) {
        int err = errno;
        disk_failure_ = true;
        stop_reason_ = StopReason::disk;
        disk_error_ = errno_message("fsync " + log_path_.string(), err);
        log().error("audit writer: " + disk_error_);
        // What was written since the last good fsync may not be on disk.
        disk_dropped_ += committed_events_ - synced_events_;
        ::unlink(reserve_path_.c_str());
        return;
    }
    synced_bytes_ = committed_bytes_;
    synced_seq_ = committed_seq_;
    synced_events_ = committed_events_;
    synced_chain_ = committed_chain_;
    drop_synced_pages();
}

void Writer::drop_synced_pages() {
    // Whole pages only: the last, partial one is appended to next.
    const std::uint64_t end = synced_bytes_ / kPageBytes * kPageBytes;
    if (end <= dropped_bytes_) return;
    // Advice only: if it fails, the pages stay cached, nothing else changes.
    (void)::posix_fadvise(log_fd_.get(), static_cast<off_t>(dropped_bytes_),
                          static_cast<off_t>(end - dropped_bytes_), POSIX_FADV_DONTNEED);
    dropped_bytes_ = end;
}

WriterState Writer::snapshot() const {
    WriterState s;
    s.bytes = synced_bytes_;
    s.events = synced_events_;
    s.last_sequence = synced_seq_;
    s.chain = chain_hex(synced_chain_);
    s.runtime_dropped = runtime_dropped_;
    s.queue_overflow = queue_overflow_;
    s.egress_lost = egress_lost_;
    s.egress_refused = egress_refused_;
    s.truncated = truncated_;
    s.byte_limit_dropped = byte_limit_dropped_;
    s.disk_dropped = disk_dropped_;
    s.malformed = malformed_;
    s.unknown_types = unknown_types_;
    s.escaped_records = escaped_;
    s.streams = streams_;
    s.rejected_connections = rejected_;
    s.connected = connected_;
    s.container_start_seen = container_start_seen_;
    s.container_start_selected = live_.container_start_selected;
    s.byte_limit = byte_limit_;
    s.disk_failure = disk_failure_;
    s.disk_error = disk_error_;
    s.pid = ::getpid();
    s.pid_start_time = start_time_;
    s.updated_at = utc_now();
    s.max_bytes = opts_.max_bytes;
    s.sandbox_id = opts_.sandbox_id;
    s.runtime_version = opts_.runtime_version;
    s.written_bytes = committed_bytes_ + out_.size();
    s.written_events = events_;
    s.written_sequence = seq_;
    return s;
}

void Writer::persist(const WriterState& s) {
    std::string text = state_to_json(s).dump() + "\n";
    for (int attempt = 0; attempt < 2; ++attempt) {
        try {
            write_file_atomic(state_path_, text, 0600);
            return;
        } catch (const Error& e) {
            log().error(std::string("audit writer: persisting state: ") + e.what());
            ::unlink(reserve_path_.c_str());
        }
    }
}

void Writer::publish_live() {
    WriterState s = snapshot();
    std::lock_guard lock(mu_);
    bool selected = live_.container_start_selected;
    live_ = std::move(s);
    live_.container_start_selected = selected;
    if (position_) position_->publish(std::max(live_.last_sequence, live_.written_sequence));
}

// Once the stream goes quiet: the output buffer grown by a burst (up to
// kFlushBytes and more) and the heap's free pages go back to the host, so an
// idle sandbox's writer costs what it holds, not what it once needed. Only
// after kSyncInterval without a message: a busy stream is idle between its
// batches too, and giving the buffer and heap back then had the next batch
// fault them in again (page faults were 5% of the writer's CPU under a file
// walk guest, `perf`).
void Writer::release_idle_memory() {
    out_.release(kIdleBufferBytes);
    fmt_.release_scratch();
    ::malloc_trim(0);
}

void Writer::writer_loop() {
    auto last_sync = Clock::now(), last_entry = last_sync;
    bool to_release = false;  // entries were handled since the last release_idle_memory()
    while (!writer_done_) {
        ByteQueue::Entry e;
        if (queue_.peek(e)) {
            handle_entry(e);
            queue_.pop(e);
            if (out_.size() >= kFlushBytes) flush_output();
            to_release = true;
            last_entry = Clock::now();
            continue;
        }
        // Idle: hand what we have to the kernel (it survives our death), and
        // make it durable about once a second.
        flush_output();
        publish_live();
        if (dirty_ && Clock::now() - last_sync >= kSyncInterval) {
            sync_log();
            persist(snapshot());
            dirty_ = false;
            last_sync = Clock::now();
        }
        if (to_release && !dirty_ && Clock::now() - last_entry >= kSyncInterval) {
            release_idle_memory();
            to_release = false;
        }
        // Sleep until the next entry, or until the sync or the release above
        // is due; with neither pending, an idle sandbox's writer does not
        // wake at all (each wake-up of an idle process cost 0.1 ms of CPU on
        // a 2-vCPU VM, four times a second per sandbox).
        std::optional<Clock::time_point> due;
        if (dirty_)
            due = last_sync + kSyncInterval;
        else if (to_release)
            due = last_entry + kSyncInterval;
        std::optional<std::chrono::milliseconds> timeout;
        if (due)
            timeout =
                std::clamp(std::chrono::ceil<std::chrono::milliseconds>(*due - Clock::now()),
                           std::chrono::milliseconds(1), std::chrono::milliseconds(kSyncInterval));
        queue_.wait(timeout);
    }
}

// --------------------------------------------------------------- control ----

std::optional<WriterState> Writer::request_barrier(std::optional<std::uint64_t> sentry_dropped,
                                                   bool stop, std::chrono::milliseconds timeout) {
    std::uint64_t id;
    {
        std::lock_guard lock(mu_);
        id = ++next_id_;
        BarrierRequest req;
        req.sentry_dropped = sentry_dropped;
        req.stop = stop;
        requests_[id] = std::move(req);
        pending_ids_.push_back(id);
    }
    std::uint64_t one = 1;
    (void)!::write(wake_fd_.get(), &one, sizeof one);
    std::unique_lock lock(mu_);
    bool ok = cv_.wait_for(lock, timeout, [&] { return requests_[id].done; });
    if (!ok) {
        requests_[id].abandoned = true;
        return std::nullopt;
    }
    WriterState s = requests_[id].result;
    requests_.erase(id);
    return s;
}

// Serves one request; returns true when the writer must stop afterwards.
bool Writer::handle_client(int fd) {
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        (cred.uid != 0 && cred.uid != ::geteuid()))
        return false;
    std::string buf(64 * 1024, '\0');
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) return false;
    buf.resize(static_cast<std::size_t>(n));
    nlohmann::json reply;
    bool stop = false;
    try {
        auto req = parse_untrusted_json(buf);
        std::string op = req.value("op", "");
        std::optional<std::uint64_t> sd;
        if (auto it = req.find("sentry_dropped"); it != req.end() && it->is_number_unsigned())
            sd = it->get<std::uint64_t>();
        auto timeout = std::chrono::milliseconds(req.value("timeout_ms", 30000));
        if (op == "status") {
            std::lock_guard lock(mu_);
            reply = {{"ok", true}, {"state", state_to_json(live_)}};
        } else if (op == "barrier" || op == "stop") {
            stop = op == "stop";
            auto s = request_barrier(sd, stop, timeout);
            if (s)
                reply = {{"ok", true}, {"state", state_to_json(*s)}};
            else
                reply = {{"ok", false}, {"error", "the writer did not reach the barrier in time"}};
        } else {
            reply = {{"ok", false}, {"error", "unknown request"}};
        }
    } catch (const std::exception& e) {
        reply = {{"ok", false}, {"error", std::string("bad request: ") + e.what()}};
    }
    std::string text = reply.dump();
    (void)!::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
    return stop;
}

void Writer::control_loop() {
    // The directory's removal is an inotify event when the kernel gives us
    // watches, so an idle writer sleeps; without them, a stat every second.
    // The parent's watch sees it: the directory's own IN_DELETE_SELF waits
    // for the files we hold open in it, its parent's IN_DELETE does not. It
    // also sees the parent renamed away (rm renames the sandbox's directory
    // before deleting it, and an rm killed in between leaves ours in place).
    // Any event is only a cue for the stat below.
    Fd watch(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    const std::pair<fs::path, std::uint32_t> watches[] = {
        {opts_.dir, IN_DELETE_SELF | IN_MOVE_SELF},
        {opts_.dir.parent_path(), IN_DELETE | IN_MOVED_FROM | IN_DELETE_SELF | IN_MOVE_SELF}};
    for (const auto& [d, mask] : watches)
        if (watch && ::inotify_add_watch(watch.get(), d.c_str(), mask) < 0) watch.reset();
    for (;;) {
        pollfd p[3] = {{control_fd_.get(), POLLIN, 0},
                       {signal_fd_.get(), POLLIN, 0},
                       {watch.get(), POLLIN, 0}};
        int rc = ::poll(p, watch ? 3 : 2, watch ? -1 : 1000);
        if (p[2].revents & POLLIN) {
            // Drained only; the stat below says whether it was ours that went.
            char events[4096];
            while (::read(watch.get(), events, sizeof events) > 0) {
            }
        }
        if (rc < 0 && errno != EINTR) break;
        if (p[1].revents & POLLIN) {
            signalfd_siginfo si;
            (void)!::read(signal_fd_.get(), &si, sizeof si);
            log().info("audit writer: signal " + std::to_string(si.ssi_signo) + ", stopping");
            request_barrier(std::nullopt, true, 30s);
            return;
        }
        if (p[0].revents & POLLIN) {
            Fd fd(::accept4(control_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
            if (fd) {
                bool stop = handle_client(fd.get());
                fd.reset();  // the client sees the end of the reply before we stop
                if (stop) return;
            }
        }
        // The sandbox was removed under us (rm without finish): nothing can
        // export this stream any more, so do not linger.
        struct stat st;
        if (::stat(opts_.dir.c_str(), &st) != 0 || st.st_ino != dir_ino_ || st.st_dev != dir_dev_) {
            log().warn("audit writer: directory " + opts_.dir.string() + " is gone, stopping");
            request_barrier(std::nullopt, true, 30s);
            return;
        }
    }
}

int Writer::run() {
    try {
        setup();
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        ::pthread_sigmask(SIG_BLOCK, &set, nullptr);
        ::signal(SIGPIPE, SIG_IGN);
        signal_fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
        if (!signal_fd_) throw_errno("signalfd");
    } catch (const std::exception& e) {
        ready_.error(e.what());
        return 1;
    }
    std::thread writer([this] { writer_loop(); });
    std::thread reader([this] { reader_loop(); });
    ::malloc_trim(0);  // what setup needed only once (the points file)
    ready_.ready(std::to_string(::getpid()));
    settle_after_ready();
    log().info("audit writer: listening on " + sink_socket_path(opts_.dir).string());
    control_loop();
    reader.join();
    queue_.poke();
    writer.join();
    ::unlink((opts_.dir / "control.sock").c_str());
    ::unlink(sink_socket_path(opts_.dir).c_str());
    ::unlink(reserve_path_.c_str());
    log().info("audit writer: stopped");
    return 0;
}

}  // namespace

int writer_main(WriterOptions opts) {
    // One malloc arena: the reader and writer threads allocate little once
    // started, and the main arena's free pages are what malloc_trim returns
    // (a thread arena's top stays resident below 128 KiB free).
    ::mallopt(M_ARENA_MAX, 1);
    Writer w(std::move(opts));
    return w.run();
}

}  // namespace sandweave::audit
