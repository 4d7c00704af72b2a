#pragma once
// What every verb shares: the global options, the connection, and output. Verbs
// print data to stdout (one JSON document with --json) and nothing else; logs and
// progress go to stderr through the library's logger.

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "lib/core/process.hpp"
#include "lib/sandbox/sandbox.hpp"
#include "lib/store/state.hpp"

namespace sandweave::cli {

struct GlobalOptions {
    bool json = false;
    std::string state_dir;
    std::string host = "local";
    std::string runsc;
    int verbosity = 0;  // -v: debug, -q: only errors
    bool quiet = false;
};

// Set by a verb's callback; main() exits with it.
struct Outcome {
    int exit_code = 0;
    // run's failures map to 125 (Docker) instead of 1.
    bool docker_exit_codes = false;
};

// The library objects for one invocation (local connection).
class Session {
  public:
    explicit Session(const GlobalOptions& g);
    StateStore& store() { return *store_; }
    CommandRunner& runner() { return runner_; }
    Context& ctx() { return *ctx_; }

  private:
    LocalRunner runner_;
    LocalHost host_;
    std::unique_ptr<StateStore> store_;
    std::unique_ptr<Context> ctx_;
};

void print_json(const nlohmann::json& j);
void print_line(const std::string& s);

// Adds --json, --state-dir, --host, --runsc, -v, -q to a (sub)command.
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

// Shared by create and run: the create flags.
struct CreateFlags {
    std::string template_ref = "base";
    std::string hidepid;
    bool audit = false;
    bool no_audit = false;
    std::string name;
    std::string user;
    std::vector<std::string> labels;
    std::string from_snapshot;
};
void add_create_flags(CLI::App& sub, CreateFlags& f, bool with_user = true);
CreateRequest to_create_request(const CreateFlags& f);

}  // namespace sandweave::cli
