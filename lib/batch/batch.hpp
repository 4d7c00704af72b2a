#pragma once
// Batch episodes (`sandweave batch run`): many one-shot episodes from one
// JSONL file of episode specs, each leaving its own folder of results, with a
// concurrency cap. Written over the Api interface only, so it runs unchanged
// on the local host, over ssh:// and through a Weave controller.
//
// The contract a user relies on:
// - The spec file is checked whole before anything starts; a bad line is one
//   error naming its line (parse_spec), and so is a template that does not
//   exist or does not resolve (Runner::run asks the worker, once per template,
//   before it makes anything): the user's mistake, not retried.
// - An episode's folder OUT/<id> appears only complete: it is written in a
//   temp folder beside it, fsynced, and renamed. A folder with result.json is
//   finished, and a rerun skips it.
// - An episode's own failure (non-zero exit, timeout, a missing file out) is
//   a result; a failure of the machinery (create, runtime, connection, audit
//   export) is retried, each try recorded, and counted apart when retries run
//   out. Such an episode gets no folder, so a rerun tries it again.
// - Every sandbox carries the batch's label (derived from the absolute OUT)
//   and a lifetime, so a runner that dies cannot leak them; a new run removes
//   what an earlier killed run left. stop() ends running episodes and removes
//   their sandboxes.
// - An audit is complete only when the export said so and `audit verify`'s
//   check of the written copy passed.

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/api/api.hpp"

namespace sandweave::batch {

// Limits on the spec file.
inline constexpr std::uintmax_t max_spec_bytes = 256ull << 20;
inline constexpr std::size_t max_line_bytes = 1u << 20;
inline constexpr std::size_t max_episodes = 1000000;
// What is kept of each of stdout and stderr by default.
inline constexpr std::uint64_t default_output_limit = 1u << 20;
// A sandbox lives at most its episode's timeout plus this (its ttl); an
// episode without a timeout gets no_timeout_ttl.
inline constexpr std::int64_t ttl_margin_ms = 5 * 60 * 1000;
inline constexpr std::int64_t no_timeout_ttl_ms = 24ll * 3600 * 1000;
// Through a Weave controller, the first this many episodes of a run get the
// slots of one Slurm job array (Slurm's default MaxArraySize is 1001); the
// rest an allocation each.
inline constexpr std::size_t max_reserved_slots = 1000;
// The labels every sandbox of a batch carries.
inline constexpr const char* batch_label = "sandweave.batch";
inline constexpr const char* episode_label = "sandweave.episode";

// Exit statuses of a batch run (the README's table).
inline constexpr int exit_episodes_failed = 6;  // a non-zero exit, a timeout, an incomplete audit
inline constexpr int exit_infrastructure = 7;   // infrastructure failures remained after retries

// One line of the spec file.
struct Episode {
    std::string id;
    std::size_t line = 0;
    std::optional<std::string> template_ref;
    std::optional<int> hidepid;
    bool audit = true;
    std::optional<std::string> user;
    std::vector<std::string> argv;                // command, or /bin/sh -c script
    std::map<std::string, std::string> files_in;  // guest path -> host path
    std::vector<std::string> files_out;           // guest paths
    std::vector<std::string> env;                 // KEY=VALUE
    std::optional<std::int64_t> timeout_ms;
    std::map<std::string, std::string> labels;
    // "network": "none", or {"allow": [...], "deny": [...]} added to the
    // template's egress policy (lib/options/network.hpp).
    std::optional<std::string> network;
    std::optional<std::vector<std::string>> allow, deny;
};

// Reads and checks the whole file; throws Error(usage) "FILE:LINE: what".
std::vector<Episode> parse_spec(const std::filesystem::path& file);
// One line's JSON text (for tests and the error path): `where` prefixes errors.
Episode parse_episode(std::string_view text, const std::string& where);

// The results folder as absolute, normal path ("runs/1/" and "./runs/1" are
// one folder), and the batch's key derived from it, so reruns with the same
// folder find the sandboxes of an earlier run.
std::filesystem::path results_folder(const std::filesystem::path& out);
std::string batch_key(const std::filesystem::path& out);

struct Options {
    // The spec file, as errors about its lines name it.
    std::filesystem::path spec;
    std::filesystem::path out;
    int concurrency = 4;
    int retries = 2;
    std::uint64_t output_limit = default_output_limit;
    // A new connection for one worker thread (each has its own, and a new one
    // after its connection was lost). One shared Api would be safe (LocalApi
    // serves `serve`'s request threads; RpcClient takes calls from many
    // threads), but an RpcClient delivers every run's output on its one
    // reader thread, so one episode's slow disk would stall the others, and a
    // lost connection would fail every episode in flight at once.
    std::function<std::shared_ptr<api::Api>()> connect;
    // A remote connection's address (audit logs are fetched to this host).
    std::optional<std::string> via;
    // Where a template given as a file is resolved for a remote worker.
    std::filesystem::path client_state_dir;
    // Each finished episode as its event (also the ones a rerun skipped).
    std::function<void(const nlohmann::json&)> on_event;
    // Show the progress line (the Progress sink decides how).
    bool progress = true;
    // When every episode to run gets the same sandbox (template, hidepid,
    // audit, user, no labels of its own), take them from a warm pool of
    // `concurrency` sandboxes made ahead (named batch-KEY, shrunk as the
    // queue drains, removed at the end) instead of creating each: its
    // sandboxes carry the batch label but not the episode's. It saves an
    // episode its create while CPUs are free, and costs throughput when they
    // are not (the refills compete with the episodes): bench/batch.py.
    bool warm_pool = false;
};

struct Summary {
    std::string out, key;  // the results folder; its batch label's value
    std::size_t total = 0, skipped = 0, done = 0, failed = 0, infrastructure = 0, not_run = 0;
    std::size_t audit_complete = 0, audit_incomplete = 0, audit_off = 0;
    std::map<std::string, std::size_t> audit_reasons;  // reason -> episodes
    std::vector<std::string> failed_ids, infrastructure_ids, incomplete_ids;
    std::map<std::string, std::string> infrastructure_errors;  // id -> last error
    int stopped_by = 0;                                        // the signal, if stopped
    double seconds = 0;
    int exit_code = 0;
    nlohmann::json to_json() const;
    std::string to_text() const;  // a few lines for a terminal
};

class Runner {
  public:
    Runner(std::vector<Episode> episodes, Options options);
    ~Runner();
    Runner(const Runner&) = delete;
    Runner& operator=(const Runner&) = delete;

    // Runs every episode not yet finished; writes OUT/summary.json.
    Summary run();
    // From any thread (a signal waiter): start nothing new, end the running
    // episodes and remove their sandboxes. run() returns once they are gone.
    void stop(int sig);

    struct State;  // runner.cpp's

  private:
    std::unique_ptr<State> s_;
};

}  // namespace sandweave::batch
