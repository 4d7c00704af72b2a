#include "lib/options/create_options.hpp"

#include <chrono>

#include "lib/core/error.hpp"
#include "lib/core/units.hpp"
#include "lib/options/network.hpp"

namespace sandweave {
namespace {

using json = nlohmann::json;

[[noreturn]] void bad(const std::string& what) {
    throw Error(ErrorCode::usage, what);
}

const json* find(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::int64_t integer(const json& v, const char* key) {
    if (!v.is_number_integer()) bad(std::string(key) + ": expected an integer, got " + v.dump());
    return v.get<std::int64_t>();
}

std::string text(const json& v, const char* key) {
    if (!v.is_string()) bad(std::string(key) + ": expected a string, got " + v.dump());
    return v.get<std::string>();
}

std::vector<std::string> texts(const json& v, const char* key) {
    if (!v.is_array()) bad(std::string(key) + ": expected a list of strings, got " + v.dump());
    std::vector<std::string> out;
    for (const auto& e : v) out.push_back(text(e, key));
    return out;
}

// ttl_ms, idle_timeout_ms: at most a century.
std::chrono::milliseconds lifetime(const json& v, const char* key) {
    std::int64_t ms = integer(v, key);
    if (ms <= 0 || ms > 100LL * 365 * 24 * 3600 * 1000)
        bad(std::string(key) + " " + std::to_string(ms) + ": must be positive");
    return std::chrono::milliseconds(ms);
}

std::vector<Destination> destinations(const json& v, const char* key) {
    std::vector<Destination> out;
    for (const auto& entry : texts(v, key)) {
        auto parsed = parse_destination(entry, std::string(key) == "deny");
        if (!parsed.dest) bad(std::string(key) + " '" + entry + "': " + parsed.error);
        out.push_back(*parsed.dest);
    }
    return out;
}

std::vector<PublishedPort> published(const json& v) {
    std::vector<PublishedPort> out;
    for (const auto& entry : texts(v, "publish")) {
        std::string why;
        auto port = parse_published_port(entry, why);
        if (!port) bad("publish '" + entry + "': " + why);
        for (const auto& other : out)
            if (other.host_port == port->host_port)
                bad("publish '" + entry + "': host port " + std::to_string(port->host_port) +
                    " is published twice");
        out.push_back(*port);
    }
    return out;
}

}  // namespace

const std::vector<std::string>& create_option_keys() {
    static const std::vector<std::string> keys = {"hidepid", "audit",           "user", "labels",
                                                  "ttl_ms",  "idle_timeout_ms", "cpus", "memory",
                                                  "network", "allow",           "deny", "publish"};
    return keys;
}

std::optional<std::string> hidepid_problem(std::int64_t hidepid) {
    if (hidepid < 0 || hidepid > 2) return std::string("expected 0, 1 or 2");
    return std::nullopt;
}

json create_options_to_json(const FlagOverrides& f) {
    json j{{"labels", f.labels}};
    if (f.hidepid) j["hidepid"] = *f.hidepid;
    if (f.audit) j["audit"] = *f.audit;
    if (f.user) j["user"] = f.user->str();
    if (f.ttl) j["ttl_ms"] = f.ttl->count();
    if (f.idle_timeout) j["idle_timeout_ms"] = f.idle_timeout->count();
    if (f.cpus) j["cpus"] = *f.cpus;
    if (f.memory) j["memory"] = *f.memory;
    if (f.network_none) j["network"] = "none";
    for (const auto& [key, list] : {std::pair{"allow", &f.allow}, std::pair{"deny", &f.deny}}) {
        if (list->empty()) continue;
        json out = json::array();
        for (const auto& d : *list) out.push_back(d.str());
        j[key] = out;
    }
    if (!f.publish.empty()) {
        json out = json::array();
        for (const auto& p : f.publish) out.push_back(p.str());
        j["publish"] = out;
    }
    return j;
}

FlagOverrides create_options_from_json(const json& j) {
    FlagOverrides f;
    if (!j.is_object()) bad("create options: expected an object, got " + j.dump());
    if (const json* v = find(j, "hidepid")) {
        std::int64_t h = integer(*v, "hidepid");
        if (auto why = hidepid_problem(h)) bad("hidepid " + std::to_string(h) + ": " + *why);
        f.hidepid = static_cast<int>(h);
    }
    if (const json* v = find(j, "audit")) {
        if (!v->is_boolean()) bad("audit: expected true or false, got " + v->dump());
        f.audit = v->get<bool>();
    }
    if (const json* v = find(j, "user")) {
        std::string u = text(*v, "user");
        auto parsed = parse_user(u);
        if (!parsed) bad("user '" + u + "': expected UID[:GID] with numeric ids (e.g. 1001:1001)");
        f.user = *parsed;
    }
    if (const json* v = find(j, "labels")) {
        if (!v->is_object()) bad("labels: expected an object of strings, got " + v->dump());
        for (const auto& [k, val] : v->items()) {
            if (k.empty() || k.find('=') != std::string::npos)
                bad("label '" + k + "': a key must be non-empty, without '='");
            f.labels[k] = text(val, "labels");
        }
    }
    if (const json* v = find(j, "ttl_ms")) f.ttl = lifetime(*v, "ttl_ms");
    if (const json* v = find(j, "idle_timeout_ms"))
        f.idle_timeout = lifetime(*v, "idle_timeout_ms");
    if (const json* v = find(j, "cpus")) {
        if (!v->is_number()) bad("cpus: expected a number, got " + v->dump());
        double cpus = v->get<double>();
        if (!(cpus > 0 && cpus <= 4096)) bad("cpus " + std::to_string(cpus) + ": must be positive");
        f.cpus = cpus;
    }
    if (const json* v = find(j, "memory")) {
        if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<std::int64_t>() >= 0))
            bad("memory: expected a number of bytes, got " + v->dump());
        f.memory = v->get<std::uint64_t>();
        if (*f.memory == 0) bad("memory 0: must be positive");
    }
    if (const json* v = find(j, "network")) {
        std::string n = text(*v, "network");
        if (n != "none")
            bad("network '" + n + "': expected none (a policy is given by allow and deny)");
        f.network_none = true;
    }
    if (const json* v = find(j, "allow")) f.allow = destinations(*v, "allow");
    if (const json* v = find(j, "deny")) f.deny = destinations(*v, "deny");
    if (const json* v = find(j, "publish")) f.publish = published(*v);
    return f;
}

}  // namespace sandweave
