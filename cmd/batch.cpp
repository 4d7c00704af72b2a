// `sandweave batch run SPEC --out DIR`: episodes from a JSONL file
// (lib/batch/batch.hpp). This verb checks the flags, opens one connection per
// worker thread, turns SIGINT/SIGTERM into Runner::stop, and prints.

#include <signal.h>

#include <atomic>
#include <iostream>
#include <mutex>
#include <thread>

#include "cmd/common.hpp"
#include "cmd/progress.hpp"
#include "lib/batch/batch.hpp"
#include "lib/core/error.hpp"
#include "lib/core/log.hpp"
#include "lib/core/units.hpp"

namespace sandweave::cli {
namespace {

struct BatchFlags {
    std::string spec, out, output_limit;
    int concurrency = 4;
    int retries = 2;
    bool events = false;
    bool warm_pool = false;
};

// Runs the batch on a thread of its own while this one waits for SIGINT,
// SIGTERM or SIGHUP (blocked in every thread, so none interrupts a worker).
batch::Summary run_with_signals(batch::Runner& runner) {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    std::atomic<bool> done{false};
    std::optional<batch::Summary> summary;
    std::exception_ptr failure;
    std::thread t([&] {
        try {
            summary = runner.run();
        } catch (...) {
            failure = std::current_exception();
        }
        done = true;
    });
    timespec tick{0, 200 * 1000 * 1000};
    while (!done) {
        int sig = sigtimedwait(&set, nullptr, &tick);
        if (sig > 0) {
            log().warn("batch: signal " + std::to_string(sig) +
                       ": stopping (ending running episodes and removing their sandboxes)");
            runner.stop(sig == SIGHUP ? SIGTERM : sig);
        }
    }
    t.join();
    if (failure) std::rethrow_exception(failure);
    return *summary;
}

void run_batch(const GlobalOptions& g, const BatchFlags& f, Outcome& out) {
    if (f.concurrency < 1 || f.concurrency > 1024)
        throw Error(ErrorCode::usage, "--concurrency: expected 1 to 1024");
    if (f.retries < 0 || f.retries > 100)
        throw Error(ErrorCode::usage, "--retries: expected 0 to 100");
    batch::Options o;
    if (!f.output_limit.empty()) {
        auto n = parse_size(f.output_limit);
        if (!n || *n > (1ull << 30))
            throw Error(ErrorCode::usage, "--output-limit '" + f.output_limit +
                                              "': expected a size up to 1GiB, e.g. 1MiB");
        o.output_limit = *n;
    }
    // Every line is checked before any connection is made.
    std::vector<batch::Episode> episodes = batch::parse_spec(f.spec);
    {
        Session probe(g);  // fails now, once, when the connection cannot be made
        if (probe.remote()) o.via = probe.remote_url();
        if (f.warm_pool && probe.remote())
            throw Error(ErrorCode::usage, "--warm-pool applies to the local connection");
        o.warm_pool = f.warm_pool;
    }
    o.spec = f.spec;
    o.out = f.out;
    o.concurrency = f.concurrency;
    o.retries = f.retries;
    o.client_state_dir = StateStore::default_root();
    o.connect = [&g] {
        auto s = std::make_shared<Session>(g);
        return std::shared_ptr<api::Api>(s, &s->api());
    };
    std::mutex print_mu;
    if (f.events)
        o.on_event = [&print_mu](const nlohmann::json& ev) {
            std::lock_guard<std::mutex> l(print_mu);
            std::cout << ev.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                      << std::endl;
        };
    batch::Runner runner(std::move(episodes), std::move(o));
    batch::Summary sum = run_with_signals(runner);
    if (!g.quiet) with_progress_hidden([&] { std::cerr << sum.to_text() << std::endl; });
    nlohmann::json doc = sum.to_json();
    if (f.events) {
        nlohmann::json ev = doc;
        ev["event"] = "summary";
        std::lock_guard<std::mutex> l(print_mu);
        std::cout << ev.dump() << std::endl;
    }
    if (g.json) print_json(doc);
    out.exit_code = sum.stopped_by ? 128 + sum.stopped_by : sum.exit_code;
}

}  // namespace

void register_batch(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* batch = app.add_subcommand("batch", "Run many episodes from a JSONL file of specs");
    batch->require_subcommand(1);
    auto* run = batch->add_subcommand(
        "run", "Run the episodes of SPEC, each leaving its results in DIR/<id>");
    run->footer(
        "Each line of SPEC is one JSON object: id, template, hidepid, audit, user, command or\n"
        "script, files_in, files_out, env, timeout, labels (see sandweave-batch(1)).\n"
        "A rerun with the same --out skips the episodes that finished.\n"
        "Exit status: 0 all episodes exited 0 with a complete audit; 6 some failed, timed out\n"
        "or have an incomplete audit; 7 infrastructure failures remained after retries;\n"
        "2 a bad spec or template, 4 a template that does not exist (nothing ran);\n"
        "130/143 stopped by SIGINT/SIGTERM.");
    auto f = std::make_shared<BatchFlags>();
    run->add_option("spec", f->spec, "The episodes: one JSON object per line")
        ->required()
        ->type_name("SPEC.jsonl");
    run->add_option("--out", f->out, "Folder of the results (one folder per episode)")
        ->required()
        ->type_name("DIR");
    run->add_option("--concurrency", f->concurrency, "Episodes at a time")->capture_default_str();
    run->add_option("--retries", f->retries,
                    "Tries again after an infrastructure failure (not the episode's own)")
        ->capture_default_str();
    run->add_option("--output-limit", f->output_limit,
                    "Keep this much of each of stdout and stderr (default 1MiB)")
        ->type_name("SIZE");
    run->add_flag("--warm-pool", f->warm_pool,
                  "When all episodes share their settings, take their sandboxes from a warm pool "
                  "made ahead (local connection)");
    run->add_flag("--events", f->events,
                  "One JSON line on stdout per finished episode, and one for the summary");
    run->callback([&g, &out, f] { run_batch(g, *f, out); });
}

}  // namespace sandweave::cli
