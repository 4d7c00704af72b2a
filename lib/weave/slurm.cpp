// The Slurm commands the controller runs (lib/weave/slurm.hpp).
#include "lib/weave/slurm.hpp"

#include <algorithm>
#include <cmath>
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

long allocate(const AllocationRequest& req) {
    std::vector<std::string> argv = {"salloc",
                                     "--no-shell",
                                     "--gres=sbx:1",
                                     "--ntasks=1",
                                     "--job-name=" + req.name,
                                     std::string("--comment=") + comment_prefix + req.comment};
    if (req.ttl_ms && *req.ttl_ms > 0)
        argv.push_back("--time=" + std::to_string((*req.ttl_ms + 59999) / 60000));
    if (!req.partition.empty()) argv.push_back("--partition=" + req.partition);
    if (req.cpus)
        argv.push_back("--cpus-per-task=" +
                       std::to_string(static_cast<long>(std::ceil(*req.cpus))));
    if (req.memory)
        argv.push_back("--mem=" + std::to_string((*req.memory + (1u << 20) - 1) >> 20) + "M");
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

std::string node_of(long job) {
    CommandResult r = run({"scontrol", "show", "job", "-o", std::to_string(job)});
    std::istringstream words(r.out);
    std::string w;
    while (words >> w)
        if (w.rfind("NodeList=", 0) == 0 && w.size() > 9) return w.substr(9);
    throw Error(ErrorCode::runtime, "Slurm did not say where job " + std::to_string(job) +
                                        " runs: " + last_line(r.err));
}

void cancel(long job) {
    run({"scancel", std::to_string(job)});
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
