#pragma once
// What the E2B server's parts share (lib/e2b/*.cpp): the Api, the keys, the
// E2B view of a sandbox, and the processes started through envd's Start.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/api/api.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/process.hpp"
#include "lib/e2b/e2b.hpp"
#include "lib/e2b/keys.hpp"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace sandweave::e2b {

// Labels sandweave's E2B API keeps on a sandbox (users' metadata may not use
// the prefix).
inline constexpr const char* label_prefix = "e2b.";
inline constexpr const char* owner_label = "e2b.owner";
inline constexpr const char* end_label = "e2b.end_at_ms";
inline constexpr const char* env_label_prefix = "e2b.env.";
inline constexpr const char* template_label = "e2b.template";
// The keys of the creator's metadata (a JSON list): a connection may add
// labels of its own (weave:// adds its job and owner), which are not E2B
// metadata.
inline constexpr const char* metadata_keys_label = "e2b.metadata_keys";
// What the SDK compares to unlock features. 2.51.0's gates: 0.6.3 opens
// WatchDir's includeEntry (implemented) and 0.6.2 file metadata (refused
// with an error, see install_files); 0.6.4's network-mount watches stay shut.
inline constexpr const char* envd_version = "0.6.3";
inline constexpr std::int64_t default_timeout_s = 300;
inline constexpr std::int64_t max_timeout_s = 86400;  // E2B's longest session

// An error the HTTP layer turns into E2B's body {"code": N, "message": M}
// (control plane) or Connect's {"code": C, "message": M} (data plane).
struct HttpError {
    int status;
    std::string message;
    std::string connect_code;  // data plane
};
[[noreturn]] void fail(int status, const std::string& message,
                       const std::string& connect_code = "");
// An api Error as an HttpError: not_found 404, usage 400, else 500.
[[noreturn]] void fail_from(const Error& e, bool data_plane);

// Which answer an error gets: E2B's {"code": N, "message"} (control plane,
// /files, /health), Connect's {"code": "not_found", "message"} (unary RPC),
// or, for a server stream (Start, Connect, WatchDir), HTTP 200 and the
// end-of-stream frame {"error": {"code", "message"}}: the SDK reads a
// stream's non-200 status alone, as "unimplemented" (404) or "internal"
// (400), and never its body.
enum class Plane { control, rpc, envd, stream };
// Runs fn, turning what it throws into the plane's error answer.
void guarded(httplib::Response& res, Plane plane, const std::function<void()>& fn);

// The one message of a Connect request, as JSON: an envelope for
// `application/connect+json` (a stream), else a JSON object. A body that is
// neither is refused as a bad request (400), before any stream starts.
nlohmann::json request_message(const httplib::Request& req, const std::string& body,
                               std::size_t max);

// The request's Connect deadline (`Connect-Timeout-Ms`, the SDK's
// timeoutMs) in ms; nullopt when absent or not positive. Not a number: 400.
std::optional<std::int64_t> connect_timeout_ms(const httplib::Request& req);

// When the sandbox was created (Unix ms).
std::int64_t created_ms(const SandboxView& v);

// One command started by process.Process/Start, held by this server (not by
// the HTTP request), so it outlives its client's disconnect and Connect
// reattaches to it.
struct Process {
    std::uint32_t pid = 0;
    std::string sandbox;
    nlohmann::json config;  // ProcessConfig as given
    std::optional<std::string> tag;
    bool pty = false;
    RunControl control;
    std::mutex mu;
    std::condition_variable cv;
    Fd stdin_write;  // while stdin is open
    bool ended = false;
    nlohmann::json end_event;
    // Each attached stream's queue of events (JSON ProcessEvent), bounded:
    // the command waits while a queue is full (back pressure, not loss).
    struct Subscriber {
        std::deque<nlohmann::json> events;
        std::size_t bytes = 0;
        bool closed = false;
    };
    std::vector<std::shared_ptr<Subscriber>> subscribers;
};

class Server {
  public:
    Server(api::Api& api, const ServeOptions& o);
    ~Server();
    void install(httplib::Server& http);

    api::Api& api;
    const ServeOptions& opts;
    Keys keys;

    // ---- control plane (control.cpp) ----
    std::string identity(const httplib::Request& req);
    // The sandbox `id` if it exists, runs and belongs to `who`; else 404.
    SandboxView owned(const std::string& id, const std::string& who);
    nlohmann::json describe(const SandboxView& v, bool with_token);
    void reap_expired();
    std::optional<std::int64_t> end_ms(const SandboxView& v);
    void set_end(const std::string& id, std::int64_t ms);

    // ---- data plane (envd.cpp, files.cpp) ----
    // The sandbox the request is for, checked against its access token.
    SandboxView envd_sandbox(const httplib::Request& req);
    std::optional<std::string> envd_user(const httplib::Request& req);
    std::vector<std::string> sandbox_env(const SandboxView& v);
    void process_rpc(const std::string& method, const httplib::Request& req, httplib::Response& res,
                     const std::string& body);
    // process.Process/Start, a server stream; its errors are thrown, for
    // guarded(Plane::stream).
    void start_process(const SandboxView& sb, const httplib::Request& req, httplib::Response& res,
                       const nlohmann::json& in);
    void filesystem_rpc(const std::string& method, const httplib::Request& req,
                        httplib::Response& res, const std::string& body);
    // filesystem.Filesystem/WatchDir, a server stream (watch.cpp); its
    // errors are thrown, for guarded(Plane::stream).
    void watch_dir(const SandboxView& sb, const std::optional<std::string>& user,
                   const httplib::Request& req, httplib::Response& res, const nlohmann::json& in);
    void install_control(httplib::Server& http);
    void install_envd(httplib::Server& http);
    void install_files(httplib::Server& http);
    // Route helpers: every handler's errors become the plane's error body;
    // a body is read only up to max_body (uploads have their own limit).
    using BodyHandler =
        std::function<void(const httplib::Request&, httplib::Response&, const std::string& body)>;
    void post(httplib::Server& http, const std::string& pattern, Plane plane, BodyHandler h);
    void get(httplib::Server& http, const std::string& pattern, Plane plane, BodyHandler h);
    void del(httplib::Server& http, const std::string& pattern, Plane plane, BodyHandler h);
    // Processes whose runner thread has not returned (shutdown waits for them).
    std::mutex runners_mu;
    std::condition_variable runners_cv;
    int runners = 0;
    void forget_processes(const std::string& sandbox);
    std::atomic<bool> stopping{false};

    // A removed sandbox is no longer taken as running (envd_sandbox).
    void forget_seen(const std::string& id) {
        std::lock_guard<std::mutex> lock(seen_mu_);
        seen_.erase(id);
        no_bash_.erase(id);
    }
    // Sandboxes whose image was found to have no /bin/bash (process.cpp).
    bool lacks_bash(const std::string& id) {
        std::lock_guard<std::mutex> lock(seen_mu_);
        return no_bash_.count(id) > 0;
    }
    void note_no_bash(const std::string& id) {
        std::lock_guard<std::mutex> lock(seen_mu_);
        if (no_bash_.size() > 4096) no_bash_.clear();
        no_bash_.insert(id);
    }

  private:
    std::mutex seen_mu_;
    std::map<std::string, std::pair<std::chrono::steady_clock::time_point, SandboxView>> seen_;
    std::set<std::string> no_bash_;
    std::mutex end_mu_;
    std::map<std::string, std::int64_t> end_override_;
    std::mutex proc_mu_;
    std::map<std::uint32_t, std::shared_ptr<Process>> procs_;
    std::uint32_t next_pid_ = 1000;

    friend struct ProcessOps;
    std::shared_ptr<Process> find_process(const std::string& sandbox,
                                          const nlohmann::json& selector);
};

// envd's EntryInfo of a file (mode: st_mode; size: decimal, as envd's int64
// is JSON-encoded as a string; mtime: Unix seconds).
nlohmann::json entry_info(const std::string& path, unsigned mode, const std::string& size,
                          std::int64_t mtime, const std::string& owner, const std::string& group);

// A filesystem call's path parameter `key` of `in` (400 when missing or bad).
std::string path_param(const nlohmann::json& in, const char* key);
// argv of `/bin/sh -c BODY sh ARGS...` where BODY starts with $p, the first
// argument resolved against the user's home as envd does.
std::vector<std::string> path_script(const std::string& body, std::vector<std::string> args);

// Runs argv in a sandbox through the Api as `user`, collecting stdout and
// stderr (each at most `max` bytes); for the filesystem calls.
struct GuestResult {
    int exit_code = 0;
    std::string out, err;
};
GuestResult guest(api::Api& api, const std::string& id, const std::vector<std::string>& argv,
                  const std::optional<std::string>& user, std::size_t max = 16u << 20);

}  // namespace sandweave::e2b
