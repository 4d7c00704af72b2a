// The Slurm commands the controller runs (lib/controller/slurm.hpp).
#include "lib/controller/slurm.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "lib/controller/identity.hpp"
#include "lib/core/error.hpp"

namespace sandweave::controller::slurm {

std::string last_line(const std::string& s) {
    auto end = s.find_last_not_of("\n ");
    if (end == std::string::npos) return "";
    auto start = s.rfind('\n', end);
    return s.substr(start == std::string::npos ? 0 : start + 1,
                    end - (start == std::string::npos ? 0 : start + 1) + 1);
}

Client::Client(std::shared_ptr<CommandRunner> runner, std::string controller)
    : runner_(std::move(runner)), controller_(std::move(controller)) {
    if (!valid_controller_id(controller_))
        throw Error(ErrorCode::usage,
                    "'" + controller_ + "' is no controller id (1 to 32 of a-z and 0-9)");
}

CommandResult Client::run(const std::vector<std::string>& argv,
                          std::optional<std::chrono::milliseconds> timeout,
                          const std::string& user) {
    Command c;
    c.argv = argv;
    c.timeout = timeout;
    c.run_as = run_as_other(user);
    return runner_->run(c);
}

void Client::remember(long job, const std::string& user) {
    if (!job || user.empty()) return;
    std::lock_guard<std::mutex> g(owners_mu_);
    owners_[job] = {user, generation_};
}

std::string Client::owner(long job) {
    {
        std::lock_guard<std::mutex> g(owners_mu_);
        if (auto it = owners_.find(job); it != owners_.end()) return it->second.first;
    }
    CommandResult r = run({"squeue", "-h", "-j", std::to_string(job), "-o", "%u"});
    std::string user = r.ok() ? last_line(r.out) : "";
    user.erase(0, user.find_first_not_of(" \t"));
    user.erase(user.find_last_not_of(" \t") + 1);
    remember(job, user);
    return user;
}

namespace {

// The options salloc and sbatch share for one sandbox slot, after `command`'s own.
std::vector<std::string> allocation_argv(std::vector<std::string> argv,
                                         const AllocationRequest& req, const std::string& comment) {
    argv.insert(argv.end(),
                {"--gres=sbx:1", "--ntasks=1", "--job-name=" + req.name, "--comment=" + comment});
    if (req.ttl_ms && *req.ttl_ms > 0)
        argv.push_back("--time=" + std::to_string((*req.ttl_ms + 59999) / 60000));
    if (!req.partition.empty()) argv.push_back("--partition=" + req.partition);
    if (req.cpus)
        argv.push_back("--cpus-per-task=" +
                       std::to_string(static_cast<long>(std::ceil(*req.cpus))));
    if (req.memory)
        argv.push_back("--mem=" + std::to_string((*req.memory + (1u << 20) - 1) >> 20) + "M");
    return argv;
}

// The array tasks await_array_task saw start, by their own job id: their
// `ARRAY_TASK` (what scancel takes) and node, so neither costs another
// question to slurmctld. A job missing here (a restarted controller's) is
// looked up.
std::mutex tasks_mu;
std::map<long, std::pair<std::string, std::string>> started_tasks;

// An array task as scancel and scontrol name it.
std::string task_ref(long array, long index) {
    return std::to_string(array) + "_" + std::to_string(index);
}

std::optional<std::pair<std::string, std::string>> started_task(long job, bool forget) {
    std::lock_guard<std::mutex> g(tasks_mu);
    auto it = started_tasks.find(job);
    if (it == started_tasks.end()) return std::nullopt;
    auto t = it->second;
    if (forget) started_tasks.erase(it);
    return t;
}

}  // namespace

long Client::allocate(const AllocationRequest& req) {
    std::vector<std::string> argv =
        allocation_argv({"salloc", "--no-shell"}, req, comment(req.comment));
    CommandResult r = run(argv, std::nullopt, req.user);
    long job = parse_salloc_grant(r.err);
    if (!r.ok() || !job)
        throw Error(ErrorCode::runtime, "Slurm gave no allocation: " + last_line(r.err));
    remember(job, req.user.empty() ? own_unix_user() : req.user);
    return job;
}

void Client::name_job(long job, const std::string& sandbox_id, const std::string& rest) {
    run({"scontrol", "update", "JobId=" + std::to_string(job), "Name=" + sandbox_id,
         "Comment=" + comment(rest.empty() ? sandbox_id : rest)},
        std::chrono::seconds(30), owner(job));
}

CommandResult Client::set_comment(long job, const std::string& rest) {
    return run({"scontrol", "update", "JobId=" + std::to_string(job), "Comment=" + comment(rest)},
               std::chrono::seconds(30), owner(job));
}

long Client::submit_array(const AllocationRequest& each, std::int64_t count, int at_once) {
    if (count < 1 || at_once < 1)
        throw Error(ErrorCode::usage, "a job array needs at least one task, one at a time");
    std::vector<std::string> argv = allocation_argv(
        {"sbatch", "--parsable", "--no-requeue", "--output=/dev/null", "--error=/dev/null",
         "--array=0-" + std::to_string(count) + "%" + std::to_string(at_once)},
        each, comment(each.comment));
    // The batch script only holds the task's allocation; the sandbox runs in
    // a step of its own (worker_link.cpp).
    argv.push_back("--wrap=exec sleep infinity");
    CommandResult r = run(argv, std::chrono::seconds(30), each.user);
    long id = parse_sbatch(r.out);
    if (!r.ok() || !id)
        throw Error(ErrorCode::runtime, "Slurm took no job array: " + last_line(r.err));
    remember(id, each.user.empty() ? own_unix_user() : each.user);
    return id;
}

namespace {

// The slots creates wait for, by array. Slurm starts an array's tasks in
// index order, so only the lowest waiting slot of each array is asked about
// often; the others every second (slurmctld and the controller's CPU would
// pay for every waiter's questions).
std::mutex waiting_mu;
std::condition_variable waiting_changed;
std::map<long, std::set<std::int64_t>> waiting;

struct Waiting {
    long array;
    std::int64_t index;
    Waiting(long a, std::int64_t i) : array(a), index(i) {
        std::lock_guard<std::mutex> g(waiting_mu);
        waiting[array].insert(index);
    }
    ~Waiting() {
        {
            std::lock_guard<std::mutex> g(waiting_mu);
            auto it = waiting.find(array);
            it->second.erase(index);
            if (it->second.empty()) waiting.erase(it);
        }
        waiting_changed.notify_all();
    }
    // Sleeps `pause` when this slot is the array's next, else until it is
    // (or a second has passed).
    void sleep(std::chrono::milliseconds pause) const {
        std::unique_lock<std::mutex> l(waiting_mu);
        auto next = [&] { return *waiting.at(array).begin() == index; };
        if (next())
            waiting_changed.wait_for(l, pause, [] { return false; });
        else
            waiting_changed.wait_for(l, std::chrono::seconds(1), next);
    }
};

}  // namespace

long Client::await_array_task(long array, std::int64_t index,
                              const std::function<bool()>& give_up) {
    const std::string task = task_ref(array, static_cast<long>(index));
    Waiting me(array, index);
    auto pause = std::chrono::milliseconds(20);
    for (;;) {
        CommandResult r = run({"scontrol", "show", "job", "-o", task});
        std::optional<ShownJob> shown = parse_scontrol_job(r.out);
        if (shown && shown->state == "RUNNING" && !shown->nodes.empty()) {
            std::lock_guard<std::mutex> g(tasks_mu);
            started_tasks[shown->id] = {task, shown->nodes};
            return shown->id;
        }
        // No answer (a slurmctld restarting) is waited out; a job Slurm
        // no longer knows, or one that ended, is not.
        // ("Job A_I not found" on stdout: a task cancelled while queued.)
        std::string state = shown ? shown->state : "";
        bool unknown = r.err.find("Invalid job id") != std::string::npos ||
                       r.out.find("not found") != std::string::npos;
        if (unknown || (!state.empty() && state != "PENDING" && state != "CONFIGURING"))
            throw Error(ErrorCode::runtime,
                        "slot " + std::to_string(index) + " of Slurm job array " +
                            std::to_string(array) + " ended before its sandbox started" +
                            (state.empty() ? ": " + last_line(r.err) : " (" + state + ")"));
        if (give_up()) throw Error(ErrorCode::general, "the controller is stopping");
        me.sleep(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
}

std::string Client::node_of(long job) {
    if (auto t = started_task(job, false)) return t->second;
    CommandResult r = run({"scontrol", "show", "job", "-o", std::to_string(job)});
    if (auto shown = parse_scontrol_job(r.out); shown && !shown->nodes.empty()) return shown->nodes;
    throw Error(ErrorCode::runtime, "Slurm did not say where job " + std::to_string(job) +
                                        " runs: " + last_line(r.err));
}

void Client::cancel(long job) {
    constexpr auto patience = std::chrono::seconds(30);
    const std::string user = owner(job);
    if (auto t = started_task(job, true)) {
        run({"scancel", t->first}, patience, user);
        return;
    }
    const std::string id = std::to_string(job);
    // -v: without it, scancel says nothing of a job id it did not take.
    CommandResult r = run({"scancel", "-v", id}, patience, user);
    if (r.err.find("Invalid job id") == std::string::npos) return;
    // A job array's task answers to scancel only as ARRAY_TASK (22.05).
    auto shown = parse_scontrol_job(run({"scontrol", "show", "job", "-o", id}).out);
    if (shown && shown->array && shown->task >= 0 && shown->array != job)
        run({"scancel", task_ref(shown->array, shown->task)}, patience, user);
}

void Client::cancel_task(long array, long index) {
    run({"scancel", task_ref(array, index)}, std::chrono::seconds(30), owner(array));
}

void Client::cancel_tasks(long array, std::string indices) {
    indices = indices.substr(0, indices.find('%'));  // the throttle
    if (indices.empty() || indices.find_first_not_of("0123456789,-") != std::string::npos) return;
    run({"scancel", std::to_string(array) + "_[" + indices + "]"}, std::chrono::seconds(30),
        owner(array));
}

std::vector<Job> Client::jobs() {
    std::uint64_t listing;
    {
        std::lock_guard<std::mutex> g(owners_mu_);
        listing = ++generation_;
    }
    // Every state: a job that ended says how (CANCELLED, TIMEOUT) for
    // MinJobAge. 22.05's --json ignores filters and lists them anyway;
    // 23.02 and later apply squeue's default filter, which hides them.
    CommandResult r = run({"squeue", "--json", "--states=all"});
    if (!r.ok()) throw Error(ErrorCode::runtime, "squeue: " + r.describe());
    std::vector<Job> jobs = parse_squeue(r.out);
    std::lock_guard<std::mutex> g(owners_mu_);
    std::map<long, std::pair<std::string, std::uint64_t>> seen;
    for (const Job& j : jobs) {
        if (j.user.empty()) continue;
        seen[j.id] = {j.user, listing};
        if (j.array) seen[j.array] = {j.user, listing};
    }
    for (auto& [id, o] : owners_)
        if (o.second >= listing && !seen.count(id)) seen[id] = o;
    owners_ = std::move(seen);
    return jobs;
}

std::vector<Node> Client::nodes() {
    CommandResult r = run({"sinfo", "--json"});
    if (!r.ok()) throw Error(ErrorCode::runtime, "sinfo: " + r.describe());
    return parse_sinfo(r.out);
}

}  // namespace sandweave::controller::slurm
