#include "lib/runtime/limits.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "lib/core/error.hpp"

namespace sandweave {

using nlohmann::json;

namespace {

std::string size_text(std::uint64_t bytes) {
    if (bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
    return std::to_string(bytes) + " bytes";
}

std::optional<std::uint64_t> number_at(const json& j, const char* a, const char* b = nullptr) {
    const json* p = &j;
    for (const char* k : {a, b}) {
        if (!k) break;
        if (!p->is_object() || !p->contains(k)) return std::nullopt;
        p = &(*p)[k];
    }
    if (!p->is_number_unsigned() && !p->is_number_integer()) return std::nullopt;
    if (p->is_number_integer() && p->get<std::int64_t>() < 0) return std::nullopt;
    return p->get<std::uint64_t>();
}

}  // namespace

void check_limits_enforceable(const Resources& r, unsigned host_cpus) {
    if (r.memory && *r.memory < min_guest_memory)
        throw Error(ErrorCode::runtime, "resources.memory " + size_text(*r.memory) +
                                            " refused: a sandbox needs at least " +
                                            size_text(min_guest_memory) +
                                            " to start its init and run commands");
    if (r.cpus && *r.cpus < min_guest_cpus)
        throw Error(ErrorCode::runtime,
                    "resources.cpus " + json(*r.cpus).dump() +
                        " refused: the smallest CPU quota the host enforces is 0.01 CPUs");
    if (r.cpus && host_cpus > 0 && *r.cpus > host_cpus)
        throw Error(ErrorCode::runtime, "resources.cpus " + json(*r.cpus).dump() +
                                            " refused: this host has only " +
                                            std::to_string(host_cpus) + " CPUs");
}

json host_resources(const Resources& r) {
    // OCI's limits are int64: saturate there rather than wrap to a small
    // limit the runtime would hit (a template may say 16EiB or 2^63 pids).
    constexpr std::int64_t most = std::numeric_limits<std::int64_t>::max();
    json out = json::object();
    if (r.memory) {
        std::uint64_t m = *r.memory;
        out["memory"] = {{"limit", m >= static_cast<std::uint64_t>(most) - host_memory_headroom
                                       ? most
                                       : static_cast<std::int64_t>(m + host_memory_headroom)}};
    }
    if (r.cpus) {
        const long period = 100000;
        // At least 1 ms (the kernel's minimum), at most what a long holds.
        double quota = std::clamp(*r.cpus * period, 1000.0, 1e15);
        out["cpu"] = {{"quota", static_cast<long>(std::lround(quota))}, {"period", period}};
    }
    if (r.pids) {
        std::int64_t p = *r.pids;
        out["pids"] = {{"limit", p >= (most - host_pids_base) / host_pids_per_guest_task
                                     ? most
                                     : host_pids_base + host_pids_per_guest_task * p}};
    }
    return out;
}

std::map<std::string, std::string> guest_limit_annotations(const Resources& r) {
    std::map<std::string, std::string> out;
    if (r.pids) out[guest_pids_annotation] = std::to_string(*r.pids);
    if (r.memory) out[guest_memory_annotation] = std::to_string(*r.memory);
    return out;
}

bool has_guest_limits(const Resources& r) {
    return r.pids.has_value() || r.memory.has_value();
}

LimitUsage limit_usage_from_stats(const json& event) {
    if (!event.is_object() || !event.contains("data") || !event["data"].is_object())
        throw Error(ErrorCode::runtime, "runsc events --stats: not a stats event");
    const json& d = event["data"];
    LimitUsage u;
    u.pids_current = number_at(d, "pids", "current");
    u.pids_limit = number_at(d, "pids", "limit");
    if (d.contains("memory") && d["memory"].is_object()) {
        const json& m = d["memory"];
        u.memory_usage = number_at(m, "usage", "usage");
        u.memory_limit = number_at(m, "usage", "limit");
        if (u.memory_limit == 0u) u.memory_limit.reset();
        u.memory_max = number_at(m, "usage", "max");
        u.memory_failcnt = number_at(m, "usage", "failcnt").value_or(0);
        u.oom_kills = number_at(m, "raw", "oom_kill").value_or(0);
    }
    return u;
}

json to_json(const LimitUsage& u) {
    json j = json::object();
    json pids = json::object();
    if (u.pids_current) pids["current"] = *u.pids_current;
    if (u.pids_limit) pids["limit"] = *u.pids_limit;
    j["pids"] = pids;
    json mem = json::object();
    if (u.memory_usage) mem["usage"] = *u.memory_usage;
    if (u.memory_limit) mem["limit"] = *u.memory_limit;
    if (u.memory_max) mem["max"] = *u.memory_max;
    mem["failcnt"] = u.memory_failcnt;
    mem["oom_kills"] = u.oom_kills;
    j["memory"] = mem;
    return j;
}

LimitUsage limit_usage_from_json(const json& j) {
    LimitUsage u;
    if (!j.is_object()) throw Error(ErrorCode::general, "limits: not an object");
    const json pids = j.value("pids", json::object());
    const json mem = j.value("memory", json::object());
    u.pids_current = number_at(pids, "current");
    u.pids_limit = number_at(pids, "limit");
    u.memory_usage = number_at(mem, "usage");
    u.memory_limit = number_at(mem, "limit");
    u.memory_max = number_at(mem, "max");
    u.memory_failcnt = number_at(mem, "failcnt").value_or(0);
    u.oom_kills = number_at(mem, "oom_kills").value_or(0);
    return u;
}

}  // namespace sandweave
