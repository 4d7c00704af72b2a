// The HTTP server: routes, limits and error answers (docs/e2b.md).
#include <httplib.h>
#include <poll.h>
#include <signal.h>

#include <chrono>

#include "lib/core/error.hpp"
#include "lib/core/log.hpp"
#include "lib/e2b/connections.hpp"
#include "lib/e2b/e2b.hpp"
#include "lib/e2b/internal.hpp"
#include "lib/e2b/wire.hpp"

namespace sandweave::e2b {

using nlohmann::json;

namespace {

void error_body(httplib::Response& res, Plane plane, int status, const std::string& message,
                const std::string& connect_code) {
    json j;
    if (plane == Plane::stream) {
        res.status = 200;
        res.set_content(end_stream(connect_code.empty() ? "internal" : connect_code, message),
                        "application/connect+json");
        return;
    }
    if (plane == Plane::rpc) {
        std::string code = connect_code.empty() ? "internal" : connect_code;
        res.status = connect_http_status(code);
        j = {{"code", code}, {"message", message}};
    } else {
        res.status = status;
        j = {{"code", status}, {"message", message}};
    }
    res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

}  // namespace

void guarded(httplib::Response& res, Plane plane, const std::function<void()>& fn) {
    try {
        fn();
    } catch (const HttpError& e) {
        error_body(res, plane, e.status, e.message, e.connect_code);
    } catch (const Error& e) {
        try {
            fail_from(e, plane != Plane::control);
        } catch (const HttpError& h) {
            error_body(res, plane, h.status, h.message, h.connect_code);
        }
    } catch (const json::exception& e) {
        // A field of the wrong type, read with a default (value()).
        error_body(res, plane, 400, std::string("malformed request: ") + e.what(),
                   "invalid_argument");
    } catch (const std::exception& e) {
        error_body(res, plane, 500, std::string("internal error: ") + e.what(), "internal");
    }
}

std::optional<std::int64_t> connect_timeout_ms(const httplib::Request& req) {
    std::string deadline = req.get_header_value("Connect-Timeout-Ms");
    if (deadline.empty()) return std::nullopt;
    try {
        auto ms = std::stoll(deadline);
        if (ms > 0) return ms;
    } catch (...) {
        fail(400, "Connect-Timeout-Ms: not a number", "invalid_argument");
    }
    return std::nullopt;
}

json request_message(const httplib::Request& req, const std::string& body, std::size_t max) {
    std::string why;
    std::optional<json> j;
    if (req.get_header_value("Content-Type").rfind("application/connect+json", 0) == 0)
        j = decode_stream_request(body, max, why);
    else
        j = decode_json_object(body, max, why);
    if (!j) fail(400, why, "invalid_argument");
    return *j;
}

Server::Server(api::Api& a, const ServeOptions& o) : api(a), opts(o), keys(o.keys) {}

Server::~Server() {
    std::vector<std::string> sandboxes;
    {
        std::lock_guard<std::mutex> lock(proc_mu_);
        for (auto& [pid, p] : procs_) sandboxes.push_back(p->sandbox);
    }
    for (auto& s : sandboxes) forget_processes(s);
    std::unique_lock<std::mutex> lock(runners_mu);
    runners_cv.wait_for(lock, std::chrono::seconds(30), [&] { return runners == 0; });
}

void Server::post(httplib::Server& http, const std::string& pattern, Plane plane, BodyHandler h) {
    http.Post(pattern, [this, plane, h](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
        guarded(res, plane, [&] {
            std::string body;
            bool over = false;
            if (req.is_multipart_form_data())
                fail(415, "multipart is only for /files", "invalid_argument");
            std::string length = req.get_header_value("Content-Length");
            if (!length.empty() && (length.size() > 18 || std::stoull(length) > opts.max_body))
                fail(413, "request body over " + std::to_string(opts.max_body) + " bytes",
                     "resource_exhausted");
            bool ok = reader([&](const char* d, std::size_t n) {
                if (body.size() + n > opts.max_body) {
                    over = true;
                    return false;
                }
                body.append(d, n);
                return true;
            });
            if (over)
                fail(413, "request body over " + std::to_string(opts.max_body) + " bytes",
                     "resource_exhausted");
            if (!ok) fail(400, "reading the request body failed", "invalid_argument");
            h(req, res, body);
        });
    });
}

void Server::get(httplib::Server& http, const std::string& pattern, Plane plane, BodyHandler h) {
    http.Get(pattern, [plane, h](const httplib::Request& req, httplib::Response& res) {
        guarded(res, plane, [&] { h(req, res, ""); });
    });
}

void Server::del(httplib::Server& http, const std::string& pattern, Plane plane, BodyHandler h) {
    http.Delete(pattern, [plane, h](const httplib::Request& req, httplib::Response& res,
                                    const httplib::ContentReader&) {
        guarded(res, plane, [&] { h(req, res, ""); });
    });
}

SandboxView Server::envd_sandbox(const httplib::Request& req) {
    std::string id = req.get_header_value("E2b-Sandbox-Id");
    if (id.empty()) fail(400, "missing E2b-Sandbox-Id header", "invalid_argument");
    std::string token = req.get_header_value("X-Access-Token");
    if (token.empty()) fail(401, "missing X-Access-Token header", "unauthenticated");
    // The token is checked first: without it, nothing says whether `id` exists.
    if (!keys.token_matches(id, token)) fail(401, "invalid access token", "unauthenticated");
    // A sandbox seen running in the last second is taken as running: each
    // command would otherwise pay an inspect (a runtime state query) first.
    // One that stopped meanwhile fails in the call itself, with its error.
    auto now = std::chrono::steady_clock::now();
    {
        std::lock_guard<std::mutex> lock(seen_mu_);
        auto it = seen_.find(id);
        if (it != seen_.end() && now - it->second.first < std::chrono::seconds(1))
            return it->second.second;
    }
    SandboxView v;
    try {
        v = api.inspect(api::IdParams{id});
    } catch (const Error& e) {
        if (e.code() == ErrorCode::not_found || e.code() == ErrorCode::usage)
            fail(502, "sandbox \"" + id + "\" not found", "unavailable");
        fail_from(e, true);
    }
    if (v.live != SandboxState::running || !v.record.spec.labels.count(owner_label))
        fail(502, "sandbox \"" + id + "\" is not running", "unavailable");
    std::lock_guard<std::mutex> lock(seen_mu_);
    if (seen_.size() > 4096) seen_.clear();
    seen_[id] = {now, v};
    return v;
}

std::optional<std::string> Server::envd_user(const httplib::Request& req) {
    try {
        return basic_user(req.get_header_value("Authorization"));
    } catch (const Error& e) {
        fail(400, e.what(), "invalid_argument");
    }
}

std::vector<std::string> Server::sandbox_env(const SandboxView& v) {
    std::vector<std::string> env;
    std::string prefix = env_label_prefix;
    for (const auto& [k, val] : v.record.spec.labels)
        if (k.rfind(prefix, 0) == 0) env.push_back(k.substr(prefix.size()) + "=" + val);
    return env;
}

void Server::install_envd(httplib::Server& http) {
    get(http, "/health", Plane::envd,
        [this](const httplib::Request& req, httplib::Response& res, const std::string&) {
            envd_sandbox(req);
            res.status = 204;
        });
    post(http, R"(/process\.Process/([A-Za-z]+))", Plane::rpc,
         [this](const httplib::Request& req, httplib::Response& res, const std::string& body) {
             process_rpc(req.matches[1], req, res, body);
         });
    post(http, R"(/filesystem\.Filesystem/([A-Za-z]+))", Plane::rpc,
         [this](const httplib::Request& req, httplib::Response& res, const std::string& body) {
             filesystem_rpc(req.matches[1], req, res, body);
         });
    install_files(http);
}

void Server::install(httplib::Server& http) {
    install_control(http);
    install_envd(http);
    // Anything else, without reading its body.
    auto nothing = [](const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader&) {
        error_body(res, Plane::control, 404, req.method + " " + req.path + ": no such endpoint",
                   "");
    };
    http.Post(".*", nothing);
    http.Put(".*", nothing);
    http.Patch(".*", nothing);
    http.Delete(".*", nothing);
    http.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        error_body(res, Plane::control, res.status,
                   res.status == 404 ? req.method + " " + req.path + ": no such endpoint"
                                     : "request refused (HTTP " + std::to_string(res.status) + ")",
                   "");
    });
}

void serve(api::Api& api, const ServeOptions& o, int stop_fd) {
    // A command that ends before its stdin is written must not kill the server.
    ::signal(SIGPIPE, SIG_IGN);
    Server server(api, o);
    ConnectionLimits limits;
    limits.max = o.threads;
    limits.idle = o.idle_timeout;
    limits.io = o.io_timeout;
    BoundedServer http(limits);
    http.set_payload_max_length(o.max_body);
    http.set_keep_alive_max_count(1000);
    // A stream's frames are small writes: without this, each waits for the
    // client's delayed ACK of the one before (Nagle).
    http.set_tcp_nodelay(true);
    server.install(http);
    int port = o.port == 0 ? http.bind_to_any_port(o.host)
                           : (http.bind_to_port(o.host, o.port) ? o.port : -1);
    if (port < 0)
        throw Error(ErrorCode::general,
                    "e2b: cannot listen on " + o.host + ":" + std::to_string(o.port));
    http.set_backlog(1024);
    if (o.on_listening) o.on_listening(port);
    std::thread loop([&] { http.listen_after_bind(); });
    // The reaper: E2B timeouts, every few seconds, until stop_fd fires.
    for (;;) {
        pollfd p{stop_fd, POLLIN, 0};
        int n = ::poll(&p, 1, 2000);
        if (n > 0) break;
        server.reap_expired();
    }
    http.close_idle();
    http.stop();
    loop.join();
}

}  // namespace sandweave::e2b
