// doctor through a controller (lib/controller/controller_api.hpp): the
// controller itself, Slurm (slurmctld and its nodes, from `sinfo --json`),
// and each worker daemon's own doctor, asked through a link onto its node
// (the daemon runs the sandboxes there, as root: a job of the controller's
// user could not check what it can do).
#include "lib/controller/controller_api.hpp"
#include "lib/controller/slurm.hpp"
#include "lib/core/error.hpp"

namespace sandweave::controller {

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
            api::DoctorResult d = link_to(name)->api().doctor();
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

}  // namespace sandweave::controller
