#include <sys/time.h>
#include <ctime>
#include <map>

#include "lib/audit/audit.hpp"
#include "lib/audit/state.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"

namespace sandweave::audit {

nlohmann::json state_to_json(const WriterState& s) {
    nlohmann::json j = {
        {"bytes", s.bytes},
        {"events", s.events},
        {"last_sequence", s.last_sequence},
        {"chain", s.chain},
        {"dropped", s.dropped()},
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
        {"streams", s.streams},
        {"rejected_connections", s.rejected_connections},
        {"connected", s.connected},
        {"container_start_seen", s.container_start_seen},
        {"container_start_selected", s.container_start_selected},
        {"byte_limit", s.byte_limit},
        {"disk_failure", s.disk_failure},
        {"barrier_drain_timeout", s.barrier_drain_timeout},
        {"disk_error", s.disk_error},
        {"runtime_reported", s.runtime_reported ? nlohmann::json(*s.runtime_reported) : nullptr},
        {"finished", s.finished},
        {"writer_died", s.writer_died},
        {"pid", s.pid},
        {"pid_start_time", s.pid_start_time},
        {"updated_at", s.updated_at},
        {"max_bytes", s.max_bytes},
        {"sandbox_id", s.sandbox_id},
        {"runtime_version", s.runtime_version},
        {"written_bytes", s.written_bytes},
        {"written_events", s.written_events},
        {"written_sequence", s.written_sequence},
    };
    return j;
}

WriterState state_from_json(const nlohmann::json& j) {
    WriterState s;
    auto u = [&](const char* k, std::uint64_t& v) {
        if (auto it = j.find(k); it != j.end() && it->is_number_unsigned())
            v = it->get<std::uint64_t>();
    };
    auto b = [&](const char* k, bool& v) {
        if (auto it = j.find(k); it != j.end() && it->is_boolean()) v = it->get<bool>();
    };
    auto str = [&](const char* k, std::string& v) {
        if (auto it = j.find(k); it != j.end() && it->is_string()) v = it->get<std::string>();
    };
    u("bytes", s.bytes);
    u("events", s.events);
    u("last_sequence", s.last_sequence);
    str("chain", s.chain);
    u("runtime_dropped", s.runtime_dropped);
    u("queue_overflow", s.queue_overflow);
    u("egress_lost", s.egress_lost);
    u("egress_refused", s.egress_refused);
    u("truncated", s.truncated);
    u("byte_limit_dropped", s.byte_limit_dropped);
    u("disk_dropped", s.disk_dropped);
    u("malformed", s.malformed);
    u("unknown_types", s.unknown_types);
    u("escaped_records", s.escaped_records);
    u("streams", s.streams);
    u("rejected_connections", s.rejected_connections);
    b("connected", s.connected);
    b("container_start_seen", s.container_start_seen);
    b("container_start_selected", s.container_start_selected);
    b("byte_limit", s.byte_limit);
    b("disk_failure", s.disk_failure);
    b("barrier_drain_timeout", s.barrier_drain_timeout);
    str("disk_error", s.disk_error);
    if (auto it = j.find("runtime_reported"); it != j.end() && it->is_number_unsigned())
        s.runtime_reported = it->get<std::uint64_t>();
    b("finished", s.finished);
    b("writer_died", s.writer_died);
    if (auto it = j.find("pid"); it != j.end() && it->is_number_integer()) s.pid = it->get<pid_t>();
    u("pid_start_time", s.pid_start_time);
    str("updated_at", s.updated_at);
    u("max_bytes", s.max_bytes);
    str("sandbox_id", s.sandbox_id);
    str("runtime_version", s.runtime_version);
    u("written_bytes", s.written_bytes);
    u("written_events", s.written_events);
    u("written_sequence", s.written_sequence);
    return s;
}

std::vector<std::string> state_reasons(const WriterState& s) {
    std::vector<std::string> r;
    // Each loss counter has its own reason, so a status never names a loss
    // that did not happen. The runtime's drops are its own: a send it could
    // not make (its socket full) or a point it could not encode; its count
    // does not say which, so the reason names where, not why.
    if (s.runtime_dropped > 0) r.push_back("runtime_dropped");
    if (s.queue_overflow > 0) r.push_back("queue_overflow");
    if (s.egress_lost > 0) r.push_back("egress_log_lost");
    if (s.truncated > 0) r.push_back("truncated_message");
    if (s.malformed > 0) r.push_back("malformed_message");
    if (s.disk_failure || s.disk_dropped > 0) r.push_back("disk_failure");
    if (s.byte_limit || s.byte_limit_dropped > 0) r.push_back("byte_limit");
    if (!s.runtime_reported) r.push_back("runtime_unavailable");
    if (s.barrier_drain_timeout) r.push_back("barrier_timeout");
    if (s.streams == 0) r.push_back("no_sentry_connection");
    if (s.streams > 1) r.push_back("multiple_sentry_connections");
    if (s.streams > 0 && s.container_start_selected && !s.container_start_seen)
        r.push_back("no_container_start");
    return r;
}

// Each \udcNN escape (json_out.hpp) becomes \ufffd: the same length, so
// nothing else in the line moves.
nlohmann::json parse_log_line(std::string_view line) {
    std::string text(line);
    for (std::size_t i = 0; i + 1 < text.size(); ++i) {
        if (text[i] != '\\') continue;
        if (text[i + 1] == 'u' && i + 5 < text.size() &&
            (text[i + 2] == 'd' || text[i + 2] == 'D') &&
            std::string_view("cdefCDEF").find(text[i + 3]) != std::string_view::npos)
            text.replace(i + 2, 4, "fffd");
        ++i;  // past the escaped character: an escaped backslash is not an escape
    }
    return parse_untrusted_json(text);
}

std::string utc_now() {
    struct timeval tv;
    ::gettimeofday(&tv, nullptr);
    struct tm tm;
    ::gmtime_r(&tv.tv_sec, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<int>(tv.tv_usec / 1000));
    return buf;
}

std::uint64_t process_start_time(pid_t pid) {
    std::string stat;
    try {
        stat = read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
    } catch (...) {
        return 0;
    }
    // The command name may contain spaces and ')': fields resume after the last ')'.
    auto close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size()) return 0;
    // A zombie (never reaped when our parent is a minimal init) is not running.
    if (stat[close + 2] == 'Z' || stat[close + 2] == 'X') return 0;
    std::size_t pos = close + 2, field = 3;
    while (field < 22 && pos < stat.size()) {
        pos = stat.find(' ', pos);
        if (pos == std::string::npos) return 0;
        ++pos;
        ++field;
    }
    return std::strtoull(stat.c_str() + pos, nullptr, 10);
}

namespace {

// The context field set most points share (the first of the most frequent).
std::vector<std::string> shared_context_fields(const std::vector<TracePoint>& points) {
    std::map<std::vector<std::string>, std::size_t> count;
    const std::vector<std::string>* best = nullptr;
    std::size_t best_n = 0;
    for (const auto& p : points) {
        std::size_t n = ++count[p.context_fields];
        if (n > best_n) {
            best_n = n;
            best = &p.context_fields;
        }
    }
    return best ? *best : std::vector<std::string>{};
}

}  // namespace

nlohmann::json to_json(const Status& s) {
    const std::vector<std::string> shared = shared_context_fields(s.points);
    nlohmann::json points = nlohmann::json::object();
    nlohmann::json differing = nlohmann::json::object();
    for (const auto& p : s.points) {
        points[p.name] = p.optional_fields;
        if (p.context_fields != shared) differing[p.name] = p.context_fields;
    }
    nlohmann::json j = {
        {"complete", s.complete},
        {"events", s.events},
        {"last_sequence", s.last_sequence},
        {"bytes", s.bytes},
        {"dropped", s.dropped},
        {"reasons", s.reasons},
        {"sandbox_id", s.sandbox_id},
        {"runtime_version", s.runtime_version},
        {"sha256", s.sha256},
        {"barrier", s.barrier},
        {"writer_running", s.writer_running},
        {"connected", s.connected},
        {"finished", s.finished},
        {"max_bytes", s.max_bytes},
        {"runtime_dropped_reported",
         s.runtime_dropped_reported ? nlohmann::json(*s.runtime_dropped_reported) : nullptr},
        {"counters", s.counters},
        {"chain", s.chain},
        {"context_fields", shared},
        {"points", points},
    };
    if (!differing.empty()) j["point_context_fields"] = differing;
    if (!s.network.is_null()) j["network"] = s.network;
    if (s.error) j["error"] = *s.error;
    if (!s.exported_at.empty()) j["exported_at"] = s.exported_at;
    if (!s.path.empty()) j["path"] = s.path;
    return j;
}

Status status_from_json(const nlohmann::json& j) {
    Status s;
    s.complete = j.value("complete", false);
    s.events = j.value("events", std::uint64_t{0});
    s.last_sequence = j.value("last_sequence", std::uint64_t{0});
    s.bytes = j.value("bytes", std::uint64_t{0});
    s.dropped = j.value("dropped", std::uint64_t{0});
    s.reasons = j.value("reasons", std::vector<std::string>{});
    s.sandbox_id = j.value("sandbox_id", "");
    s.runtime_version = j.value("runtime_version", "");
    s.sha256 = j.value("sha256", "");
    if (auto it = j.find("network"); it != j.end()) s.network = *it;
    s.barrier = j.value("barrier", true);
    s.writer_running = j.value("writer_running", false);
    s.connected = j.value("connected", false);
    s.finished = j.value("finished", false);
    s.max_bytes = j.value("max_bytes", std::uint64_t{0});
    if (auto it = j.find("runtime_dropped_reported"); it != j.end() && it->is_number_unsigned())
        s.runtime_dropped_reported = it->get<std::uint64_t>();
    if (auto it = j.find("counters"); it != j.end()) s.counters = *it;
    s.chain = j.value("chain", "");
    const auto shared = j.value("context_fields", std::vector<std::string>{});
    const auto differing = j.value("point_context_fields", nlohmann::json::object());
    if (auto it = j.find("points"); it != j.end() && it->is_object())
        for (const auto& [name, optional] : it->items()) {
            TracePoint p{name, optional.get<std::vector<std::string>>(), shared};
            if (auto d = differing.find(name); d != differing.end())
                p.context_fields = d->get<std::vector<std::string>>();
            s.points.push_back(std::move(p));
        }
    if (auto it = j.find("error"); it != j.end() && it->is_string())
        s.error = it->get<std::string>();
    s.exported_at = j.value("exported_at", "");
    s.path = j.value("path", "");
    return s;
}

std::string summary_line(const Status& s) {
    // key=value, no spaces inside values: easy to read and to cut/grep.
    std::string line = std::string("complete=") + (s.complete ? "true" : "false") +
                       " events=" + std::to_string(s.events) +
                       " dropped=" + std::to_string(s.dropped) +
                       " bytes=" + std::to_string(s.bytes);
    if (!s.sha256.empty()) line += " sha256=" + s.sha256;
    if (!s.reasons.empty()) {
        line += " reasons=";
        for (std::size_t i = 0; i < s.reasons.size(); ++i) line += (i ? "," : "") + s.reasons[i];
    }
    if (!s.barrier) line += std::string(" writer_running=") + (s.writer_running ? "true" : "false");
    if (!s.path.empty()) line += " path=" + s.path;
    return line;
}

}  // namespace sandweave::audit
