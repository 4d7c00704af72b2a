// The controller's sandbox calls: create asks Slurm for an allocation and
// creates the sandbox on the node it granted; every later call goes to that
// sandbox's worker (lib/weave/controller_api.hpp).
#include <stdlib.h>

#include "lib/core/error.hpp"
#include "lib/core/log.hpp"
#include "lib/weave/controller_api.hpp"
#include "lib/weave/slurm.hpp"

namespace sandweave::weave {

using nlohmann::json;

ControllerApi::ControllerApi(ClusterConfig c) : c_(std::move(c)) {
    if (!c_.slurm_conf.empty()) ::setenv("SLURM_CONF", c_.slurm_conf.c_str(), 1);
    rebuild();
}

void ControllerApi::rebuild() {
    for (const json& j : slurm::jobs()) {
        std::string id = slurm::sandbox_of(j);
        if (id.empty() || j.value("job_state", std::string()) != "RUNNING") continue;
        Placed p;
        p.id = id;
        p.job = j.value("job_id", 0L);
        p.node = j.value("nodes", std::string());
        try {
            p.link = std::make_shared<WorkerLink>(c_, p.job, p.node);
            p.name = p.link->api().inspect({id}).record.name;
            log().info("controller: sandbox " + id + " on " + p.node + " (job " +
                       std::to_string(p.job) + ") is back");
            std::lock_guard<std::mutex> g(mu_);
            placed_[id] = std::move(p);
        } catch (const Error& e) {
            log().warn("controller: job " + std::to_string(p.job) + " (sandbox " + id +
                       "): " + e.what());
        }
    }
}

SandboxView ControllerApi::create(const api::CreateParams& p) {
    long job = slurm::allocate({p.ttl_ms, c_.partition});
    try {
        std::string node = slurm::node_of(job);
        auto link = std::make_shared<WorkerLink>(c_, job, node);
        SandboxView v = link->api().create(p);
        slurm::name_job(job, v.record.id);
        v.worker = node;
        std::lock_guard<std::mutex> g(mu_);
        placed_[v.record.id] = Placed{v.record.id, v.record.name, node, job, link};
        return v;
    } catch (...) {
        slurm::cancel(job);
        throw;
    }
}

api::RunResult ControllerApi::run(const api::RunParams& p, const api::RunIo& io) {
    Placed pl = route(p.id).first;
    api::RunParams rp = p;
    rp.id = pl.id;
    return pl.link->api().run(rp, io);
}

api::ProcessList ControllerApi::ps(const api::IdParams& p) {
    return via(p, &api::Api::ps);
}

api::KillResult ControllerApi::kill(const api::KillParams& p) {
    Placed pl = route(p.id).first;
    api::KillParams k = p;
    k.id = pl.id;
    return pl.link->api().kill(k);
}

api::RunResult ControllerApi::wait(const api::HandleParams& p) {
    Placed pl = route(p.id).first;
    api::HandleParams h = p;
    h.id = pl.id;
    return pl.link->api().wait(h);
}

api::SandboxList ControllerApi::ls(const api::LsParams& p) {
    std::map<std::string, std::shared_ptr<WorkerLink>> by_node;
    std::map<std::string, std::string> node_of_id;
    {
        std::lock_guard<std::mutex> g(mu_);
        for (const auto& [id, pl] : placed_) {
            by_node.emplace(pl.node, pl.link);
            node_of_id[id] = pl.node;
        }
    }
    api::SandboxList out;
    for (const auto& [node, link] : by_node) {
        for (auto& v : link->api().ls(p).sandboxes) {
            auto it = node_of_id.find(v.record.id);
            if (it == node_of_id.end() || it->second != node) continue;
            v.worker = node;
            out.sandboxes.push_back(std::move(v));
        }
    }
    if (p.filter.empty()) {
        for (const json& j : slurm::jobs()) {
            if (!slurm::is_ours(j) || j.value("job_state", std::string()) != "PENDING") continue;
            SandboxView v;
            v.record.id = "job-" + std::to_string(j.value("job_id", 0L));
            v.record.spec.template_name = "-";
            v.live = SandboxState::pending;
            v.worker = "-";
            out.sandboxes.push_back(std::move(v));
        }
    }
    return out;
}

SandboxView ControllerApi::inspect(const api::IdParams& p) {
    auto [pl, q] = route(p.id);
    SandboxView v = pl.link->api().inspect(q);
    v.worker = pl.node;
    return v;
}

SandboxView ControllerApi::terminate(const api::IdParams& p) {
    auto [pl, q] = route(p.id);
    SandboxView v = pl.link->api().terminate(q);
    v.worker = pl.node;
    return v;
}

api::Removed ControllerApi::rm(const api::IdParams& p) {
    auto [pl, q] = route(p.id);
    api::Removed r = pl.link->api().rm(q);
    {
        std::lock_guard<std::mutex> g(mu_);
        placed_.erase(pl.id);
    }
    pl.link.reset();
    slurm::cancel(pl.job);
    return r;
}

api::RemovedList ControllerApi::prune() {
    api::RemovedList out;
    for (const auto& v : ls({}).sandboxes)
        if (v.live == SandboxState::stopped || v.live == SandboxState::failed)
            out.removed.push_back(rm({v.record.id}).removed);
    return out;
}

audit::Status ControllerApi::audit_export(const api::AuditExportParams&) {
    throw Error(ErrorCode::usage,
                "audit.export writes on the controller's host; a client fetches the log with "
                "audit.fetch");
}

audit::Status ControllerApi::audit_fetch(const api::IdParams& p,
                                         const std::function<void(std::string_view)>& on_data) {
    auto [pl, q] = route(p.id);
    return pl.link->api().audit_fetch(q, on_data);
}

audit::Status ControllerApi::audit_status(const api::IdParams& p) {
    return via(p, &api::Api::audit_status);
}

api::Empty ControllerApi::cp_out(const api::CpOutParams& p, const api::CpIo& io) {
    Placed pl = route(p.id).first;
    api::CpOutParams c = p;
    c.id = pl.id;
    return pl.link->api().cp_out(c, io);
}

api::Empty ControllerApi::cp_in(const api::CpInParams& p, const api::CpIo& io) {
    Placed pl = route(p.id).first;
    api::CpInParams c = p;
    c.id = pl.id;
    return pl.link->api().cp_in(c, io);
}

std::pair<Placed, api::IdParams> ControllerApi::route(const std::string& id) {
    std::lock_guard<std::mutex> g(mu_);
    const Placed* found = nullptr;
    if (auto it = placed_.find(id); it != placed_.end()) found = &it->second;
    for (const auto& [k, pl] : placed_)
        if (!found && !pl.name.empty() && pl.name == id) found = &pl;
    if (!found && !id.empty()) {
        int matches = 0;
        for (const auto& [k, pl] : placed_)
            if (k.rfind(id, 0) == 0) found = &pl, ++matches;
        if (matches > 1)
            throw Error(ErrorCode::usage, "'" + id + "' matches more than one sandbox");
    }
    if (!found) throw Error(ErrorCode::not_found, "no sandbox '" + id + "' on this controller");
    return {*found, api::IdParams{found->id}};
}

}  // namespace sandweave::weave
