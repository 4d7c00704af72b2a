// JSON of the library types the API carries as they are. Encoding uses the
// library's own to_json, so the CLI's --json output, the state files and the
// protocol show one rendering under one set of names; decoding (a client
// reading a worker's answer) reports a malformed document as an Error, never
// as an nlohmann exception.

#include "lib/api/types.hpp"

namespace sandweave::api {

namespace {

template <class Fn>
auto decoding(const std::string& where, Fn fn) -> decltype(fn()) {
    try {
        return fn();
    } catch (const json::exception& e) {
        throw Error(ErrorCode::general, where + ": malformed: " + e.what());
    }
}

}  // namespace

json Codec<SandboxView>::encode(const SandboxView& v) {
    return to_json(v);
}

SandboxView Codec<SandboxView>::decode(const json& j, const std::string& where) {
    return decoding(where, [&] {
        SandboxView v;
        v.record = record_from_json(j);
        v.live = sandbox_state_from_string(j.at("state").get<std::string>());
        if (const json* t = j.contains("time_left") ? &j["time_left"] : nullptr) {
            TimeLeft left;
            left.busy = t->value("busy", false);
            if (t->contains("ttl_ms"))
                left.ttl = std::chrono::milliseconds(t->at("ttl_ms").get<std::int64_t>());
            if (t->contains("idle_ms"))
                left.idle = std::chrono::milliseconds(t->at("idle_ms").get<std::int64_t>());
            v.left = left;
        }
        if (j.contains("limits")) v.limits = limit_usage_from_json(j.at("limits"));
        if (j.contains("worker")) v.worker = j.at("worker").get<std::string>();
        return v;
    });
}

json Codec<audit::Status>::encode(const audit::Status& s) {
    return audit::to_json(s);
}

audit::Status Codec<audit::Status>::decode(const json& j, const std::string& where) {
    return decoding(where, [&] { return audit::status_from_json(j); });
}

json Codec<SnapshotRecord>::encode(const SnapshotRecord& s) {
    return to_json(s);
}

SnapshotRecord Codec<SnapshotRecord>::decode(const json& j, const std::string& where) {
    return decoding(where, [&] { return snapshot_from_json(j); });
}

json Codec<PoolInfo>::encode(const PoolInfo& p) {
    return to_json(p);
}

PoolInfo Codec<PoolInfo>::decode(const json& j, const std::string& where) {
    return decoding(where, [&] { return pool_info_from_json(j); });
}

}  // namespace sandweave::api
