// The controller's sandbox calls: create asks Slurm for an allocation and
// creates the sandbox on the node it granted; every later call goes to that
// sandbox's worker (lib/controller/controller_api.hpp).
#include <stdlib.h>

#include <cstdio>
#include <random>

#include "lib/controller/controller_api.hpp"
#include "lib/controller/identity.hpp"
#include "lib/controller/slurm.hpp"
#include "lib/core/error.hpp"
#include "lib/core/log.hpp"
#include "lib/core/sha256.hpp"
#include "lib/sandbox/filter.hpp"

namespace sandweave::controller {

namespace {

SandboxView last_view(const Placed& pl) {
    SandboxView v = pl.view;
    v.record.id = pl.id;
    v.worker = pl.node;
    if (pl.gone) {
        v.live = *pl.gone;
        v.record.error = pl.why;
        v.left.reset();
        v.limits.reset();
    } else if (!pl.unreachable.empty()) {
        v.record.error = "its worker " + pl.node + " cannot be reached: " + pl.unreachable;
    }
    return v;
}

audit::Status gone_status(const Placed& pl) {
    audit::Status st;
    st.sandbox_id = pl.id;
    st.complete = false;
    st.barrier = false;
    // Nothing was fetched: the export is empty and says so.
    st.sha256 = Sha256().hex_digest();
    bool lost = pl.gone == SandboxState::lost;
    st.reasons = {lost ? "worker_lost" : "job_ended"};
    st.error = pl.why + (lost ? "; nothing of its audit log can be checked against its worker"
                              : "; its worker " + pl.node + " keeps its audit log");
    return st;
}

}  // namespace

std::string owner_of(const SandboxView& v, const std::string& job_user) {
    if (!job_user.empty() && job_user != own_unix_user()) return job_user;
    auto it = v.record.spec.labels.find(owner_label);
    return it == v.record.spec.labels.end() ? std::string() : it->second;
}

ControllerApi::ControllerApi(ClusterConfig c, std::shared_ptr<CommandRunner> runner)
    : c_(std::move(c)), slurm_(std::move(runner), c_.controller_id) {
    std::random_device rd;
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(rd()));
    instance_ = std::string("sandweave-") + hex;
    if (!c_.slurm_conf.empty()) ::setenv("SLURM_CONF", c_.slurm_conf.c_str(), 1);
    watch_once(true);
    watcher_ = std::thread([this] { watch_loop(); });
}

ControllerApi::~ControllerApi() {
    {
        std::lock_guard<std::mutex> g(stop_mu_);
        stopping_ = true;
    }
    stop_cv_.notify_all();
    if (watcher_.joinable()) watcher_.join();
    stop_refills_and_links();
}

Placed ControllerApi::place(api::CreateParams p, slurm::AllocationRequest req,
                            const std::string& owner,
                            const std::function<void(long, const std::string&)>& name_job) {
    req.partition = c_.partition;
    req.name = instance_;
    req.user = owner;  // Slurm charges the job to the user who asked  // the reaper's mark of this
                       // controller's creates
    req.cpus = p.cpus;
    req.memory = p.memory;
    return place_in(slurm_.allocate(req), std::move(p), owner, name_job);
}

Placed ControllerApi::place_in(long job, api::CreateParams p, const std::string& owner,
                               const std::function<void(long, const std::string&)>& name_job) {
    p.reservation.reset();
    p.slot.reset();
    {
        std::lock_guard<std::mutex> g(mu_);
        in_flight_.insert(job);
    }
    try {
        std::string node = slurm_.node_of(job);
        auto link = std::make_shared<WorkerLink>(c_, job, node, slurm_.owner(job));
        // The worker's epilog finds the sandboxes of an ending job by this label.
        p.labels[slurm::job_label] = std::to_string(job);
        // Its snapshots carry its labels: whose they are (catalog.cpp).
        p.labels[owner_label] = owner;
        SandboxView v = link->api().create(p);
        name_job(job, v.record.id);
        v.worker = node;
        Placed pl{v.record.id, v.record.name, node, job, link, v, {}, {}, 0, {}, owner};
        std::lock_guard<std::mutex> g(mu_);
        placed_[pl.id] = pl;
        in_flight_.erase(job);
        return pl;
    } catch (...) {
        {
            std::lock_guard<std::mutex> g(mu_);
            in_flight_.erase(job);
        }
        slurm_.cancel(job);
        throw;
    }
}

SandboxView ControllerApi::create(const api::CreateParams& params) {
    api::CreateParams p = params;
    if (p.from_snapshot) p.from_snapshot = own_snapshot(*p.from_snapshot);
    if (p.reservation || p.slot) return create_in_slot(p);
    slurm::AllocationRequest req;
    req.ttl_ms = p.ttl_ms;
    return place(p, req, caller().unix_user,
                 [this](long job, const std::string& id) { slurm_.name_job(job, id); })
        .view;
}

api::RunResult ControllerApi::run(const api::RunParams& p, const api::RunIo& io) {
    Placed pl = route(p.id).first;
    api::RunParams rp = p;
    rp.id = pl.id;
    return on_link(pl, [&](api::Api& a) { return a.run(rp, io); });
}

api::ProcessList ControllerApi::ps(const api::IdParams& p) {
    return via(p, &api::Api::ps);
}

api::KillResult ControllerApi::kill(const api::KillParams& p) {
    Placed pl = route(p.id).first;
    api::KillParams k = p;
    k.id = pl.id;
    return on_link(pl, [&](api::Api& a) { return a.kill(k); });
}

api::RunResult ControllerApi::wait(const api::HandleParams& p) {
    Placed pl = route(p.id).first;
    api::HandleParams h = p;
    h.id = pl.id;
    return on_link(pl, [&](api::Api& a) { return a.wait(h); });
}

api::SandboxList ControllerApi::ls(const api::LsParams& p) {
    SandboxFilter filter = parse_filter(p.filter);
    const Identity& who = caller();
    // Each link once: one of a job of another user than the controller's
    // shows only that job's sandboxes (lib/rpc/step_peer.hpp), so a node is
    // asked through each such link, and through one of the controller's own.
    std::map<WorkerLink*, std::pair<std::string, std::shared_ptr<WorkerLink>>> links;
    {
        std::lock_guard<std::mutex> g(mu_);
        const std::string& own = own_unix_user();
        std::set<std::string> own_node;
        for (const auto& [id, pl] : placed_) {
            if (pl.gone || !pl.link || !who.sees(pl.owner)) continue;
            bool unscoped = pl.owner == own;
            if (unscoped && !own_node.insert(pl.node).second) continue;
            links.emplace(pl.link.get(), std::make_pair(pl.node, pl.link));
        }
    }
    std::map<std::string, std::map<std::string, SandboxView>> fresh;  // node -> id -> view
    std::set<std::string> broken;
    for (const auto& [ptr, entry] : links) {
        const auto& [node, link] = entry;
        try {
            for (auto& v : link->api().ls(p).sandboxes) fresh[node][v.record.id] = std::move(v);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::connection) throw;
            broken.insert(node);
        }
    }
    if (!broken.empty()) watch_once();
    api::SandboxList out;
    auto now = std::chrono::system_clock::now();
    {
        std::lock_guard<std::mutex> g(mu_);
        for (auto& [id, pl] : placed_) {
            if (!who.sees(pl.owner)) continue;
            if (pl.gone || broken.count(pl.node)) {
                SandboxView v = last_view(pl);
                if (filter.matches(v, now)) out.sandboxes.push_back(std::move(v));
                continue;
            }
            auto n = fresh.find(pl.node);
            if (n == fresh.end()) continue;
            auto it = n->second.find(id);
            if (it == n->second.end()) continue;  // the worker's filter left it out
            it->second.worker = pl.node;
            pl.view = it->second;
            out.sandboxes.push_back(it->second);
        }
    }
    if (p.filter.empty()) {
        for (const slurm::Job& j : slurm_.jobs()) {
            if (!slurm_.ours(j) || j.state != "PENDING" || !who.sees(j.user)) continue;
            SandboxView v;
            v.record.id = "job-" + std::to_string(j.id);
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
    if (pl.gone) return last_view(pl);
    SandboxView v;
    try {
        v = on_link(pl, [&, q = q](api::Api& a) { return a.inspect(q); });
    } catch (const Error& e) {
        // Its worker out of reach: what was last known, and why.
        if (e.code() != ErrorCode::connection) throw;
        return last_view(route(p.id).first);
    }
    v.worker = pl.node;
    std::lock_guard<std::mutex> g(mu_);
    if (auto it = placed_.find(pl.id); it != placed_.end() && !it->second.gone) it->second.view = v;
    return v;
}

SandboxView ControllerApi::terminate(const api::IdParams& p) {
    auto [pl, q] = route(p.id);
    if (pl.gone) return last_view(pl);
    SandboxView v = on_link(pl, [&, q = q](api::Api& a) { return a.terminate(q); });
    v.worker = pl.node;
    return v;
}

api::Removed ControllerApi::rm(const api::IdParams& p) {
    auto [pl, q] = route(p.id);
    api::Removed r{pl.id};
    if (pl.gone == SandboxState::stopped) {
        // Kept by its worker for the retention: removed there now.
        try {
            r = link_to(pl.node)->api().rm(q);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::not_found)
                log().warn("controller: sandbox " + pl.id + ": removing it on " + pl.node + ": " +
                           e.what() + "; its worker's retention removes it");
        }
    } else if (!pl.gone) {
        try {
            r = pl.link->api().rm(q);
        } catch (const Error& e) {
            if (e.code() != ErrorCode::connection) throw;
            watch_once();
            // Lost or ended meanwhile: its worker is out of reach, so only the
            // controller's view and the job go. Else once more through a new
            // step; when even that cannot reach it, its job is ending or its
            // worker failing: the job is cancelled below either way, and the
            // worker's epilog or the workers' reaper removes the sandbox.
            if (!route(p.id).first.gone) {
                try {
                    r = WorkerLink(c_, pl.job, pl.node, slurm_.owner(pl.job)).api().rm(q);
                } catch (const Error& again) {
                    if (again.code() != ErrorCode::connection) throw;
                    log().warn("controller: sandbox " + pl.id + ": its worker " + pl.node +
                               " is out of reach while its job ends (" + again.what() +
                               "); its job's end removes it");
                }
            }
        }
    }
    {
        std::lock_guard<std::mutex> g(mu_);
        placed_.erase(pl.id);
        ending_.insert(pl.job);
    }
    pl.link.reset();
    end_removed_job(pl.job);
    return r;
}

void ControllerApi::end_removed_job(long job) {
    // The job's comment loses its sandbox id first: a controller started
    // while Slurm still lists the ended job would list the removed sandbox
    // again (classify's list_ended). A job already ended keeps it (Slurm
    // refuses the update); its worker no longer has the sandbox either way.
    slurm_.set_comment(job, "");
    slurm_.cancel(job);
}

api::RemovedList ControllerApi::prune() {
    api::RemovedList out;
    for (const auto& v : ls({}).sandboxes)
        if (v.live == SandboxState::stopped || v.live == SandboxState::failed ||
            v.live == SandboxState::lost)
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
    if (pl.gone == SandboxState::stopped)
        return on_worker_of_ended(pl,
                                  [&, q = q](api::Api& a) { return a.audit_fetch(q, on_data); });
    if (pl.gone) return gone_status(pl);
    return on_link(pl, [&, q = q](api::Api& a) { return a.audit_fetch(q, on_data); });
}

audit::Status ControllerApi::audit_status(const api::IdParams& p) {
    auto [pl, q] = route(p.id);
    if (pl.gone == SandboxState::stopped)
        return on_worker_of_ended(pl, [&, q = q](api::Api& a) { return a.audit_status(q); });
    if (pl.gone) return gone_status(pl);
    return on_link(pl, [&, q = q](api::Api& a) { return a.audit_status(q); });
}

audit::Status ControllerApi::on_worker_of_ended(const Placed& pl,
                                                const std::function<audit::Status(api::Api&)>& fn) {
    // Its job ended, so no step can go into it; the worker daemon keeps the
    // sandbox (final barrier taken by the epilog) for its retention, and is
    // reached as for calls that name no sandbox.
    try {
        return fn(link_to(pl.node)->api());
    } catch (const Error& e) {
        if (e.code() == ErrorCode::not_found) {
            audit::Status st = gone_status(pl);
            st.error = pl.why + "; its worker " + pl.node +
                       " no longer keeps it (its retention passed, or it was removed there)";
            return st;
        }
        if (e.code() != ErrorCode::connection) throw;
        audit::Status st = gone_status(pl);
        st.error = pl.why + "; its worker " + pl.node + " keeps its audit log but cannot be " +
                   "reached now: " + e.what();
        return st;
    }
}

api::Empty ControllerApi::cp_out(const api::CpOutParams& p, const api::CpIo& io) {
    Placed pl = route(p.id).first;
    api::CpOutParams c = p;
    c.id = pl.id;
    return on_link(pl, [&](api::Api& a) { return a.cp_out(c, io); });
}

api::Empty ControllerApi::cp_in(const api::CpInParams& p, const api::CpIo& io) {
    Placed pl = route(p.id).first;
    api::CpInParams c = p;
    c.id = pl.id;
    return on_link(pl, [&](api::Api& a) { return a.cp_in(c, io); });
}

std::pair<Placed, api::IdParams> ControllerApi::route(const std::string& id) {
    const Identity& who = caller();
    std::lock_guard<std::mutex> g(mu_);
    const Placed* found = nullptr;
    if (auto it = placed_.find(id); it != placed_.end() && who.sees(it->second.owner))
        found = &it->second;
    for (const auto& [k, pl] : placed_)
        if (!found && !pl.name.empty() && pl.name == id && who.sees(pl.owner)) found = &pl;
    if (!found && !id.empty()) {
        int matches = 0;
        for (const auto& [k, pl] : placed_)
            if (k.rfind(id, 0) == 0 && who.sees(pl.owner)) found = &pl, ++matches;
        if (matches > 1)
            throw Error(ErrorCode::usage, "'" + id + "' matches more than one sandbox");
    }
    if (!found) throw Error(ErrorCode::not_found, "no such sandbox: " + id);
    return {*found, api::IdParams{found->id}};
}

}  // namespace sandweave::controller
