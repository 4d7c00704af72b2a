#pragma once
// The Slurm commands the controller runs. Slurm does the placing, queueing,
// time limits and failure detection; these only ask it and read its answers.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/process.hpp"

namespace sandweave::weave::slurm {

// A job of ours carries this comment prefix, then the sandbox id.
inline constexpr const char* comment_prefix = "sandweave:";

// The label a sandbox carries on its worker: its job's id. The worker's
// epilog (`sandweave __slurm-epilog`) terminates the sandboxes of an ending
// job by it.
inline constexpr const char* job_label = "slurm_job";

// A Slurm command; `timeout` nullopt: as long as it takes (a pending salloc).
CommandResult run(const std::vector<std::string>& argv,
                  std::optional<std::chrono::milliseconds> timeout = std::chrono::seconds(30));

// The last non-empty line of a command's output, for one-line errors.
std::string last_line(const std::string& s);

// What `salloc --no-shell` needs for one sandbox's allocation.
struct AllocationRequest {
    std::optional<long> ttl_ms;           // the job's time limit, rounded up to minutes
    std::string partition;                // empty: the default partition
    std::string name = "sandweave";       // the job's name until the sandbox names it
    std::optional<double> cpus;           // --cpus-per-task, rounded up
    std::optional<std::uint64_t> memory;  // bytes: --mem, rounded up to MiB
    // After comment_prefix while the job has no sandbox yet: a pool member's
    // is ":<owner>/<pool>", so a pool rm can cancel it while Slurm keeps it pending.
    std::string comment = {};
};

// A new allocation of one sandbox slot; blocks while Slurm keeps it pending.
long allocate(const AllocationRequest& r);

// `count` allocations like `each` as one job array (`sbatch --array`), at
// most `at_once` of them running: Slurm queues the rest. Each task holds its
// allocation (its batch script sleeps) until it is cancelled or reaches its
// time limit. Returns the array's job id.
//
// The task Slurm starts last takes the array's own id, and scancel or
// scontrol update of that id acts on every task of the array. So the array
// has one task more, index `count`, started after the others, which no
// create uses: tasks 0..count-1 each have an id of their own.
long submit_array(const AllocationRequest& each, std::int64_t count, int at_once);

// Ends task `index` of `array` only (`scancel ARRAY_INDEX`).
void cancel_task(long array, long index);

// Ends the tasks of `array` whose indices `indices` lists (squeue's
// array_task_string of its pending record: "4-30%4", "5,7-9"). Never
// `scancel ARRAY`, even with --state=PENDING: that ends every task.
void cancel_tasks(long array, std::string indices);

// Waits until task `index` of array `array` runs and returns its own job id;
// throws when it ended first (cancelled, its time limit), or when
// `give_up` says so (checked between Slurm's answers).
long await_array_task(long array, std::int64_t index, const std::function<bool()>& give_up);

// Names the job after the sandbox, so a restarted controller pairs them up.
void name_job(long job, const std::string& sandbox_id);

// The node Slurm granted the job.
std::string node_of(long job);

// Ends the job (best effort: it may have ended already).
void cancel(long job);

// Every job Slurm knows (`squeue --json` ignores its filters in 22.05).
std::vector<nlohmann::json> jobs();

// Every node Slurm knows (`sinfo --json`).
std::vector<nlohmann::json> nodes();

// Why Slurm counts a node as failed (down, or not responding), empty when it
// does not: Slurm's failure detection, read, not ours.
std::string node_failure(const nlohmann::json& node);

// A job's state (RUNNING, PENDING, NODE_FAIL, ...).
std::string state_of(const nlohmann::json& job);

// A job's array (its array_job_id), 0 for a job of no array; and its task
// index, -1 for none (not an array's, or its array's pending record).
long array_of(const nlohmann::json& job);
long task_of(const nlohmann::json& job);

// The Unix user a job belongs to (its user_name; its user_id when the
// name is unknown).
std::string user_of(const nlohmann::json& job);

// Whether a job is one of ours (its comment starts with comment_prefix).
bool is_ours(const nlohmann::json& job);

// The sandbox id a job of ours carries in its comment (`sandweave:<id>`, a
// pool member's `sandweave:<id>:<pool>`); empty for other jobs
// and for ours not yet named (still pending, or being created).
std::string sandbox_of(const nlohmann::json& job);

}  // namespace sandweave::weave::slurm
