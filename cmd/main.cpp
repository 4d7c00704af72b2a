// sandweave: run untrusted code in gVisor sandboxes.
// main() builds the command line from each verb's registration function, runs it,
// and is the one place where errors become exit codes and messages.

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <string_view>

#include "cmd/common.hpp"
#include "cmd/progress.hpp"
#include "lib/audit/audit.hpp"
#include "lib/core/error.hpp"
#include "lib/core/host.hpp"
#include "lib/core/log.hpp"
#include "lib/core/units.hpp"
#include "lib/rpc/socket_relay.hpp"
#include "lib/runtime/shim.hpp"
#include "lib/sandbox/pool.hpp"

namespace sandweave::cli {
namespace {

class SpdLogger final : public Logger {
  public:
    explicit SpdLogger(std::shared_ptr<spdlog::logger> l) : l_(std::move(l)) {}
    void debug(const std::string& m) override {
        with_progress_hidden([&] { l_->debug("sandweave: " + m); });
    }
    void info(const std::string& m) override {
        with_progress_hidden([&] { l_->info(m); });
    }
    void warn(const std::string& m) override {
        with_progress_hidden([&] { l_->warn("sandweave: warning: " + m); });
    }
    void error(const std::string& m) override {
        with_progress_hidden([&] { l_->error("sandweave: " + m); });
    }

  private:
    std::shared_ptr<spdlog::logger> l_;
};

void setup_logging(const GlobalOptions& g) {
    // Thread-safe: `serve` logs from many request threads.
    auto logger = spdlog::stderr_logger_mt("sandweave");
    logger->set_pattern("%v");
    if (g.quiet)
        logger->set_level(spdlog::level::err);
    else if (g.verbosity > 0)
        logger->set_level(spdlog::level::debug);
    else
        logger->set_level(spdlog::level::info);
    set_logger(std::make_shared<SpdLogger>(logger));
}

// Whether `word` is one of `scope`'s own options that takes the next word as
// its value (`--host H`; not `--host=H`, not a flag).
bool takes_value(const CLI::App& scope, const std::string& word) {
    if (word.size() < 2 || word[0] != '-' || word.find('=') != std::string::npos) return false;
    for (const auto* opt : scope.get_options())
        if (opt->check_name(word)) return opt->get_expected_min() > 0;
    return false;
}

// Where the verb of `args` is: their first word that is neither an option
// nor a global option's value; args.size() when there is none or --help
// comes before it.
std::size_t verb_at(const CLI::App& app, const std::vector<std::string>& args) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "-h" || a == "--help" || a == "--help-all") return args.size();
        if (takes_value(app, a)) {
            ++i;
            continue;
        }
        if (!a.empty() && a[0] != '-') return i;
    }
    return args.size();
}

bool has_verb(CLI::App& app, const std::string& verb) {
    for (const auto* sub : app.get_subcommands({}))
        if (sub->check_name(verb)) return true;
    return false;
}

// The verb path of `args` must exist in the command tree that also produces
// --help, aliases included ("list" is "ls"); an unknown word at any level is
// refused with the closest verb of that level. Returns an error message, or
// "" when the words name commands.
std::string check_verbs(CLI::App& app, const std::vector<std::string>& args) {
    CLI::App* level = &app;
    std::string path;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        // A global option's value, or one of the verb's own (a verb with
        // options and subverbs: `controller --listen H:P`, `controller token`).
        if (takes_value(app, a) || takes_value(*level, a)) {
            ++i;  // its value
            continue;
        }
        if (a.empty() || a[0] == '-') continue;
        auto subs = level->get_subcommands({});
        if (subs.empty()) break;  // a leaf: the rest are its arguments
        CLI::App* next = nullptr;
        for (auto* sub : subs)
            if (sub->check_name(a)) next = sub;
        if (!next) {
            std::vector<std::string> known;
            for (const auto* sub : subs) {
                known.push_back(sub->get_name());
                for (const auto& alias : sub->get_aliases()) known.push_back(alias);
            }
            std::string where = path.empty() ? "" : " " + path;
            return "unknown command '" + (path.empty() ? a : path + " " + a) + "'" +
                   did_you_mean(a, known) + "; see `sandweave" + where + " --help`";
        }
        path += (path.empty() ? "" : " ") + next->get_name();
        level = next;
    }
    return "";
}

int report_error(const GlobalOptions& g, const std::string& msg, int code) {
    with_progress_hidden([&] { std::cerr << "sandweave: " << msg << std::endl; });
    if (g.json) print_json({{"error", {{"message", msg}, {"exit_status", code}}}});
    return code;
}

// CLI11 says "The following arguments were not expected"; say which verb, the
// closest option, or that a command belongs after `--`.
std::string explain_extras(CLI::App& app, const std::vector<std::string>& args,
                           std::string fallback) {
    for (const auto* sub : app.get_subcommands()) {
        std::vector<std::string> names;
        for (const auto* opt : sub->get_options())
            for (const auto& l : opt->get_lnames()) names.push_back("--" + l);
        if (sub->get_name() == "run") {
            // A bare word after `run ID` is a command missing its `--`.
            std::string rest = fallback.substr(
                fallback.find(':') == std::string::npos ? 0 : fallback.find(':') + 1);
            // CLI11 saw the arguments reversed; show them as typed.
            std::istringstream words(rest);
            std::string w;
            std::vector<std::string> extras;
            bool bare = false;
            while (words >> w) {
                bare = bare || w[0] != '-';
                extras.insert(extras.begin(), w);
            }
            std::string shown;
            for (const auto& e : extras) shown += " " + e;
            if (bare)
                return "run: unexpected arguments" + shown +
                       ": put the command after `--` (sandweave run ID -- COMMAND...) or use -c "
                       "'shell string'";
        }
        bool seen_verb = false;
        for (const auto& a : args) {
            if (!seen_verb) {
                seen_verb = a == sub->get_name();
                continue;
            }
            if (a.rfind("-", 0) == 0) {
                std::string word = a.substr(0, a.find('='));
                bool known = false;
                for (const auto* opt : sub->get_options()) known = known || opt->check_name(word);
                for (const auto* opt : app.get_options()) known = known || opt->check_name(word);
                if (!known)
                    return "unknown option " + word + " for '" + sub->get_name() + "'" +
                           did_you_mean(word, names);
            }
        }

        return sub->get_name() + ": " + fallback;
    }
    return fallback;
}

// For a group of short options such as -it or -e: whether its last letter
// takes a value (the next word).
bool takes_value_short(CLI::App* sub, const std::string& group) {
    std::string last = std::string("-") + group.back();
    for (const auto* opt : sub->get_options())
        if (opt->check_name(last)) return opt->get_expected_min() > 0;
    return false;
}

// `run ID COMMAND ARGS...` without `--`, as docker exec takes it: the first
// bare word after the sandbox id starts the command (options before it are
// sandweave's, found by the same option tree that parses them).
void split_run_command(CLI::App& app, std::size_t at, std::vector<std::string>& args,
                       std::vector<std::string>& command) {
    if (at == args.size() || args[at] != "run") return;
    auto verb = args.begin() + static_cast<long>(at);
    CLI::App* run = app.get_subcommand("run");
    auto value_follows = [&](const std::string& a) {
        if (takes_value(*run, a) || takes_value(app, a)) return true;
        if (a.size() > 2 && a[1] != '-' && a.find('=') == std::string::npos)
            return takes_value_short(run, a);  // -it, -e X
        return false;
    };
    bool have_id = false;
    for (auto it = verb + 1; it != args.end(); ++it) {
        const std::string& a = *it;
        if (a.size() > 1 && a[0] == '-') {
            if (value_follows(a) && it + 1 != args.end()) ++it;
            continue;
        }
        // One-shot runs (--template) have no id: their first word is the command.
        bool one_shot = std::any_of(verb + 1, it, [](const std::string& w) {
            return w == "--template" || w.rfind("--template=", 0) == 0 || w == "--from-snapshot" ||
                   w.rfind("--from-snapshot=", 0) == 0;
        });
        if (!have_id && !one_shot) {
            have_id = true;
            continue;
        }
        command.assign(it, args.end());
        args.erase(it, args.end());
        return;
    }
}

// `run ... -- ARGV`: everything after the first `--` is the command, never
// parsed as sandweave options. Returns whether there was a `--`.
bool take_command_after_separator(std::vector<std::string>& args,
                                  std::vector<std::string>& command) {
    for (std::size_t i = 0; i < args.size(); ++i) {
        if (args[i] == "--") {
            command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
            args.resize(i);
            return true;
        }
    }
    return false;
}

void add_top_level_options(CLI::App& app, GlobalOptions& g) {
    // `--version` is `sandweave version` (rewritten below), listed here for --help.
    app.add_flag("--version")->description("Print the versions (as `sandweave version`) and exit");
    app.require_subcommand(1);
    app.fallthrough();
    add_global_options(app, g);
    app.footer(
        "Exit status: 0 ok, 1 error, 2 usage, 3 audit export incomplete, 4 not found, 5 runtime "
        "missing or lacks a feature, 6 batch: some episodes failed, 7 batch: infrastructure "
        "failures remained, 255 the connection to a remote worker failed or was lost.\nSee "
        "sandweave(1) and sandweave-VERB(1).");
}

// `sandweave [global options] --version` before any verb: the version verb.
void version_flag_as_verb(std::vector<std::string>& args) {
    for (auto& a : args) {
        if (a == "--version") {
            a = "version";
            break;
        }
        if (!a.empty() && a[0] != '-') break;
    }
}

// The verbs in --help's order, with the words each registration adds.
// Only the verb the command line names is built: all of them are some
// 300 options, about a fifth of a short command's CPU (0.3 ms here, for
// every `run`). --help before the verb, a completion query and a word
// that names no verb build them all (the help text, check_verbs'
// suggestions), as does a list here that has gone stale.
void register_verbs(CLI::App& app, GlobalOptions& g, Outcome& out,
                    std::vector<std::string>& command, const std::string& verb) {
    struct VerbGroup {
        std::vector<std::string_view> verbs;
        std::function<void()> add;
    };
    std::vector<VerbGroup> groups = {
        {{"create"}, [&] { register_create(app, g, out); }},
        {{"run"}, [&] { register_run(app, g, out, command); }},
        {{"ls", "list", "inspect", "terminate", "rm", "prune"},
         [&] { register_sandbox_verbs(app, g, out); }},
        {{"ps", "logs", "kill", "wait"}, [&] { register_process_verbs(app, g, out); }},
        {{"cp"}, [&] { register_cp(app, g, out); }},
        {{"template"}, [&] { register_template(app, g, out); }},
        {{"image"}, [&] { register_image(app, g, out); }},
        {{"doctor"}, [&] { register_doctor(app, g, out); }},
        {{"audit"}, [&] { register_audit(app, g, out); }},
        {{"snapshot"}, [&] { register_snapshot(app, g, out); }},
        {{"pool"}, [&] { register_pool(app, g, out); }},
        {{"batch"}, [&] { register_batch(app, g, out); }},
        {{"serve"}, [&] { register_serve(app, g, out); }},
        {{"e2b"}, [&] { register_e2b(app, g, out); }},
        {{"controller"}, [&] { register_controller(app, g, out); }},
        {{"worker"}, [&] { register_worker(app, g, out); }},
        {{"desktop"}, [&] { register_desktop(app, g, out); }},
        {{"version"}, [&] { register_version(app, g, out); }},
        {{"completion"}, [&] { register_completion(app, g, out); }},
    };
    auto named = std::find_if(groups.begin(), groups.end(), [&](const VerbGroup& v) {
        return std::find(v.verbs.begin(), v.verbs.end(), verb) != v.verbs.end();
    });
    if (named != groups.end()) named->add();
    if (named == groups.end() || !has_verb(app, verb))
        for (auto it = groups.begin(); it != groups.end(); ++it)
            if (it != named) it->add();
}

// CLI11's own way out: help printed, or a usage error explained. Returns the
// exit status then; nothing when the verb ran.
std::optional<int> parse(CLI::App& app, const GlobalOptions& g,
                         const std::vector<std::string>& args) {
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    try {
        app.parse(reversed);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::string msg = e.what();
        if (const auto* extras = dynamic_cast<const CLI::ExtrasError*>(&e)) {
            msg = explain_extras(app, args, extras->what());
        }
        return report_error(g, msg + "; see `sandweave --help`", 2);
    }
    return std::nullopt;
}

// Runs the verb (parsing calls it) and turns what it throws into the
// documented exit status and one message: the one place errors are caught.
int run_verb(CLI::App& app, const GlobalOptions& g, const Outcome& out,
             const std::vector<std::string>& args) {
    try {
        if (std::optional<int> stopped = parse(app, g, args)) return *stopped;
    } catch (const Error& e) {
        int code = static_cast<int>(e.code());
        if (out.docker_exit_codes && e.code() == ErrorCode::general) code = 125;
        return report_error(g, e.what(), code);
    } catch (const std::filesystem::filesystem_error& e) {
        // A file operation the library did not wrap: still an ordinary error.
        return report_error(g, e.what(), out.docker_exit_codes ? 125 : 1);
    } catch (const std::exception& e) {
        return report_error(g, std::string("internal error: ") + e.what(),
                            out.docker_exit_codes ? 125 : 1);
    }
    return out.exit_code;
}

}  // namespace

int main_impl(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::vector<std::string> command;
    const bool has_separator = take_command_after_separator(args, command);

    GlobalOptions g;
    Outcome out;
    CLI::App app{
        "sandweave: run untrusted code in gVisor sandboxes, with /proc hidepid and a "
        "protected runtime audit log",
        "sandweave"};
    add_top_level_options(app, g);
    version_flag_as_verb(args);
    const std::size_t at = verb_at(app, args);
    register_verbs(app, g, out, command, at < args.size() ? args[at] : "");

    // The completion scripts' query: the words typed so far come after `--`.
    if (args.size() == 1 && args[0] == "__complete") return run_completion_query(app, command);

    // An unknown verb gets a suggestion before CLI11's generic message.
    if (std::string bad = check_verbs(app, args); !bad.empty()) return report_error(g, bad, 2);
    if (!has_separator) split_run_command(app, at, args, command);
    if (has_separator && (args.empty() || std::find(args.begin(), args.end(), "run") == args.end()))
        return report_error(g, "`--` is only used by `sandweave run ... -- COMMAND`", 2);

    return run_verb(app, g, out, args);
}

void init_logging_early(const GlobalOptions& g) {
    setup_logging(g);
}

namespace {

// A closed stdin/stdout/stderr (CI runners, cron) would let the next open()
// take descriptor 0-2 and hand it to a child as its stdio: fill the gaps.
void fill_closed_stdio() {
    for (int fd = 0; fd <= 2; ++fd) {
        if (::fcntl(fd, F_GETFD) < 0) {
            int null_fd = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
            if (null_fd >= 0 && null_fd != fd) ::close(null_fd);
        }
    }
}

// __pool-refill --state-dir DIR NAME [--runsc PATH]
int pool_refill_entry(const std::vector<std::string>& a) {
    if (a.size() < 3 || a[0] != "--state-dir") return 2;
    GlobalOptions g;
    init_logging_early(g);
    g.state_dir = a[1];
    if (a.size() >= 5 && a[3] == "--runsc") g.runsc = a[4];
    try {
        LocalRunner runner;
        LocalHost host;
        StateStore store(g.state_dir);
        Context ctx{store, runner, host, g.runsc.empty() ? std::nullopt : std::optional(g.runsc)};
        return pool_refill_main(ctx, a[2]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sandweave pool refill: %s\n", e.what());
        return 1;
    }
}

// An internal verb taking `--state-dir DIR ARG`: `body` with a context on
// DIR; what it throws is one line naming `what`, exit `failed`.
int with_state_dir(const std::vector<std::string>& a, const char* what, int failed,
                   const std::function<int(Context&, const std::string&)>& body) {
    if (a.size() != 3 || a[0] != "--state-dir") return 2;
    GlobalOptions g;
    init_logging_early(g);
    try {
        LocalRunner runner;
        LocalHost host;
        StateStore store(a[1]);
        Context ctx{store, runner, host, std::nullopt};
        return body(ctx, a[2]);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sandweave %s: %s: %s\n", what, a[2].c_str(), e.what());
        return failed;
    }
}

// __lifetime --state-dir DIR ID (lib/sandbox/lifetime.hpp)
int lifetime_entry(const std::vector<std::string>& a) {
    return with_state_dir(a, "lifetime watcher", 1, lifetime_watch_main);
}

// __slurm-epilog --state-dir DIR JOB (lib/sandbox/lifetime.hpp). Exits 0
// whatever happens: a failing epilog would make Slurm drain the node.
int slurm_epilog_entry(const std::vector<std::string>& a) {
    return with_state_dir(a, "epilog: job", 0, [](Context& ctx, const std::string& job) {
        if (int n = end_job_sandboxes(ctx, job); n > 0)
            std::fprintf(stderr, "sandweave epilog: job %s: ended %d sandbox(es)\n", job.c_str(),
                         n);
        return 0;
    });
}

// __relay --socket PATH (lib/rpc/socket_relay.hpp): exits 0 when either end
// closed, 255 when the worker daemon could not be reached.
int relay_entry(const std::vector<std::string>& a) {
    if (a.size() != 2 || a[0] != "--socket") return 2;
    try {
        rpc::relay_to_socket(a[1], 0, 1);
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sandweave relay: %s\n", e.what());
        return 255;
    }
}

int audit_writer_entry(int argc, char** argv) {
    GlobalOptions quiet_defaults;
    init_logging_early(quiet_defaults);
    return audit::writer_entry(std::vector<std::string>(argv + 1, argv + argc));
}

// Internal entry points started by sandweave itself, not part of the CLI:
// the exit status of the one argv names, nothing when it names none.
std::optional<int> run_internal_entry(int argc, char** argv) {
    if (argc < 2) return std::nullopt;
    if (std::strcmp(argv[1], shim_verb) == 0)
        return shim_main(std::vector<std::string>(argv + 2, argv + argc), shim_companions);
    if (std::strcmp(argv[1], pool_refill_verb) == 0)
        return pool_refill_entry(std::vector<std::string>(argv + 2, argv + argc));
    if (std::strcmp(argv[1], lifetime_verb) == 0)
        return lifetime_entry(std::vector<std::string>(argv + 2, argv + argc));
    if (std::strcmp(argv[1], slurm_epilog_verb) == 0)
        return slurm_epilog_entry(std::vector<std::string>(argv + 2, argv + argc));
    if (std::strcmp(argv[1], audit::writer_verb) == 0) return audit_writer_entry(argc, argv);
    if (std::strcmp(argv[1], rpc::relay_verb) == 0)
        return relay_entry(std::vector<std::string>(argv + 2, argv + argc));
    return std::nullopt;
}

// Logging is configured from the raw arguments so it works during parsing too.
GlobalOptions logging_options(int argc, char** argv) {
    GlobalOptions defaults;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--") break;
        if (a == "-q" || a == "--quiet") defaults.quiet = true;
        if (a == "-v" || a == "--verbose") defaults.verbosity = 1;
        if (a == "--progress") defaults.progress = true;
    }
    return defaults;
}

}  // namespace
}  // namespace sandweave::cli

int main(int argc, char** argv) {
    using namespace sandweave::cli;
    fill_closed_stdio();
    if (std::optional<int> status = run_internal_entry(argc, argv)) return *status;
    GlobalOptions defaults = logging_options(argc, argv);
    init_logging_early(defaults);
    install_progress(defaults.progress, defaults.quiet);
    return main_impl(argc, argv);
}
