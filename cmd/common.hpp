#pragma once
// What every verb shares: the global options, the connection, and output. A
// verb turns its flags into an API request, calls the connection's Api, and
// prints the result: data on stdout (one JSON document with --json), nothing
// else; logs and progress go to stderr through the library's logger. Errors
// are thrown and turned into exit codes in one place, main().

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "lib/api/api.hpp"
#include "lib/core/fd.hpp"

namespace sandweave::cli {

struct GlobalOptions {
    bool json = false;
    std::string state_dir;
    std::string host = "local";
    std::string runsc;
    int verbosity = 0;  // -v: debug, -q: only errors
    bool quiet = false;
    bool progress = false;  // --progress: also when stderr is not a terminal
    // ssh:// connections
    std::string identity, known_hosts, ssh_config, remote_binary = "sandweave";
    bool accept_new_host_key = false;
    std::string connect_timeout = "10s";
    // weave:// connections
    std::string weave_fingerprint, weave_token_file, weave_known_hosts, weave_munge_socket;
    bool weave_munge = false;
};

// Set by a verb's callback; main() exits with it.
struct Outcome {
    int exit_code = 0;
    // run's failures map to 125 (Docker) instead of 1.
    bool docker_exit_codes = false;
};

// The connection for one invocation: `local` calls the API in-process;
// `ssh://[user@]host[:port]` speaks it to `sandweave serve --stdio` on the
// worker; `weave://host[:port]` to a `sandweave controller` over TLS.
class Session {
  public:
    // `caller`: who makes the requests (serve answers a remote client).
    explicit Session(const GlobalOptions& g, api::Caller caller = api::Caller::this_host);
    ~Session();
    api::Api& api() { return *api_; }
    bool remote() const { return !remote_url_.empty(); }
    const std::string& remote_url() const { return remote_url_; }
    // The worker's "sandweave VERSION" from the handshake (remote only).
    std::string server_name() const;
    // The protocol version both ends speak (remote only; 0 locally).
    int protocol() const;

  private:
    struct Local;
    struct Remote;
    void connect_weave(const GlobalOptions& g);
    std::unique_ptr<Local> local_;
    std::unique_ptr<Remote> remote_;
    std::unique_ptr<api::Api> api_;
    std::string remote_url_;
};

// For a server verb: blocks SIGINT, SIGTERM and SIGHUP in this thread, so
// every thread it starts inherits the mask, and returns a signalfd that
// becomes readable when one arrives.
Fd stop_signals_fd();

void print_json(const nlohmann::json& j);
void print_line(const std::string& s);
// "  (missing on w2, w3)" for an entry a controller's workers do not all have.
std::string missing_on(const std::optional<std::vector<std::string>>& nodes);

// Adds --json, --state-dir, --host, --runsc, -v, -q.
void add_global_options(CLI::App& app, GlobalOptions& g);

// Registration, one per verb (cmd/<verb>.cpp).
void register_create(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_run(CLI::App& app, GlobalOptions& g, Outcome& out, std::vector<std::string>& command);
void register_sandbox_verbs(CLI::App& app, GlobalOptions& g,
                            Outcome& out);  // ls inspect terminate rm prune
void register_template(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_image(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_doctor(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_audit(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_snapshot(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_pool(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_serve(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_controller(CLI::App& app, GlobalOptions& g, Outcome& out);     // controller.cpp
void register_worker(CLI::App& app, GlobalOptions& g, Outcome& out);         // worker.cpp
void register_process_verbs(CLI::App& app, GlobalOptions& g, Outcome& out);  // ps logs kill wait
void register_desktop(CLI::App& app, GlobalOptions& g, Outcome& out);        // desktop.cpp
void register_version(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_completion(CLI::App& app, GlobalOptions& g, Outcome& out);
void register_cp(CLI::App& app, GlobalOptions& g, Outcome& out);     // cp.cpp
void register_batch(CLI::App& app, GlobalOptions& g, Outcome& out);  // batch.cpp
void register_e2b(CLI::App& app, GlobalOptions& g, Outcome& out);    // e2b.cpp
// `sandweave __complete -- WORDS...`: what the completion scripts ask (cmd/completion.cpp).
int run_completion_query(CLI::App& app, const std::vector<std::string>& words);

// Shared by create, run and pool create: the create flags.
struct CreateFlags {
    std::string template_ref = "base";
    std::string hidepid;
    bool audit = false;
    bool no_audit = false;
    std::string name;
    std::string user;
    std::vector<std::string> labels;
    std::string from_snapshot;
    std::string ttl;
    std::string idle_timeout;
    std::string cpus, memory;
    std::string network;
    std::vector<std::string> allow, deny;
    std::vector<std::string> publish;
};
// `with_publish`: --publish, which a pool's members cannot take.
void add_create_flags(CLI::App& sub, CreateFlags& f, bool with_user = true,
                      bool with_publish = true);
// `sub` tells which flags were given explicitly (a default template is not).
api::CreateParams to_create_params(const CreateFlags& f, const CLI::App& sub);

// Checks a UID[:GID] flag value, in the flag's words.
void check_user_flag(const std::string& flag, const std::string& value);

}  // namespace sandweave::cli
