// Slurm's output read into plain structs, 22.05 and 23.11+ alike
// (lib/controller/slurm_json.hpp).
#include "lib/controller/slurm_json.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"
#include "lib/core/json_input.hpp"

namespace sandweave::controller::slurm {

using nlohmann::json;

namespace {

std::string text_at(const json& o, const char* key) {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// A number: plain (22.05) or {"set": true, "infinite": false, "number": N}
// (23.11+); `none` when absent, unset, infinite or not a number.
long number_at(const json& o, const char* key, long none) {
    auto it = o.find(key);
    if (it == o.end()) return none;
    const json* v = &*it;
    if (v->is_object()) {
        auto set = v->find("set"), inf = v->find("infinite"), n = v->find("number");
        if (set == v->end() || !set->is_boolean() || !set->get<bool>()) return none;
        if (inf != v->end() && inf->is_boolean() && inf->get<bool>()) return none;
        if (n == v->end()) return none;
        v = &*n;
    }
    if (v->is_number_integer()) return v->get<long>();
    if (v->is_number_unsigned() && v->get<unsigned long>() <= 0x7fffffffffffffffUL)
        return static_cast<long>(v->get<unsigned long>());
    return none;
}

std::vector<std::string> words_at(const json& o, const char* key) {
    std::vector<std::string> out;
    if (!o.contains(key)) return out;
    const json& v = o.at(key);
    if (v.is_string()) out.push_back(v.get<std::string>());
    if (v.is_array())
        for (std::size_t i = 0; i < v.size(); ++i)
            if (v.at(i).is_string()) out.push_back(v.at(i).get<std::string>());
    return out;
}

std::string lower(std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
}
std::string upper(std::string s) {
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

// The flags Slurm's job_state_string() names before the base state, in its
// order: 22.05 prints the first one set; 23.11+ prints all in the array.
constexpr std::array<const char*, 13> job_flags_first = {
    "COMPLETING",    "STAGE_OUT",    "CONFIGURING",  "RESIZING", "REQUEUED",
    "REQUEUE_FED",   "REQUEUE_HOLD", "SPECIAL_EXIT", "STOPPED",  "REVOKED",
    "RESV_DEL_HOLD", "SIGNALING",    "UPDATE_DB"};

std::string job_state(const json& j) {
    std::vector<std::string> words = words_at(j, "job_state");
    if (words.size() <= 1) return words.empty() ? std::string() : words.front();
    for (const char* f : job_flags_first)
        if (std::find(words.begin(), words.end(), f) != words.end()) return f;
    return words.front();  // the base state comes first
}

// The base node states of 23.11+ (the rest of the array are flags).
bool base_node_state(const std::string& s) {
    for (const char* b : {"UNKNOWN", "DOWN", "IDLE", "ALLOCATED", "ERROR", "MIXED", "FUTURE"})
        if (s == b) return true;
    return false;
}

json parsed(const std::string& out, const char* command) {
    try {
        json j = parse_untrusted_json(out);
        if (!j.is_object()) throw Error(ErrorCode::runtime, "not a JSON object");
        return j;
    } catch (const std::exception& e) {
        throw Error(ErrorCode::runtime, std::string(command) + " --json: " + e.what());
    }
}

const json& list_at(const json& j, const char* key, const char* command) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_array())
        throw Error(ErrorCode::runtime,
                    std::string(command) + " --json: no list of " + key + " in its answer");
    return *it;
}

// The value of `Key=` in one line of `scontrol show job -o`; empty when absent.
std::string field_of(const std::string& line, const std::string& key) {
    std::istringstream words(line);
    std::string w;
    while (words >> w)
        if (w.size() > key.size() && w.compare(0, key.size() + 1, key + "=") == 0)
            return w.substr(key.size() + 1);
    return "";
}

long to_id(const std::string& s, long none) {
    if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos)
        return none;
    return std::stol(s);
}

}  // namespace

std::vector<Job> parse_squeue(const std::string& out) {
    json j = parsed(out, "squeue");
    std::vector<Job> jobs;
    for (const json& x : list_at(j, "jobs", "squeue")) {
        if (!x.is_object()) continue;
        Job job;
        job.id = number_at(x, "job_id", 0);
        job.name = text_at(x, "name");
        job.comment = text_at(x, "comment");
        job.user = text_at(x, "user_name");
        job.state = job_state(x);
        job.reason = text_at(x, "state_reason");
        job.nodes = text_at(x, "nodes");
        job.array = number_at(x, "array_job_id", 0);
        job.task = number_at(x, "array_task_id", -1);
        // 22.05 prints NO_VAL (0xfffffffe) for a task id that is not one.
        if (job.task >= 0xfffffffeL) job.task = -1;
        job.array_tasks = text_at(x, "array_task_string");
        job.start_time = number_at(x, "start_time", 0);
        if (job.id > 0) jobs.push_back(std::move(job));
    }
    return jobs;
}

std::vector<Node> parse_sinfo(const std::string& out) {
    json j = parsed(out, "sinfo");
    std::vector<Node> nodes;
    auto add = [&](Node n) {
        if (n.name.empty()) return;
        for (const Node& seen : nodes)
            if (seen.name == n.name) return;  // a node in two partitions
        nodes.push_back(std::move(n));
    };
    if (auto it = j.find("nodes"); it != j.end() && it->is_array()) {  // 22.05
        for (const json& x : *it) {
            if (!x.is_object()) continue;
            Node n;
            n.name = text_at(x, "name");
            n.state = lower(text_at(x, "state"));
            for (const auto& f : words_at(x, "state_flags")) n.flags.insert(upper(f));
            n.reason = text_at(x, "reason");
            n.gres = text_at(x, "gres");
            n.gres_used = text_at(x, "gres_used");
            add(std::move(n));
        }
        return nodes;
    }
    for (const json& x : list_at(j, "sinfo", "sinfo")) {  // 23.11+: groups of nodes
        if (!x.is_object()) continue;
        Node n;
        if (auto node = x.find("node"); node != x.end() && node->is_object())
            for (const auto& w : words_at(*node, "state")) {
                if (n.state.empty() && base_node_state(w))
                    n.state = lower(w);
                else
                    n.flags.insert(upper(w));
            }
        if (auto g = x.find("gres"); g != x.end() && g->is_object()) {
            n.gres = text_at(*g, "total");
            n.gres_used = text_at(*g, "used");
        }
        if (auto r = x.find("reason"); r != x.end() && r->is_object())
            n.reason = text_at(*r, "description");
        auto group = x.find("nodes");
        if (group == x.end() || !group->is_object()) continue;
        for (const auto& name : words_at(*group, "nodes")) {
            Node one = n;
            one.name = name;
            add(std::move(one));
        }
    }
    return nodes;
}

std::string node_failure(const Node& n) {
    if (n.state == "down" || n.state.rfind("down", 0) == 0)
        return "Slurm reports node " + n.name + " down";
    if (n.flags.count("NOT_RESPONDING")) return "Slurm reports node " + n.name + " not responding";
    return "";
}

std::optional<ShownJob> parse_scontrol_job(const std::string& out) {
    std::string line = out.substr(0, out.find('\n'));
    ShownJob s;
    s.id = to_id(field_of(line, "JobId"), 0);
    if (!s.id) return std::nullopt;
    s.state = field_of(line, "JobState");
    s.nodes = field_of(line, "NodeList");
    if (s.nodes == "(null)") s.nodes.clear();
    s.array = to_id(field_of(line, "ArrayJobId"), 0);
    s.task = to_id(field_of(line, "ArrayTaskId"), -1);
    return s;
}

long parse_sbatch(const std::string& out) {
    std::string line = out;
    while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
    line = line.substr(line.rfind('\n') == std::string::npos ? 0 : line.rfind('\n') + 1);
    return to_id(line.substr(0, line.find(';')), 0);
}

long parse_salloc_grant(const std::string& err) {
    const std::string granted = "Granted job allocation ";
    auto at = err.find(granted);
    if (at == std::string::npos) return 0;
    std::string rest = err.substr(at + granted.size());
    return to_id(rest.substr(0, rest.find_first_not_of("0123456789")), 0);
}

std::string comment_for(const std::string& controller, const std::string& rest) {
    return comment_prefix + controller + ":" + rest;
}

bool valid_controller_id(const std::string& id) {
    return !id.empty() && id.size() <= 32 && std::all_of(id.begin(), id.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    });
}

std::string controller_of(const Job& j) {
    const std::string prefix = comment_prefix;
    if (j.comment.rfind(prefix, 0) != 0) return "";
    auto colon = j.comment.find(':', prefix.size());
    if (colon == std::string::npos) return "";
    std::string id = j.comment.substr(prefix.size(), colon - prefix.size());
    return valid_controller_id(id) ? id : "";
}

std::string rest_of(const Job& j) {
    std::string c = controller_of(j);
    if (c.empty()) return "";
    return j.comment.substr(std::string(comment_prefix).size() + c.size() + 1);
}

std::string sandbox_of(const Job& j) {
    std::string rest = rest_of(j);
    return rest.substr(0, rest.find(':'));  // a pool member's goes on after the id
}

}  // namespace sandweave::controller::slurm
