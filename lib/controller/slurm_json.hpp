#pragma once
// What Slurm prints, read into plain structs: `squeue --json`, `sinfo
// --json`, `scontrol show job -o`, `sbatch --parsable` and salloc's grant.
// The one place that knows how Slurm versions differ, so nothing above it
// does:
//
// - 22.05 (data_parser v0.0.38) prints `job_state` as one word and numbers
//   as numbers; `sinfo --json` lists `nodes`, each with `state` ("idle",
//   "down", ...) and `state_flags` (["NOT_RESPONDING", "DRAIN"]).
// - 23.11 and later (24.11: v0.0.42) print `job_state` as an array (a base
//   state and flags: ["CANCELLED", "COMPLETING"]), numbers as
//   {"set", "infinite", "number"} objects (unset: no value), and `sinfo
//   --json` lists `sinfo` entries, each a group of nodes (`nodes.nodes`)
//   sharing one `node.state` array (["IDLE", "NOT_RESPONDING"]).
//
// Tested on real output of both versions (tests/data/slurm/). Every input is
// untrusted: a field of the wrong type reads as absent, never throws; output
// that is not Slurm's JSON at all throws with one line.

#include <optional>
#include <set>
#include <string>
#include <vector>

namespace sandweave::controller::slurm {

struct Job {
    long id = 0;
    std::string name, comment, user;
    // One word, as 22.05 prints it: a flag that Slurm's own job_state_string
    // puts first (COMPLETING, CONFIGURING, REQUEUED, ...), else the base
    // state (PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT, NODE_FAIL, ...).
    std::string state;
    std::string reason;       // state_reason: None, Resources, NodeDown, ...
    std::string nodes;        // the node list; empty while pending
    long array = 0;           // array_job_id; 0: no array
    long task = -1;           // array_task_id; -1: none (no array, or its pending record)
    std::string array_tasks;  // the pending record's array_task_string ("4-30%4")
    long start_time = 0;      // seconds since the epoch; 0: not started
};

struct Node {
    std::string name;
    std::string state;            // base state, lower case: idle, mixed, allocated, down, ...
    std::set<std::string> flags;  // upper case: NOT_RESPONDING, DRAIN, ...
    std::string reason, gres, gres_used;
};

// `squeue --json`'s jobs, and `sinfo --json`'s nodes (each once, in the
// order Slurm lists them). Throws when `out` is not JSON or has no list.
std::vector<Job> parse_squeue(const std::string& out);
std::vector<Node> parse_sinfo(const std::string& out);

// Why Slurm counts a node as failed (down, or not responding), empty when
// it does not: Slurm's failure detection, read, not ours.
std::string node_failure(const Node& n);

// One job of `scontrol show job -o` (its one line per job; an array's
// pending record and its tasks are several lines: the first is read).
struct ShownJob {
    long id = 0;
    std::string state;  // JobState
    std::string nodes;  // NodeList; empty when "(null)"
    long array = 0;     // ArrayJobId; 0: none
    long task = -1;     // ArrayTaskId; -1: none
};
// nullopt when the output names no job ("Invalid job id", "not found").
std::optional<ShownJob> parse_scontrol_job(const std::string& out);

// The job id `sbatch --parsable` prints ("ID" or "ID;CLUSTER"), 0 when none.
long parse_sbatch(const std::string& out);
// The job id in salloc's "Granted job allocation N", 0 when none.
long parse_salloc_grant(const std::string& err);

// The controller's mark on a job, in its comment:
// `sandweave/<controller>:<rest>`, `rest` being the sandbox id (and, for a
// pool member, `:<pool definition>`), or, before the job has a sandbox,
// `:<pool>` or `:array:<owner>`. <controller> is the controller's id, so
// two controllers on one cluster never take each other's jobs.
inline constexpr const char* comment_prefix = "sandweave/";
std::string comment_for(const std::string& controller, const std::string& rest);
// A controller id: 1 to 32 of [a-z0-9].
bool valid_controller_id(const std::string& id);
// The controller a job is marked with; empty when it carries no mark.
std::string controller_of(const Job& j);
// What follows the mark ("" when there is none).
std::string rest_of(const Job& j);
// The sandbox id of a marked job; empty when it has none yet.
std::string sandbox_of(const Job& j);

}  // namespace sandweave::controller::slurm
