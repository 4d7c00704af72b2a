// What to ask the runtime for: `runsc trace metadata` parsing, the default
// selection, the --pod-init-config document, and `runsc trace list`.

#include <set>

#include "lib/audit/audit.hpp"
#include "lib/audit/wire.hpp"
#include "lib/core/error.hpp"

namespace sandweave::audit {
namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
        s.remove_suffix(1);
    return s;
}

// "[a|b|c]" -> {a, b, c}; "[]" -> {}.
std::optional<std::vector<std::string>> bracket_list(std::string_view s) {
    s = trim(s);
    if (s.size() < 2 || s.front() != '[' || s.back() != ']') return std::nullopt;
    s = s.substr(1, s.size() - 2);
    std::vector<std::string> out;
    while (!s.empty()) {
        auto bar = s.find('|');
        auto item = trim(s.substr(0, bar));
        if (!item.empty()) out.emplace_back(item);
        if (bar == std::string_view::npos) break;
        s.remove_prefix(bar + 1);
    }
    return out;
}

bool starts_with(std::string_view s, std::string_view p) {
    return s.substr(0, p.size()) == p;
}

}  // namespace

TraceMetadata parse_trace_metadata(std::string_view text) {
    // Lines look like:
    //   Name: syscall/openat/exit, optional fields: [fd_path], context fields: [time|...]
    // and the points section ends where "SINKS (n)" begins.
    TraceMetadata md;
    std::set<std::string> seen;
    bool in_points = false;
    std::size_t line_no = 0;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string_view line = trim(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        ++line_no;
        if (starts_with(line, "POINTS")) {
            in_points = true;
            continue;
        }
        if (starts_with(line, "SINKS")) {
            in_points = false;
            continue;
        }
        if (!in_points || line.empty()) continue;
        const std::string_view kName = "Name: ", kOpt = ", optional fields: ",
                               kCtx = ", context fields: ";
        auto opt = line.find(kOpt);
        auto ctx = line.find(kCtx);
        if (!starts_with(line, kName) || opt == std::string_view::npos ||
            ctx == std::string_view::npos || ctx < opt)
            throw Error(ErrorCode::runtime, "runsc trace metadata: unexpected line " +
                                                std::to_string(line_no) + ": " + std::string(line));
        TracePoint p;
        p.name = std::string(trim(line.substr(kName.size(), opt - kName.size())));
        auto o = bracket_list(line.substr(opt + kOpt.size(), ctx - opt - kOpt.size()));
        auto c = bracket_list(line.substr(ctx + kCtx.size()));
        if (p.name.empty() || !o || !c)
            throw Error(ErrorCode::runtime, "runsc trace metadata: cannot parse line " +
                                                std::to_string(line_no) + ": " + std::string(line));
        p.optional_fields = std::move(*o);
        p.context_fields = std::move(*c);
        if (seen.insert(p.name).second) md.points.push_back(std::move(p));
    }
    if (md.points.empty())
        throw Error(ErrorCode::runtime, "runsc trace metadata lists no trace points");
    return md;
}

std::vector<TracePoint> default_selection(const TraceMetadata& md) {
    static const std::set<std::string> kLifecycle = {"container/start", "sentry/clone",
                                                     "sentry/execve", "sentry/exit_notify_parent",
                                                     "sentry/task_exit"};
    // Syscall numbers some rich point already covers; their raw point would
    // only duplicate records. A rich name we cannot map keeps its raw twin.
    std::set<std::uint64_t> covered;
    for (const auto& p : md.points) {
        if (!starts_with(p.name, "syscall/") || starts_with(p.name, "syscall/sysno/")) continue;
        auto rest = std::string_view(p.name).substr(8);
        auto slash = rest.find('/');
        if (slash == std::string_view::npos || rest.substr(slash) != "/exit") continue;
        if (auto n = syscall_number(rest.substr(0, slash))) covered.insert(*n);
    }
    std::vector<TracePoint> out;
    for (const auto& p : md.points) {
        std::string_view name = p.name;
        bool take = false;
        if (kLifecycle.count(p.name)) {
            take = true;
        } else if (!starts_with(name, "syscall/")) {
            // Mappings (newer runtimes) and any other non-syscall lifecycle point
            // about memory maps.
            take = name.find("mmap") != std::string_view::npos ||
                   name.find("mapping") != std::string_view::npos;
        } else if (starts_with(name, "syscall/sysno/")) {
            auto rest = name.substr(14);
            auto slash = rest.find('/');
            if (slash != std::string_view::npos && rest.substr(slash) == "/exit") {
                std::uint64_t n = 0;
                bool digits = slash > 0;
                for (char c : rest.substr(0, slash)) {
                    if (c < '0' || c > '9')
                        digits = false;
                    else
                        n = n * 10 + static_cast<std::uint64_t>(c - '0');
                }
                take = digits && !covered.count(n);
            }
        } else {
            take = name.size() > 5 && name.substr(name.size() - 5) == "/exit";
        }
        if (take) out.push_back(p);  // all optional and context fields, as offered
    }
    return out;
}

std::string pod_init_config(const std::vector<TracePoint>& points,
                            const std::filesystem::path& sink_socket) {
    nlohmann::json pts = nlohmann::json::array();
    for (const auto& p : points)
        pts.push_back({{"name", p.name},
                       {"optional_fields", p.optional_fields},
                       {"context_fields", p.context_fields}});
    // runsc decodes this with DisallowUnknownFields: only its keys. retries 0:
    // the sentry drops (and counts) instead of stalling the guest.
    nlohmann::json doc = {
        {"trace_session",
         {{"name", "Default"},
          {"points", pts},
          {"ignore_missing", false},
          {"sinks",
           nlohmann::json::array({{{"name", "remote"},
                                   {"config", {{"endpoint", sink_socket.string()}, {"retries", 0}}},
                                   {"ignore_setup_error", false}}})}}}};
    return doc.dump() + "\n";
}

std::optional<std::uint64_t> parse_trace_list_dropped(std::string_view text) {
    // SESSIONS (1)
    // "Default"
    //         Sink: "remote", dropped: 0
    std::optional<std::uint64_t> found;
    bool in_default = false;
    while (!text.empty()) {
        auto nl = text.find('\n');
        std::string_view line = trim(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (starts_with(line, "\"")) {
            in_default = line == "\"Default\"";
            continue;
        }
        if (!in_default || !starts_with(line, "Sink: \"remote\"")) continue;
        auto pos = line.find("dropped: ");
        if (pos == std::string_view::npos) return std::nullopt;
        auto digits = line.substr(pos + 9);
        if (digits.empty()) return std::nullopt;
        std::uint64_t n = 0;
        for (char c : digits) {
            if (c < '0' || c > '9') return std::nullopt;
            if (n > (UINT64_MAX - 9) / 10) return std::nullopt;
            n = n * 10 + static_cast<std::uint64_t>(c - '0');
        }
        // Two remote sinks would be a configuration we never write: refuse to guess.
        if (found) return std::nullopt;
        found = n;
    }
    return found;
}

std::optional<std::uint64_t> trace_sessions_dropped(const nlohmann::json& sessions) {
    if (!sessions.is_array()) return std::nullopt;
    std::optional<std::uint64_t> found;
    for (const auto& session : sessions) {
        if (!session.is_object() || session.value("name", nlohmann::json()) != "Default") continue;
        auto sinks = session.find("sinks");
        if (sinks == session.end() || !sinks->is_array()) continue;
        for (const auto& sink : *sinks) {
            if (!sink.is_object() || sink.value("name", nlohmann::json()) != "remote") continue;
            // Two remote sinks would be a configuration we never write: refuse to guess.
            if (found) return std::nullopt;
            // Go writes the count even when it is 0: one missing is not ours.
            auto status = sink.find("status");
            if (status == sink.end() || !status->is_object()) return std::nullopt;
            auto n = status->find("DroppedCount");
            if (n == status->end() || !n->is_number_integer() ||
                (!n->is_number_unsigned() && n->get<std::int64_t>() < 0))
                return std::nullopt;
            found = n->get<std::uint64_t>();
        }
    }
    return found;
}

}  // namespace sandweave::audit
