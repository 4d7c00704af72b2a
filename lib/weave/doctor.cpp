// doctor through a controller (lib/weave/controller_api.hpp): the
// controller itself, Slurm (slurmctld and its nodes, from `sinfo --json`),
// and each worker's own `sandweave doctor`, run by a short job on that node.
#include "lib/api/fields.hpp"
#include "lib/core/error.hpp"
#include "lib/core/json_input.hpp"
#include "lib/weave/controller_api.hpp"
#include "lib/weave/slurm.hpp"

namespace sandweave::weave {

namespace {

// A worker's `sandweave doctor --json`, run as its own one-task job on
// `node` (no sandbox slot: it needs none). Throws with Slurm's or the
// worker's one line when it could not run.
api::DoctorResult worker_doctor(slurm::Client& slurm, const ClusterConfig& c,
                                const std::string& node) {
    std::vector<std::string> argv = {
        "srun",          "--nodes=1",      "--ntasks=1", "--nodelist=" + node,
        "--time=1",      "--immediate=20", "--quiet",    "--job-name=sandweave-doctor",
        c.worker_binary, "--json"};
    if (!c.partition.empty()) argv.insert(argv.begin() + 1, "--partition=" + c.partition);
    if (auto it = c.state_dirs.find(node); it != c.state_dirs.end()) {
        argv.push_back("--state-dir");
        argv.push_back(it->second);
    }
    argv.push_back("doctor");
    CommandResult r = slurm.run(argv, std::chrono::seconds(60));
    // doctor exits 5 when sandboxes cannot run there: its report still says why.
    try {
        api::DoctorResult d;
        api::decode_value(parse_untrusted_json(r.out), d, "doctor on " + node,
                          api::Unknown::ignore);
        return d;
    } catch (const std::exception&) {
        std::string why = slurm::last_line(r.err);
        throw Error(ErrorCode::runtime, "srun doctor: " + (why.empty() ? r.describe() : why));
    }
}

}  // namespace

api::DoctorResult ControllerApi::doctor() {
    api::DoctorResult out;
    auto add = [&](std::string name, bool ok, std::string detail, bool required = true) {
        out.checks.push_back(api::Check{std::move(name), ok, required, std::move(detail)});
    };
    add("controller", true,
        std::string("sandweave ") + SANDWEAVE_VERSION + "; clients: TLS, token required");
    std::vector<slurm::Node> nodes;
    try {
        nodes = slurm_.nodes();
        add("slurmctld", true, "answers: " + std::to_string(nodes.size()) + " node(s)");
    } catch (const std::exception& e) {
        add("slurmctld", false, e.what());
    }
    for (const slurm::Node& n : nodes) {
        const std::string& name = n.name;
        std::string failure = slurm::node_failure(n);
        std::string detail = n.state + ", gres " + n.gres + " (used " + n.gres_used + ")";
        if (!failure.empty()) detail = failure + ": " + detail;
        // A failed worker is a warning: Slurm places sandboxes on the others.
        add("node " + name, failure.empty(), detail, false);
        if (!failure.empty()) continue;
        try {
            api::DoctorResult d = worker_doctor(slurm_, c_, name);
            for (auto& ch : d.checks) {
                ch.name = name + ": " + ch.name;
                out.checks.push_back(std::move(ch));
            }
        } catch (const std::exception& e) {
            add(name + ": doctor", false, e.what());
        }
    }
    out.ok = true;
    for (const auto& ch : out.checks)
        if (ch.required && !ch.ok) out.ok = false;
    return out;
}

}  // namespace sandweave::weave
