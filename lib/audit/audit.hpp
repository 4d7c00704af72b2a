#pragma once
// Protected runtime audit (docs/design.md, "The audit pipeline"): the public API
// the sandbox layer calls.
//
// Design: one writer daemon per audited sandbox, started before `runsc create`,
// owning a 0700 directory that holds:
//   sink.sock          the SOCK_SEQPACKET endpoint runsc's `remote` sink connects to
//   control.sock       barrier/status/stop requests from sandweave CLI processes
//   audit.jsonl        the log (0600), append-only, one JSON object per line
//   writer-state.json  the last durable state, atomically replaced after each fsync
//   points.json        the exact points + fields handed to runsc (the coverage)
//   writer.log         the daemon's stderr
// A reader thread only receives and enqueues (bounded ~8 MiB, overflow counted,
// the guest never waits); a writer thread decodes, formats and appends.
//
// Contract of a status: `events`, `last_sequence`, `bytes` and `dropped`
// describe one durable prefix of audit.jsonl (fsynced, ending on a line
// boundary). `complete` is true only when nothing selected and submitted
// before the barrier is missing: no drop anywhere (runtime or writer), no
// reason recorded, exactly one sentry stream that delivered container/start.
// It never says anything about what happened after the barrier, and it never
// means "the episode is clean".

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sandweave::audit {

// One trace point with the optional and context fields to collect.
struct TracePoint {
    std::string name;
    std::vector<std::string> optional_fields, context_fields;
    bool operator==(const TracePoint&) const = default;
};

// Parsed `runsc trace metadata` output.
struct TraceMetadata {
    std::vector<TracePoint> points;
};

// Throws Error(runtime) when the text lists no points.
TraceMetadata parse_trace_metadata(std::string_view runsc_trace_metadata_output);

// The default selection: lifecycle points, mappings where offered, every rich
// syscall/<name>/exit, raw syscall/sysno/<N>/exit for syscalls without a rich
// point; all optional and context fields of each.
std::vector<TracePoint> default_selection(const TraceMetadata&);

// The --pod-init-config JSON text: {"trace_session": {...}} with one Default
// session and a `remote` sink at sink_socket with retries 0.
std::string pod_init_config(const std::vector<TracePoint>& points,
                            const std::filesystem::path& sink_socket);

// The sink socket runsc must be pointed at (pass to pod_init_config).
std::filesystem::path sink_socket_path(const std::filesystem::path& dir);
// The log file inside the writer directory.
std::filesystem::path log_path(const std::filesystem::path& dir);
// The selected points (start_writer writes it; status and export read it).
std::filesystem::path points_path(const std::filesystem::path& dir);

struct WriterOptions {
    std::filesystem::path dir;
    std::string sandbox_id;
    std::uint64_t max_bytes = 1ull << 30;
    std::string runtime_version;
    std::vector<TracePoint> points;
    // Whether the selection has container/start (an export without it is then
    // incomplete). Unset: found in `points` (an empty list counts as having it).
    std::optional<bool> container_start;
    // The NFLOG group the sandbox's egress policy logs its refusals to
    // (lib/audit/egress_log.hpp); unset for a sandbox without a network.
    std::optional<std::uint16_t> egress_log_group;
    // Set by start_writer: the daemon reports readiness (or its error) on it.
    int ready_fd = -1;
};

// The first argument of a writer's command line, after the executable.
inline constexpr const char* writer_verb = "__audit-writer";

// Starts the writer as a detached daemon (own session, reparented away from
// the caller, stdio on /dev/null and dir/writer.log) by exec of
// `exe __audit-writer ...` (exe: sandweave or its helper binary). Creates dir
// 0700 and dir/points.json; returns the writer pid once the sink socket
// listens, or throws with the writer's error.
pid_t start_writer(const std::filesystem::path& exe, const WriterOptions&);

// {"__audit-writer", "--dir", D, "--sandbox-id", ID, "--max-bytes", N,
//  "--runtime-version", V, "--container-start", yes|no[, "--egress-log-group", G]
//  [, "--ready-fd", FD]}
// The writer needs only that bit of the points: it does not read points.json
// (~90 KB of JSON) on the create's path.
std::vector<std::string> writer_argv(const WriterOptions&);
bool selects_container_start(const WriterOptions&);
// Inverse of writer_argv; the leading "__audit-writer" is optional. Throws
// Error(usage) on bad arguments.
WriterOptions parse_writer_argv(const std::vector<std::string>& args);
// The daemon body (blocks until stopped); returns the process exit code.
// Takes the options by value: pass them moved, and the writer drops what it
// needs only at start-up (the points) instead of a copy living on in the caller.
int writer_main(WriterOptions);
// `args` (writer_argv's, the verb optional) parsed and run by writer_main; a
// bad argument or a start-up failure is one line on stderr and exit 1.
int writer_entry(const std::vector<std::string>& args);

struct Status {
    bool complete = false;
    std::uint64_t events = 0, last_sequence = 0, bytes = 0, dropped = 0;
    std::vector<std::string> reasons;
    std::string sandbox_id, runtime_version, sha256;
    // The chain of the prefix's last line (lib/audit/chain.hpp): `audit verify`
    // checks a copy's lines against it.
    std::string chain;
    // In JSON: "context_fields" once (the set most points share), "points" as
    // {name: [optional fields]}, and "point_context_fields" {name: [...]} only
    // for points whose context fields differ from the shared set.
    std::vector<TracePoint> points;
    std::optional<std::string> error;
    // The network policy in force ("none" or {"allow": [...], "deny": [...]}),
    // when the exporter knew it; null otherwise.
    nlohmann::json network;

    // False for a live view (live_status): no flush barrier was run, so
    // `complete` is always false and the figures may trail what was received.
    bool barrier = true;
    bool writer_running = false;  // the daemon answered this request
    bool connected = false;       // a sentry stream is currently open
    bool finished = false;        // the writer stopped cleanly (finish/SIGTERM)
    std::uint64_t max_bytes = 0;
    std::optional<std::uint64_t> runtime_dropped_reported;  // what runsc said at the barrier
    nlohmann::json counters = nlohmann::json::object();     // detailed breakdown
    std::string exported_at, path;                          // set by export_log only
};

nlohmann::json to_json(const Status&);
Status status_from_json(const nlohmann::json&);
// The one line `audit export` and `audit status` print without --json:
// "complete=true events=12 dropped=0 bytes=3456 sha256=..." (see status.cpp).
std::string summary_line(const Status&);

// `sandweave audit verify`: checks a copy of an exported log against its
// sidecar (lib/audit/verify.cpp). `ok` false names the first discrepancy.
struct VerifyResult {
    bool ok = false;
    std::string discrepancy;  // one line, e.g. "line 12: seq 14, expected 12"
    std::uint64_t lines = 0, bytes = 0, events = 0, gap_lost = 0;
    Status sidecar;
};
// Throws Error only when `log` cannot be read at all; everything else about
// the copy or the sidecar is a discrepancy. `sidecar` defaults to
// log + ".status.json".
VerifyResult verify_log(const std::filesystem::path& log,
                        const std::optional<std::filesystem::path>& sidecar = std::nullopt);

// Flush barrier. `sentry_dropped` is the sentry's dropped count from
// `runsc trace list` (nullopt when it could not be read: reason
// runtime_unavailable). Waits until everything the sentry had already sent is
// decoded, written and fsynced and returns the status of that durable prefix.
// When the writer is gone or does not answer within `timeout`, returns the last
// persisted state instead (complete false with writer_died/writer_unresponsive
// unless it finished cleanly). When the writer is dead, the state merged with
// the sentry's count and the log's intact tail is persisted to
// writer-state.json, so later exports never report less loss.
Status barrier(const std::filesystem::path& dir, std::optional<std::uint64_t> sentry_dropped,
               std::chrono::milliseconds timeout = std::chrono::seconds(30));

// Barrier, then copy exactly that prefix to dest (0600, temp + fsync + rename)
// and write dest + ".status.json" the same way. An older sidecar is removed
// first; on failure no sidecar claims completeness (a complete:false one with
// "error" is left when it can be written) and Error is thrown. `network`
// (the sandbox's network: "none" or its egress policy) is named in the sidecar.
Status export_log(const std::filesystem::path& dir, const std::filesystem::path& dest,
                  std::optional<std::uint64_t> sentry_dropped,
                  const nlohmann::json& network = nullptr);

// The writer's current status without a barrier (bytes etc. are the last
// durable prefix; `counters.written_*` show what is written but not yet synced).
// Not a barrier: `complete` is always false and `barrier` false; `reasons`
// list only losses actually recorded (no runtime_unavailable, since the
// runtime was not asked), plus writer_died/writer_unresponsive.
Status live_status(const std::filesystem::path& dir);

// The writer's position now: the highest sequence it has received into the
// log, durable or only written (the cut between two phases of a sandbox's
// life, such as a pool member's warm-up and its episode). As live_status's
// max(last_sequence, counters.written_sequence), without building a status
// (no trace points read): the position the writer publishes, else one round
// trip to the writer, or its persisted state when it does not answer within
// `timeout`.
std::uint64_t live_position(const std::filesystem::path& dir,
                            std::chrono::milliseconds timeout = std::chrono::seconds(10));

// live_position in two halves, for a caller with other work to do while the
// writer answers. The constructor reads the position the writer publishes
// (lib/audit/position.hpp), which wakes no one; only a writer that publishes
// none (an older sandweave's) is asked: then the constructor connects and
// asks (it never throws for a writer that is gone: get() then reads the
// persisted state), get() waits up to `timeout` for the answer. Dropped
// unasked, the connection just closes.
class PositionQuery {
  public:
    explicit PositionQuery(const std::filesystem::path& dir);
    PositionQuery(PositionQuery&&) noexcept;
    PositionQuery& operator=(PositionQuery&&) noexcept;
    ~PositionQuery();
    std::uint64_t get(std::chrono::milliseconds timeout);

  private:
    struct Sent;
    std::filesystem::path dir_;
    std::optional<std::uint64_t> published_;
    std::unique_ptr<Sent> sent_;
};

// Why the writer in `dir` can no longer record (empty while it can): it
// died (its pid no longer runs the process that started as it), or it
// stopped. Reads the persisted state only: no round trip wakes the writer,
// so the sandbox layer asks it before every new command (a guarantee that
// fails closed: an audited sandbox never runs a command unaudited).
std::string writer_gone(const std::filesystem::path& dir);

// Final barrier, then stop the writer and wait for it to exit. Idempotent: on
// a stopped writer it returns the persisted final status.
Status finish(const std::filesystem::path& dir, std::optional<std::uint64_t> sentry_dropped);

// The `remote` sink's dropped count from `runsc trace list ID` output, or
// nullopt when the output has no such line.
std::optional<std::uint64_t> parse_trace_list_dropped(std::string_view runsc_trace_list_output);
// The same from the sandbox control server's answer to
// containerManager.ListTraceSessions (what `runsc trace list` prints from):
// a list of sessions, each with sinks carrying status.DroppedCount.
std::optional<std::uint64_t> trace_sessions_dropped(const nlohmann::json& sessions);

}  // namespace sandweave::audit
