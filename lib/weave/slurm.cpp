// The Slurm commands the controller runs (lib/weave/slurm.hpp).
#include "lib/weave/slurm.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "lib/core/error.hpp"
#include "lib/core/json_input.hpp"

namespace sandweave::weave::slurm {

using nlohmann::json;

CommandResult run(const std::vector<std::string>& argv,
                  std::optional<std::chrono::milliseconds> timeout) {
    LocalRunner r;
    Command c;
    c.argv = argv;
    c.timeout = timeout;
    return r.run(c);
}

std::string last_line(const std::string& s) {
    auto end = s.find_last_not_of("\n ");
    if (end == std::string::npos) return "";
    auto start = s.rfind('\n', end);
    return s.substr(start == std::string::npos ? 0 : start + 1,
                    end - (start == std::string::npos ? 0 : start + 1) + 1);
}

namespace {

// The options salloc and sbatch share for one sandbox slot, after `command`'s own.
std::vector<std::string> allocation_argv(std::vector<std::string> argv,
                                         const AllocationRequest& req) {
    argv.insert(argv.end(), {"--gres=sbx:1", "--ntasks=1", "--job-name=" + req.name,
                             std::string("--comment=") + comment_prefix + req.comment});
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
std::string task_ref(const std::string& array, const std::string& index) {
    return array + "_" + index;
}

std::optional<std::pair<std::string, std::string>> started_task(long job, bool forget) {
    std::lock_guard<std::mutex> g(tasks_mu);
    auto it = started_tasks.find(job);
    if (it == started_tasks.end()) return std::nullopt;
    auto t = it->second;
    if (forget) started_tasks.erase(it);
    return t;
}

// The value of `Key=` in `scontrol show job -o`'s one line; empty when absent.
std::string field_of(const std::string& line, const std::string& key) {
    std::istringstream words(line);
    std::string w;
    while (words >> w)
        if (w.size() > key.size() && w.compare(0, key.size() + 1, key + "=") == 0)
            return w.substr(key.size() + 1);
    return "";
}

}  // namespace

long allocate(const AllocationRequest& req) {
    std::vector<std::string> argv = allocation_argv({"salloc", "--no-shell"}, req);
    CommandResult r = run(argv, std::nullopt);
    auto at = r.err.find("Granted job allocation ");
    if (!r.ok() || at == std::string::npos)
        throw Error(ErrorCode::runtime, "Slurm gave no allocation: " + last_line(r.err));
    return std::stol(r.err.substr(at + 23));
}

void name_job(long job, const std::string& sandbox_id) {
    run({"scontrol", "update", "JobId=" + std::to_string(job), "Name=" + sandbox_id,
         std::string("Comment=") + comment_prefix + sandbox_id});
}

long submit_array(const AllocationRequest& each, std::int64_t count, int at_once) {
    if (count < 1 || at_once < 1)
        throw Error(ErrorCode::usage, "a job array needs at least one task, one at a time");
    std::vector<std::string> argv =
        allocation_argv({"sbatch", "--parsable", "--output=/dev/null", "--error=/dev/null",
                         "--array=0-" + std::to_string(count) + "%" + std::to_string(at_once)},
                        each);
    // The batch script only holds the task's allocation; the sandbox runs in
    // a step of its own (worker_link.cpp).
    argv.push_back("--wrap=exec sleep infinity");
    CommandResult r = run(argv);
    std::string out = last_line(r.out);
    if (!r.ok() || out.empty() || out.find_first_not_of("0123456789;") != std::string::npos)
        throw Error(ErrorCode::runtime, "Slurm took no job array: " + last_line(r.err));
    return std::stol(out);  // "ID" or "ID;CLUSTER"
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

long await_array_task(long array, std::int64_t index, const std::function<bool()>& give_up) {
    const std::string task = task_ref(std::to_string(array), std::to_string(index));
    Waiting me(array, index);
    auto pause = std::chrono::milliseconds(20);
    for (;;) {
        CommandResult r = run({"scontrol", "show", "job", "-o", task});
        std::string state = field_of(r.out, "JobState"), node = field_of(r.out, "NodeList");
        if (state == "RUNNING" && !node.empty() && node != "(null)") {
            long job = std::stol(field_of(r.out, "JobId"));
            std::lock_guard<std::mutex> g(tasks_mu);
            started_tasks[job] = {task, node};
            return job;
        }
        // No answer (a slurmctld restarting) is waited out; a job Slurm
        // no longer knows, or one that ended, is not.
        // ("Job A_I not found" on stdout: a task cancelled while queued.)
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

std::string node_of(long job) {
    if (auto t = started_task(job, false)) return t->second;
    CommandResult r = run({"scontrol", "show", "job", "-o", std::to_string(job)});
    std::string node = field_of(r.out, "NodeList");
    if (!node.empty() && node != "(null)") return node;
    throw Error(ErrorCode::runtime, "Slurm did not say where job " + std::to_string(job) +
                                        " runs: " + last_line(r.err));
}

void cancel(long job) {
    if (auto t = started_task(job, true)) {
        run({"scancel", t->first});
        return;
    }
    const std::string id = std::to_string(job);
    // -v: without it, scancel says nothing of a job id it did not take.
    CommandResult r = run({"scancel", "-v", id});
    if (r.err.find("Invalid job id") == std::string::npos) return;
    // A job array's task answers to scancel only as ARRAY_TASK (22.05).
    CommandResult s = run({"scontrol", "show", "job", "-o", id});
    std::string array = field_of(s.out, "ArrayJobId"), task = field_of(s.out, "ArrayTaskId");
    if (!array.empty() && !task.empty() && array != id) run({"scancel", task_ref(array, task)});
}

void cancel_task(long array, long index) {
    run({"scancel", task_ref(std::to_string(array), std::to_string(index))});
}

void cancel_tasks(long array, std::string indices) {
    indices = indices.substr(0, indices.find('%'));  // the throttle
    if (indices.empty() || indices.find_first_not_of("0123456789,-") != std::string::npos) return;
    run({"scancel", std::to_string(array) + "_[" + indices + "]"});
}

namespace {

// The array `key` of a Slurm command's --json answer.
std::vector<json> json_list(const std::string& command, const std::string& key) {
    CommandResult r = run({command, "--json"});
    if (!r.ok()) throw Error(ErrorCode::runtime, command + ": " + r.describe());
    try {
        json j = parse_untrusted_json(r.out);
        return j.value(key, std::vector<json>{});
    } catch (const std::exception& e) {
        throw Error(ErrorCode::runtime, command + " --json: " + e.what());
    }
}

}  // namespace

std::vector<json> jobs() {
    return json_list("squeue", "jobs");
}

std::vector<json> nodes() {
    return json_list("sinfo", "nodes");
}

std::string node_failure(const json& node) {
    std::string state = node.value("state", std::string());
    std::vector<std::string> flags;
    if (auto f = node.find("state_flags"); f != node.end() && f->is_array())
        for (const auto& x : *f)
            if (x.is_string()) flags.push_back(x.get<std::string>());
    bool not_responding = std::find(flags.begin(), flags.end(), "NOT_RESPONDING") != flags.end();
    if (state.rfind("down", 0) == 0)
        return "Slurm reports node " + node.value("name", std::string()) + " down";
    if (not_responding)
        return "Slurm reports node " + node.value("name", std::string()) + " not responding";
    return "";
}

std::string state_of(const json& job) {
    return job.value("job_state", std::string());
}

namespace {

long number_at(const json& job, const char* key, long none) {
    auto it = job.find(key);
    return it != job.end() && it->is_number_integer() ? it->get<long>() : none;
}

}  // namespace

long array_of(const json& job) {
    return number_at(job, "array_job_id", 0);
}

long task_of(const json& job) {
    return number_at(job, "array_task_id", -1);
}

std::string user_of(const json& job) {
    if (auto n = job.find("user_name"); n != job.end() && n->is_string() && !n->empty())
        return n->get<std::string>();
    if (auto u = job.find("user_id"); u != job.end() && u->is_number_integer())
        return std::to_string(u->get<long>());
    return "";
}

bool is_ours(const json& job) {
    return job.value("comment", std::string()).rfind(comment_prefix, 0) == 0;
}

std::string sandbox_of(const json& job) {
    if (!is_ours(job)) return "";
    // A pool member's comment goes on after the id (lib/weave/pools.cpp).
    std::string rest =
        job.value("comment", std::string()).substr(std::string(comment_prefix).size());
    return rest.substr(0, rest.find(':'));
}

}  // namespace sandweave::weave::slurm
