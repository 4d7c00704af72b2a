// E2B's control plane: sandboxes as an identity sees them.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <ctime>

#include "lib/core/error.hpp"
#include "lib/core/log.hpp"
#include "lib/e2b/internal.hpp"
#include "lib/e2b/wire.hpp"

namespace sandweave::e2b {

using nlohmann::json;

namespace {

std::int64_t now_ms() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string rfc3339_ms(std::int64_t ms) {
    std::time_t t = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[40];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    char out[48];
    std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms % 1000));
    return out;
}

std::int64_t timeout_seconds(const json& body, const char* key, std::int64_t dflt) {
    if (!body.contains(key) || body[key].is_null()) return dflt;
    if (!body[key].is_number_integer()) fail(400, std::string(key) + ": expected whole seconds");
    auto t = body[key].get<std::int64_t>();
    if (t < 0 || t > max_timeout_s)
        fail(400,
             std::string(key) + ": expected 0 to " + std::to_string(max_timeout_s) + " seconds");
    return t;
}

json body_of(const std::string& text, std::size_t max) {
    std::string why;
    auto j = decode_json_object(text, max, why);
    if (!j) fail(400, why);
    return *j;
}

void reply(httplib::Response& res, int status, const json& j) {
    res.status = status;
    res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

bool running(const SandboxView& v) {
    return v.live == SandboxState::running || v.live == SandboxState::creating ||
           v.live == SandboxState::pending;
}

}  // namespace

void fail(int status, const std::string& message, const std::string& connect_code) {
    throw HttpError{status, message, connect_code};
}

void fail_from(const Error& e, bool data_plane) {
    switch (e.code()) {
        case ErrorCode::not_found:
            fail(404, e.what(), "not_found");
        case ErrorCode::usage:
            fail(400, e.what(), "invalid_argument");
        case ErrorCode::connection:
            fail(data_plane ? 502 : 503, e.what(), "unavailable");
        default:
            fail(500, e.what(), "internal");
    }
}

std::string Server::identity(const httplib::Request& req) {
    std::string key = req.get_header_value("X-API-KEY");
    if (key.empty()) fail(401, "missing X-API-KEY header");
    auto who = keys.identity_of(key);
    if (!who) fail(401, "invalid API key");
    return *who;
}

SandboxView Server::owned(const std::string& id, const std::string& who) {
    SandboxView v;
    try {
        v = api.inspect(api::IdParams{id});
    } catch (const Error& e) {
        if (e.code() == ErrorCode::not_found || e.code() == ErrorCode::usage)
            fail(404, "sandbox \"" + id + "\" not found");
        fail_from(e, false);
    }
    auto o = v.record.spec.labels.find(owner_label);
    if (o == v.record.spec.labels.end() || o->second != who || !running(v))
        fail(404, "sandbox \"" + id + "\" not found");
    return v;
}

std::optional<std::int64_t> Server::end_ms(const SandboxView& v) {
    {
        std::lock_guard<std::mutex> lock(end_mu_);
        auto it = end_override_.find(v.record.id);
        if (it != end_override_.end()) return it->second;
    }
    auto l = v.record.spec.labels.find(end_label);
    if (l == v.record.spec.labels.end()) return std::nullopt;
    try {
        return std::stoll(l->second);
    } catch (...) {
        return std::nullopt;
    }
}

void Server::set_end(const std::string& id, std::int64_t ms) {
    std::lock_guard<std::mutex> lock(end_mu_);
    end_override_[id] = ms;
}

std::int64_t created_ms(const SandboxView& v) {
    std::tm tm{};
    if (!strptime(v.record.created_at.c_str(), "%Y-%m-%dT%H:%M:%S", &tm)) return now_ms();
    return static_cast<std::int64_t>(timegm(&tm)) * 1000;
}

json Server::describe(const SandboxView& v, bool with_token) {
    const auto& r = v.record;
    json meta = json::object();
    auto listed_at = r.spec.labels.find(metadata_keys_label);
    json listed = listed_at == r.spec.labels.end()
                      ? json()
                      : json::parse(listed_at->second, nullptr, /*allow_exceptions=*/false);
    if (listed.is_array()) {
        for (const auto& k : listed)
            if (k.is_string() && r.spec.labels.count(k.get<std::string>()))
                meta[k.get<std::string>()] = r.spec.labels.at(k.get<std::string>());
    } else {  // made before the keys were kept: every label not sandweave's
        for (const auto& [k, val] : r.spec.labels)
            if (k.rfind(label_prefix, 0) != 0) meta[k] = val;
    }
    auto tmpl = r.spec.labels.count(template_label) ? r.spec.labels.at(template_label)
                                                    : r.spec.template_name;
    std::int64_t started = created_ms(v);
    json j = {{"sandboxID", r.id},
              {"templateID", tmpl},
              {"clientID", "sandweave"},
              {"envdVersion", envd_version},
              {"startedAt", rfc3339_ms(started)},
              {"endAt", rfc3339_ms(end_ms(v).value_or(started + default_timeout_s * 1000))},
              {"cpuCount", static_cast<int>(r.spec.resources.cpus.value_or(1))},
              {"memoryMB", static_cast<std::int64_t>(r.spec.resources.memory.value_or(0) >> 20)},
              {"diskSizeMB", 0},
              {"metadata", meta},
              {"state", "running"}};
    if (!r.name.empty() && r.name != r.id) j["alias"] = r.name;
    if (with_token) {
        j["envdAccessToken"] = keys.token_for(r.id);
        j["domain"] = nullptr;
    }
    return j;
}

void Server::reap_expired() {
    api::SandboxList all;
    try {
        all = api.ls(api::LsParams{{"label=" + std::string(owner_label)}});
    } catch (const Error& e) {
        log().warn("e2b: listing sandboxes for their timeouts: " + std::string(e.what()));
        return;
    }
    std::int64_t now = now_ms();
    for (const auto& v : all.sandboxes) {
        auto end = end_ms(v);
        // A sandbox that stopped by itself (its 24 h ttl, a crash) is removed
        // too, but only well after its create: while a create is under way
        // its live state may not say running yet.
        bool stopped = !running(v) && v.live != SandboxState::creating &&
                       v.live != SandboxState::pending && created_ms(v) + 120000 < now;
        if (!stopped && (!end || *end > now)) continue;
        try {
            if (!stopped) api.terminate(api::IdParams{v.record.id});
            api.rm(api::IdParams{v.record.id});
            forget_processes(v.record.id);
            log().info("e2b: sandbox " + v.record.id + (stopped ? " had stopped" : " timed out") +
                       ": removed");
        } catch (const Error& e) {
            log().warn("e2b: removing timed-out sandbox " + v.record.id + ": " + e.what());
        }
    }
}

void Server::install_control(httplib::Server& http) {
    auto create = [this](const httplib::Request& req, httplib::Response& res,
                         const std::string& text) {
        std::string who = identity(req);
        json body = body_of(text, opts.max_body);
        if (!body.contains("templateID") || !body["templateID"].is_string() ||
            body["templateID"].get<std::string>().empty())
            fail(400, "templateID: expected a template name");
        api::CreateParams p;
        p.template_ref = body["templateID"].get<std::string>();
        // A template is a name the worker knows, never a path on this host.
        if (p.template_ref->find('/') != std::string::npos || (*p.template_ref)[0] == '.')
            fail(400, "templateID: expected a template name");
        if (body.contains("metadata") && !body["metadata"].is_null()) {
            if (!body["metadata"].is_object()) fail(400, "metadata: expected an object of strings");
            for (const auto& [k, v] : body["metadata"].items()) {
                if (!v.is_string()) fail(400, "metadata." + k + ": expected a string");
                if (k.rfind(label_prefix, 0) == 0)
                    fail(400, "metadata." + k + ": the prefix e2b. is sandweave's own");
                p.labels[k] = v.get<std::string>();
            }
        }
        json metadata_keys = json::array();
        for (const auto& [k, v] : p.labels) metadata_keys.push_back(k);
        p.labels[metadata_keys_label] = metadata_keys.dump();
        if (body.contains("envVars") && !body["envVars"].is_null()) {
            if (!body["envVars"].is_object()) fail(400, "envVars: expected an object of strings");
            for (const auto& [k, v] : body["envVars"].items()) {
                if (!v.is_string()) fail(400, "envVars." + k + ": expected a string");
                if (k.empty() || k.find('=') != std::string::npos)
                    fail(400, "envVars: '" + k + "' is not a variable name");
                p.labels[env_label_prefix + k] = v.get<std::string>();
            }
        }
        for (const char* unsupported : {"autoPause", "volumeMounts", "mcp", "network"})
            if (body.contains(unsupported) && !body[unsupported].is_null() &&
                !(body[unsupported].is_boolean() && !body[unsupported].get<bool>()))
                fail(400, std::string(unsupported) + " is not supported by sandweave's E2B API");
        std::int64_t timeout = timeout_seconds(body, "timeout", default_timeout_s);
        p.labels[owner_label] = who;
        p.labels[template_label] = *p.template_ref;
        p.labels[end_label] = std::to_string(now_ms() + timeout * 1000);
        // The sandbox's own ttl is E2B's longest session: it ends even when
        // this server is not running; the E2B timeout is this server's.
        p.ttl_ms = max_timeout_s * 1000;
        SandboxView v;
        try {
            v = api.create(p);
        } catch (const Error& e) {
            if (e.code() == ErrorCode::not_found)
                fail(404, "template '" + *p.template_ref + "' not found: " + e.what());
            fail_from(e, false);
        }
        reply(res, 201, describe(v, true));
    };
    post(http, "/v2/sandboxes", Plane::control, create);
    post(http, "/sandboxes", Plane::control, create);

    auto list = [this](const httplib::Request& req, httplib::Response& res, bool paged) {
        std::string who = identity(req);
        std::vector<std::pair<std::string, std::string>> meta;
        if (req.has_param("metadata")) {
            auto m = parse_metadata_query(req.get_param_value("metadata"));
            if (!m) fail(400, "metadata: expected key=value pairs");
            meta = *m;
        }
        bool want_running = true;
        if (req.has_param("state")) {
            want_running = false;
            for (std::size_t i = 0; i < req.get_param_value_count("state"); ++i) {
                std::string s = req.get_param_value("state", i);
                for (std::size_t pos = 0; pos <= s.size();) {
                    auto c = s.find(',', pos);
                    std::string one = s.substr(pos, c == std::string::npos ? c : c - pos);
                    if (one == "running")
                        want_running = true;
                    else if (one != "paused")
                        fail(400, "state: expected running or paused");
                    if (c == std::string::npos) break;
                    pos = c + 1;
                }
            }
        }
        std::size_t limit = 100;
        if (req.has_param("limit")) {
            try {
                long l = std::stol(req.get_param_value("limit"));
                if (l < 1 || l > 1000) throw 0;
                limit = static_cast<std::size_t>(l);
            } catch (...) {
                fail(400, "limit: expected 1 to 1000");
            }
        }
        std::vector<std::string> filter = {"label=" + std::string(owner_label) + "=" + who,
                                           "state=running"};
        for (const auto& [k, v] : meta) filter.push_back("label=" + k + "=" + v);
        api::SandboxList all;
        try {
            all = api.ls(api::LsParams{filter});
        } catch (const Error& e) {
            fail_from(e, false);
        }
        std::vector<SandboxView> rows;
        if (want_running)
            for (auto& v : all.sandboxes)
                if (running(v)) rows.push_back(std::move(v));
        // Oldest first, ties by id: a stable order for the page token.
        std::sort(rows.begin(), rows.end(), [](const SandboxView& a, const SandboxView& b) {
            return std::tie(a.record.created_at, a.record.id) <
                   std::tie(b.record.created_at, b.record.id);
        });
        std::size_t from = 0;
        if (paged && req.has_param("nextToken")) {
            std::string tok = req.get_param_value("nextToken");
            auto bar = tok.find('|');
            if (bar == std::string::npos) fail(400, "nextToken: not a token of this server");
            std::pair<std::string, std::string> after{tok.substr(0, bar), tok.substr(bar + 1)};
            while (from < rows.size() &&
                   std::tie(rows[from].record.created_at, rows[from].record.id) <=
                       std::tie(after.first, after.second))
                ++from;
        }
        json out = json::array();
        std::size_t to = paged ? std::min(rows.size(), from + limit) : rows.size();
        for (std::size_t i = from; i < to; ++i) out.push_back(describe(rows[i], false));
        if (paged && to < rows.size())
            res.set_header("x-next-token",
                           rows[to - 1].record.created_at + "|" + rows[to - 1].record.id);
        reply(res, 200, out);
    };
    get(http, "/v2/sandboxes", Plane::control,
        [list](const httplib::Request& q, httplib::Response& s, const std::string&) {
            list(q, s, true);
        });
    get(http, "/sandboxes", Plane::control,
        [list](const httplib::Request& q, httplib::Response& s, const std::string&) {
            list(q, s, false);
        });

    get(http, R"(/sandboxes/([^/]+))", Plane::control,
        [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
            std::string who = identity(req);
            reply(res, 200, describe(owned(req.matches[1], who), false));
        });
    del(http, R"(/sandboxes/([^/]+))", Plane::control,
        [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
            std::string who = identity(req);
            SandboxView v = owned(req.matches[1], who);
            try {
                api.terminate(api::IdParams{v.record.id});
                api.rm(api::IdParams{v.record.id});
            } catch (const Error& e) {
                fail_from(e, false);
            }
            forget_processes(v.record.id);
            res.status = 204;
        });
    post(http, R"(/sandboxes/([^/]+)/timeout)", Plane::control,
         [this](const httplib::Request& req, httplib::Response& res, const std::string& text) {
             std::string who = identity(req);
             SandboxView v = owned(req.matches[1], who);
             json body = body_of(text, opts.max_body);
             if (!body.contains("timeout")) fail(400, "timeout: required");
             set_end(v.record.id, now_ms() + timeout_seconds(body, "timeout", 0) * 1000);
             res.status = 204;
         });
    auto connect = [this](const httplib::Request& req, httplib::Response& res,
                          const std::string& text) {
        std::string who = identity(req);
        SandboxView v = owned(req.matches[1], who);
        json body = body_of(text, opts.max_body);
        if (body.contains("timeout") && !body["timeout"].is_null()) {
            // As E2B: connecting never shortens a running sandbox's life.
            std::int64_t want = now_ms() + timeout_seconds(body, "timeout", 0) * 1000;
            if (want > end_ms(v).value_or(0)) set_end(v.record.id, want);
        }
        reply(res, 200, describe(v, true));
    };
    post(http, R"(/v2/sandboxes/([^/]+)/connect)", Plane::control, connect);
    post(http, R"(/sandboxes/([^/]+)/connect)", Plane::control, connect);
    auto unsupported = [this](const std::string& what) {
        return [this, what](const httplib::Request& req, httplib::Response&, const std::string&) {
            std::string who = identity(req);
            owned(req.matches[1], who);
            fail(501, what +
                          " is not supported by sandweave's E2B API: a sandweave memory snapshot "
                          "restores as a new sandbox with a new id, and E2B resumes the same id "
                          "(see docs/e2b.md); the sandbox keeps running");
        };
    };
    post(http, R"(/sandboxes/([^/]+)/pause)", Plane::control, unsupported("pause"));
    post(http, R"(/sandboxes/([^/]+)/resume)", Plane::control, unsupported("resume"));
    get(http, R"(/sandboxes/([^/]+)/metrics)", Plane::control, unsupported("metrics"));

    // sandweave's own: the protected audit log, with its status.
    get(http, R"(/sandboxes/([^/]+)/audit/status)", Plane::control,
        [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
            std::string who = identity(req);
            SandboxView v = owned(req.matches[1], who);
            try {
                reply(res, 200,
                      api::Codec<audit::Status>::encode(
                          api.audit_status(api::IdParams{v.record.id})));
            } catch (const Error& e) {
                fail_from(e, false);
            }
        });
    get(http, R"(/sandboxes/([^/]+)/audit)", Plane::control,
        [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
            std::string who = identity(req);
            SandboxView v = owned(req.matches[1], who);
            // The status describes the bytes only once they are all read, so the
            // log is gathered first and sent with its status in one JSON body.
            std::string log;
            audit::Status st;
            try {
                st = api.audit_fetch(api::IdParams{v.record.id}, [&](std::string_view d) {
                    if (log.size() + d.size() > (std::size_t{1} << 30))
                        throw Error(ErrorCode::general,
                                    "the audit log is over 1 GiB: use sandweave audit export");
                    log.append(d);
                });
            } catch (const Error& e) {
                fail_from(e, false);
            }
            json out = {{"status", api::Codec<audit::Status>::encode(st)}, {"jsonl", log}};
            reply(res, 200, out);
        });
}

}  // namespace sandweave::e2b
