#pragma once
// The writer's durable state: what one fsynced prefix of audit.jsonl contains
// and everything known to be missing from it. The writer persists it to
// writer-state.json after every fsync (so an export still works after the
// writer is gone) and returns it from every barrier; the client turns it into
// a Status. Reasons are derived here, in one place, so the daemon and the
// offline path can never disagree about what `complete` means.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace sandweave::audit {

struct WriterState {
    // The durable prefix.
    std::uint64_t bytes = 0, events = 0, last_sequence = 0;
    // The chain of the prefix's last line (lib/audit/chain.hpp); 32 zeros when empty.
    std::string chain = std::string(32, '0');
    // What is missing or doubtful in it.
    std::uint64_t runtime_dropped = 0;  // sentry-side drops (headers / runsc trace list), unwrapped
    std::uint64_t queue_overflow = 0;   // dropped because the writer's queue was full
    std::uint64_t truncated = 0;        // messages over the size limit (lost)
    std::uint64_t byte_limit_dropped = 0;  // events after the log reached max_bytes
    std::uint64_t disk_dropped = 0;        // events lost to a write/fsync failure
    std::uint64_t egress_lost = 0;         // refusals the kernel's log dropped (egress_log.hpp)
    std::uint64_t egress_refused = 0;      // network/refused records written
    std::uint64_t malformed = 0;           // undecodable messages (kept raw)
    std::uint64_t unknown_types = 0;       // message types this writer has no schema for (kept raw)
    std::uint64_t escaped_records = 0;     // records with non-UTF-8 bytes (kept, escaped \udcNN)
    std::uint64_t streams = 0;             // sentry connections that completed the handshake
    std::uint64_t rejected_connections = 0;  // connections refused (busy / bad handshake)
    bool connected = false;
    bool container_start_seen = false;
    bool container_start_selected = true;
    bool byte_limit = false;
    bool disk_failure = false;
    std::string disk_error;
    // The runtime's own count given with the barrier this state answers;
    // nullopt when the runtime could not be asked (or this is not a barrier).
    std::optional<std::uint64_t> runtime_reported;
    // The barrier this state answers gave up draining the sentry's socket
    // (the guest kept it full): events sent before it may still be there.
    bool barrier_drain_timeout = false;
    // Lifecycle.
    bool finished = false;  // the writer stopped cleanly after a final flush
    // Set by a CLI process that found the writer dead and persisted this state
    // on its behalf (finished stays false: the stream never ended cleanly).
    bool writer_died = false;
    pid_t pid = 0;
    std::uint64_t pid_start_time = 0;  // /proc/<pid>/stat starttime, guards against pid reuse
    std::string updated_at;
    std::uint64_t max_bytes = 0;
    std::string sandbox_id, runtime_version;
    // Written (not necessarily fsynced yet); only in live status replies.
    std::uint64_t written_bytes = 0, written_events = 0, written_sequence = 0;

    std::uint64_t dropped() const {
        return runtime_dropped + queue_overflow + truncated + byte_limit_dropped + disk_dropped +
               egress_lost;
    }
};

nlohmann::json state_to_json(const WriterState&);
WriterState state_from_json(const nlohmann::json&);

// The reasons that make this prefix incomplete (empty = nothing known missing).
std::vector<std::string> state_reasons(const WriterState&);

// Advances a 64-bit cumulative count by a 32-bit wrapping observation of it.
// Observations older than the current value (messages can arrive out of the
// order their counts were taken in) leave it unchanged.
inline std::uint64_t unwrap_advance(std::uint64_t current, std::uint32_t observed) {
    std::uint32_t delta = observed - static_cast<std::uint32_t>(current);
    return delta < 0x80000000u ? current + delta : current;
}

// Parses one line of the log for its framing fields (seq, point, lost,
// source): nlohmann rejects the \udcNN escapes of bytes that are not UTF-8,
// which this reads as U+FFFD. Throws nlohmann::json::exception.
nlohmann::json parse_log_line(std::string_view line);

// RFC 3339 UTC with milliseconds, for updated_at / exported_at.
std::string utc_now();

// /proc/<pid>/stat starttime, 0 when the process does not exist or is a zombie.
std::uint64_t process_start_time(pid_t pid);

}  // namespace sandweave::audit
