#pragma once
// The Slurm commands the controller runs. Slurm does the placing, queueing,
// time limits and failure detection; these only ask it and read its answers
// (through slurm_json.hpp, the one place that knows Slurm's versions).
//
// Every command goes through a CommandRunner (lib/core/process.hpp), so
// unit tests script Slurm's answers. A Slurm client is one controller's: it
// marks the jobs it submits with the controller's id and takes only jobs
// carrying that mark as its own.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "lib/controller/slurm_json.hpp"
#include "lib/core/process.hpp"

namespace sandweave::controller::slurm {

// The label a sandbox carries on its worker: its job's id. The worker's
// epilog (`sandweave __slurm-epilog`) terminates the sandboxes of an ending
// job by it.
inline constexpr const char* job_label = "slurm_job";

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
    // Whose job it is: Slurm runs it as this Unix user and charges it to
    // them (the controller submits as them, see Client). Empty: the
    // controller's own user.
    std::string user = {};
};

class Client {
  public:
    // `controller`: the id this controller marks its jobs with
    // (valid_controller_id).
    Client(std::shared_ptr<CommandRunner> runner, std::string controller);

    const std::string& controller() const { return controller_; }
    // The comment of a job of this controller's: its mark, then `rest`.
    std::string comment(const std::string& rest) const { return comment_for(controller_, rest); }
    // Whether a job carries this controller's mark.
    bool ours(const Job& j) const { return controller_of(j) == controller_; }

    // A Slurm command; `timeout` nullopt: as long as it takes (a pending
    // salloc). `user`: run as that Unix user (a job's owner: only they,
    // root and SlurmUser may change or end it, and what they submit is
    // theirs); empty or the controller's own user: as the controller.
    CommandResult run(const std::vector<std::string>& argv,
                      std::optional<std::chrono::milliseconds> timeout = std::chrono::seconds(30),
                      const std::string& user = "");

    // Whose job `job` (or job array) is: remembered from its submission or
    // the last listing, else asked of Slurm; empty when Slurm does not know it.
    std::string owner(long job);

    // A new allocation of one sandbox slot; blocks while Slurm keeps it pending.
    long allocate(const AllocationRequest& r);

    // `count` allocations like `each` as one job array (`sbatch --array`), at
    // most `at_once` of them running: Slurm queues the rest. Each task holds
    // its allocation (its batch script sleeps) until it is cancelled or
    // reaches its time limit. Never requeued: a task whose node fails ends
    // (NODE_FAIL) instead of starting again elsewhere, where a create would
    // find a slot its sandbox never was in. Returns the array's job id.
    //
    // The task Slurm starts last takes the array's own id, and scancel or
    // scontrol update of that id acts on every task of the array. So the
    // array has one task more, index `count`, started after the others,
    // which no create uses: tasks 0..count-1 each have an id of their own.
    long submit_array(const AllocationRequest& each, std::int64_t count, int at_once);

    // Ends task `index` of `array` only (`scancel ARRAY_INDEX`).
    void cancel_task(long array, long index);

    // Ends the tasks of `array` whose indices `indices` lists (squeue's
    // array_task_string of its pending record: "4-30%4", "5,7-9"). Never
    // `scancel ARRAY`, even with --state=PENDING: that ends every task.
    void cancel_tasks(long array, std::string indices);

    // Waits until task `index` of array `array` runs and returns its own job
    // id; throws when it ended first (cancelled, its time limit), or when
    // `give_up` says so (checked between Slurm's answers).
    long await_array_task(long array, std::int64_t index, const std::function<bool()>& give_up);

    // Names the job after the sandbox (and marks it: `rest` after the mark,
    // the sandbox id by default), so a restarted controller pairs them up.
    void name_job(long job, const std::string& sandbox_id, const std::string& rest = "");
    // Rewrites a job's comment: the mark, then `rest`.
    CommandResult set_comment(long job, const std::string& rest);

    // The node Slurm granted the job.
    std::string node_of(long job);

    // Ends the job (best effort: it may have ended already).
    void cancel(long job);

    // Every job Slurm knows (`squeue --json` ignores its filters in 22.05),
    // every controller's.
    std::vector<Job> jobs();

    // Every node Slurm knows (`sinfo --json`).
    std::vector<Node> nodes();

  private:
    void remember(long job, const std::string& user);
    std::shared_ptr<CommandRunner> runner_;
    std::string controller_;
    // Job (and array) owners, each with the listing generation it was
    // learnt in: a listing forgets the jobs it no longer shows, but not
    // those submitted while it ran.
    std::mutex owners_mu_;
    std::map<long, std::pair<std::string, std::uint64_t>> owners_;
    std::uint64_t generation_ = 0;
};

}  // namespace sandweave::controller::slurm
