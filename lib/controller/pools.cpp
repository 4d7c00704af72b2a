// The controller's pools (lib/controller/controller_api.hpp): each member is a
// sandbox in a Slurm allocation of its own, created on the node Slurm granted
// as an idle member (sandbox.create with "pool"), its WorkerLink open while
// it waits. acquire takes the first warm member (Slurm placed it: nothing is
// chosen here) and hands it over on its worker (pool.acquire with its id:
// the lifetime clock and the audit position start there, as locally), then
// asks Slurm for a replacement in the background.
//
// The pool itself (size, create options) rides in each member's job
// comment, `sandweave/<controller>:<id>:<definition as JSON>`, so a restarted controller
// rebuilds it from `squeue --json` and the members' records on the workers.
// A pool with no member left (size 0, everything handed out and removed) is
// not remembered across a restart.
#include <algorithm>
#include <deque>
#include <set>
#include <thread>

#include "lib/api/local.hpp"
#include "lib/controller/controller_api.hpp"
#include "lib/controller/identity.hpp"
#include "lib/controller/slurm.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/core/units.hpp"
#include "lib/sandbox/pool.hpp"

namespace sandweave::controller {

using nlohmann::json;

// Guarded by ControllerApi::pools_mu_.
struct ControllerPool {
    std::string name;
    std::string owner;  // the Unix user whose jobs its members are (Slurm keeps it)
    int size = 0;
    long generation = 0;  // the newest definition wins at a rebuild
    api::CreateParams options;
    std::string created_at;
    std::optional<std::string> last_error;
    std::deque<std::string> idle;  // warm members, oldest first
    std::set<std::string> acquired;
    int starting = 0;
    bool refilling = false;
    bool removed = false;

    json definition() const {
        return json{{"pool", name},
                    {"size", size},
                    {"generation", generation},
                    {"created_at", created_at},
                    {"options", api::to_json(options)}};
    }
};

namespace {

constexpr auto refill_wait_at_exit = std::chrono::seconds(30);

// A member's comment after the controller's mark.
std::string member_comment(const std::string& id, const ControllerPool& pool) {
    return id + ":" + pool.definition().dump();
}

// The pool definition a job's comment carries after its sandbox id.
std::optional<json> definition_of(const slurm::Job& job) {
    std::string rest = slurm::rest_of(job);
    std::string id = slurm::sandbox_of(job);
    if (id.empty() || rest.size() <= id.size() + 1 || rest[id.size()] != ':') return std::nullopt;
    try {
        json d = parse_untrusted_json(rest.substr(id.size() + 1));
        if (d.is_object() && d.contains("pool") && d.contains("size")) return d;
    } catch (const std::exception& e) {
        log().warn("controller: job " + std::to_string(job.id) +
                   ": unreadable pool definition: " + e.what());
    }
    return std::nullopt;
}

// Pools are each user's: alice's "web" and bob's "web" are two pools.
std::string pool_key(const std::string& owner, const std::string& name) {
    return owner + "/" + name;
}

// After the controller's mark on a member's job until it has its sandbox: whose
// pool it is for, so a pool rm cancels only its own pending refills.
std::string pending_comment(const ControllerPool& pool) {
    return ":" + pool.owner + "/" + pool.name;
}

void check_size(int size, const std::string& what) {
    if (size < 0 || size > 1000)
        throw Error(ErrorCode::usage, what + " " + std::to_string(size) + ": expected 0 to 1000");
}

}  // namespace

void ControllerApi::stop_refills_and_links() {
    {
        std::unique_lock<std::mutex> g(pools_mu_);
        refills_stopping_ = true;
        // A refill stops after the member it is making; one whose salloc
        // Slurm keeps pending is left to the process's exit.
        refills_done_.wait_for(g, refill_wait_at_exit, [&] { return refills_ == 0; });
    }
    // Every connection closed at once: each srun takes a while to end after
    // its serve saw the end of input, and a warm pool has many.
    std::vector<std::thread> closing;
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [id, pl] : placed_)
        closing.emplace_back([link = std::move(pl.link)]() mutable { link.reset(); });
    for (auto& t : closing) t.join();
}

// The caller's pool `name`; an admin's lookup falls back to the one pool of
// that name of any user.
std::shared_ptr<ControllerPool> ControllerApi::find_pool(const std::string& name) {
    const Identity& who = caller();
    if (auto it = pools_.find(pool_key(who.unix_user, name)); it != pools_.end()) return it->second;
    std::shared_ptr<ControllerPool> found;
    int matches = 0;
    if (who.admin)
        for (const auto& [key, pool] : pools_)
            if (pool->name == name) found = pool, ++matches;
    if (matches > 1)
        throw Error(ErrorCode::usage, "pool '" + name +
                                          "': several users have one of that name (as an admin, "
                                          "ask as its owner)");
    if (!found) throw Error(ErrorCode::not_found, "no such pool: " + name);
    return found;
}

Placed ControllerApi::make_member(const ControllerPool& pool) {
    // No --time: a member's lifetime starts when it is handed out, and the
    // worker enforces it from then on.
    slurm::AllocationRequest req;
    req.comment = pending_comment(pool);
    api::CreateParams p = pool.options;
    p.pool = pool.name;
    return place(p, req, pool.owner, [&](long job, const std::string& id) {
        slurm_.name_job(job, id, member_comment(id, pool));
    });
}

SandboxView ControllerApi::claim(const Placed& member, const std::string& pool) {
    api::PoolAcquireParams p;
    p.name = pool;
    p.id = member.id;
    SandboxView v = on_link(member, [&](api::Api& a) { return a.pool_acquire(p); });
    v.worker = member.node;
    return v;
}

void ControllerApi::drop_member(const std::string& id) {
    Placed pl;
    {
        std::lock_guard<std::mutex> g(mu_);
        auto it = placed_.find(id);
        if (it == placed_.end()) return;
        pl = it->second;
        placed_.erase(it);
        ending_.insert(pl.job);
    }
    try {
        try {
            // Lost or ended: its worker cannot be reached through this job
            // (the worker's reaper removes it once Slurm ends the job).
            if (pl.gone || !pl.link) throw Error(ErrorCode::general, pl.why);
            pl.link->api().rm({pl.id});
        } catch (const Error& e) {
            if (e.code() != ErrorCode::connection) throw;
            // Its connection died, maybe not its worker: once more through a
            // new step, so no sandbox outlives its job.
            WorkerLink(c_, pl.job, pl.node, slurm_.owner(pl.job)).api().rm({pl.id});
        }
    } catch (const Error& e) {
        log().warn("controller: removing pool member " + id + " on " + pl.node + ": " + e.what());
    }
    pl.link.reset();
    end_removed_job(pl.job);
}

void ControllerApi::replace_gone_members() {
    std::lock_guard<std::mutex> g(pools_mu_);
    for (auto& [name, pool] : pools_) {
        std::vector<std::string> gone;
        {
            std::lock_guard<std::mutex> m(mu_);
            for (const auto& id : pool->idle)
                if (auto it = placed_.find(id); it != placed_.end() && it->second.gone)
                    gone.push_back(id);
        }
        if (gone.empty()) continue;
        // They stay in ls as lost (or stopped) until removed; the pool asks
        // Slurm for replacements, which it places on the workers it has.
        std::erase_if(pool->idle, [&](const std::string& id) {
            return std::find(gone.begin(), gone.end(), id) != gone.end();
        });
        for (const auto& id : gone)
            log().warn("controller: pool " + name + ": member " + id + " is gone; replacing it");
        start_refill(pool);
    }
}

// Every member's job carries the current definition (after a resize).
void ControllerApi::retag(const ControllerPool& pool) {
    std::vector<std::string> ids(pool.idle.begin(), pool.idle.end());
    ids.insert(ids.end(), pool.acquired.begin(), pool.acquired.end());
    for (const auto& id : ids) {
        long job = 0;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = placed_.find(id);
            if (it == placed_.end()) continue;
            job = it->second.job;
        }
        slurm_.set_comment(job, member_comment(id, pool));
    }
}

// Under pools_mu_: the counts, forgetting members removed meanwhile.
PoolInfo ControllerApi::info_of(ControllerPool& pool) {
    {
        std::lock_guard<std::mutex> g(mu_);
        std::erase_if(pool.idle, [&](const std::string& id) { return !placed_.count(id); });
        std::erase_if(pool.acquired, [&](const std::string& id) { return !placed_.count(id); });
    }
    PoolInfo i;
    i.name = pool.name;
    i.size = pool.size;
    i.request = pool_request_to_json(api::to_create_request(pool.options));
    i.created_at = pool.created_at;
    i.last_error = pool.last_error;
    i.warm = static_cast<int>(pool.idle.size());
    i.in_use = static_cast<int>(pool.acquired.size());
    i.starting = pool.starting;
    return i;
}

// Under pools_mu_.
void ControllerApi::start_refill(const std::shared_ptr<ControllerPool>& pool) {
    if (pool->refilling || refills_stopping_) return;
    pool->refilling = true;
    ++refills_;
    std::thread([this, pool] { refill(pool); }).detach();
}

void ControllerApi::refill(std::shared_ptr<ControllerPool> pool) {
    std::unique_lock<std::mutex> g(pools_mu_);
    for (;;) {
        info_of(*pool);
        if (pool->removed || refills_stopping_ ||
            static_cast<int>(pool->idle.size()) + pool->starting >= pool->size)
            break;
        ++pool->starting;
        ControllerPool def = *pool;
        g.unlock();
        std::optional<Placed> made;
        std::optional<std::string> failed;
        try {
            made = make_member(def);
        } catch (const Error& e) {
            failed = e.what();
        }
        g.lock();
        --pool->starting;
        if (failed && pool->removed) break;  // its pending job was cancelled by the rm
        if (failed) {
            // Recorded for pool ls; the next acquire or resize tries again.
            log().error("controller: pool " + pool->name + ": refill failed: " + *failed);
            pool->last_error = failed;
            break;
        }
        if (pool->removed || static_cast<int>(pool->idle.size()) >= pool->size) {
            g.unlock();
            drop_member(made->id);  // the pool was removed or made smaller meanwhile
            g.lock();
            continue;
        }
        pool->idle.push_back(made->id);
        pool->last_error.reset();
    }
    pool->refilling = false;
    --refills_;
    refills_done_.notify_all();
}

PoolInfo ControllerApi::pool_create(const api::PoolCreateParams& p) {
    if (!valid_object_name(p.name))
        throw Error(ErrorCode::usage, "pool '" + p.name + "': not a valid pool name");
    check_size(p.size, "pool size");
    if (p.options.name) throw Error(ErrorCode::usage, "pool members cannot be given a name");
    if (p.options.pool) throw Error(ErrorCode::usage, "pool.create: options take no pool");
    (void)api::to_create_request(p.options);  // the worker's checks, before any allocation
    auto pool = std::make_shared<ControllerPool>();
    pool->name = p.name;
    pool->owner = caller().unix_user;
    pool->size = p.size;
    pool->options = p.options;
    if (pool->options.from_snapshot)
        pool->options.from_snapshot = own_snapshot(*pool->options.from_snapshot);
    pool->created_at = now_rfc3339();
    const std::string key = pool_key(pool->owner, p.name);
    {
        std::lock_guard<std::mutex> g(pools_mu_);
        if (pools_.count(key))
            throw Error(ErrorCode::usage, "pool '" + p.name + "' already exists");
        pool->starting = p.size;
        pools_[key] = pool;
    }
    std::vector<std::string> made;
    try {
        for (int i = 0; i < p.size; ++i) {
            made.push_back(make_member(*pool).id);
            std::lock_guard<std::mutex> g(pools_mu_);
            pool->idle.push_back(made.back());
            --pool->starting;
        }
    } catch (const Error& e) {
        {
            std::lock_guard<std::mutex> g(pools_mu_);
            pool->removed = true;
            pools_.erase(key);
        }
        for (const auto& id : made) drop_member(id);
        throw e.wrap("creating pool " + p.name);
    }
    std::lock_guard<std::mutex> g(pools_mu_);
    return info_of(*pool);
}

SandboxView ControllerApi::pool_acquire(const api::PoolAcquireParams& p) {
    if (p.id)
        throw Error(ErrorCode::usage,
                    "pool.acquire: the controller picks the member (no id through weave://)");
    std::shared_ptr<ControllerPool> pool;
    for (;;) {
        std::optional<Placed> member;
        {
            std::lock_guard<std::mutex> g(pools_mu_);
            pool = find_pool(p.name);
            info_of(*pool);
            if (pool->idle.empty()) break;
            std::string id = pool->idle.front();
            pool->idle.pop_front();
            std::lock_guard<std::mutex> m(mu_);
            member = placed_.at(id);
        }
        try {
            SandboxView v = claim(*member, p.name);
            std::lock_guard<std::mutex> g(pools_mu_);
            pool->acquired.insert(member->id);
            start_refill(pool);
            return v;
        } catch (const Error& e) {
            // Its worker or its sandbox is gone: dropped, and replaced below.
            log().warn("controller: pool " + p.name + ": member " + member->id + " on " +
                       member->node + " could not be handed out: " + e.what());
            drop_member(member->id);
        }
    }
    // Nothing warm: the caller gets a new one now, the pool refills behind.
    ControllerPool def;
    {
        std::lock_guard<std::mutex> g(pools_mu_);
        def = *pool;
    }
    try {
        Placed made = make_member(def);
        SandboxView v;
        try {
            v = claim(made, p.name);
        } catch (...) {
            drop_member(made.id);
            throw;
        }
        std::lock_guard<std::mutex> g(pools_mu_);
        pool->acquired.insert(made.id);
        start_refill(pool);
        return v;
    } catch (const Error& e) {
        std::lock_guard<std::mutex> g(pools_mu_);
        pool->last_error = e.what();
        throw e.wrap("acquiring from pool " + p.name);
    }
}

api::PoolList ControllerApi::pool_ls() {
    api::PoolList out;
    const Identity& who = caller();
    std::lock_guard<std::mutex> g(pools_mu_);
    for (auto& [key, pool] : pools_)
        if (who.sees(pool->owner)) out.pools.push_back(info_of(*pool));
    return out;
}

PoolInfo ControllerApi::pool_resize(const api::PoolResizeParams& p) {
    check_size(p.size, "size");
    std::vector<std::string> excess;
    std::shared_ptr<ControllerPool> pool;
    {
        std::lock_guard<std::mutex> g(pools_mu_);
        pool = find_pool(p.name);
        info_of(*pool);
        pool->size = p.size;
        ++pool->generation;
        pool->last_error.reset();
        while (static_cast<int>(pool->idle.size()) > p.size) {
            excess.push_back(pool->idle.back());
            pool->idle.pop_back();
        }
    }
    for (const auto& id : excess) drop_member(id);
    std::lock_guard<std::mutex> g(pools_mu_);
    retag(*pool);
    start_refill(pool);
    return info_of(*pool);
}

api::Removed ControllerApi::pool_rm(const api::NameParams& p) {
    std::shared_ptr<ControllerPool> pool;
    std::vector<std::string> idle, acquired;
    {
        std::unique_lock<std::mutex> g(pools_mu_);
        pool = find_pool(p.name);
        pool->removed = true;
        pools_.erase(pool_key(pool->owner, pool->name));
        // A refill whose job Slurm keeps pending fails when it is cancelled;
        // one making a member now drops it when it is made. Waited for, so
        // no job of the pool outlives the rm.
        const std::string pending = slurm_.comment(pending_comment(*pool));
        for (const slurm::Job& j : slurm_.jobs())
            if (j.state == "PENDING" && j.comment == pending) slurm_.cancel(j.id);
        refills_done_.wait_for(g, refill_wait_at_exit, [&] { return !pool->refilling; });
        idle.assign(pool->idle.begin(), pool->idle.end());
        acquired.assign(pool->acquired.begin(), pool->acquired.end());
        pool->idle.clear();
    }
    for (const auto& id : idle) drop_member(id);
    // Handed-out members are their callers' now: their jobs no longer name
    // the pool, so a restarted controller does not bring it back.
    for (const auto& id : acquired) {
        std::lock_guard<std::mutex> g(mu_);
        if (auto it = placed_.find(id); it != placed_.end()) slurm_.name_job(it->second.job, id);
    }
    return api::Removed{p.name};
}

void ControllerApi::rebuild_pools() {
    // A pool is its owner's: the owner of its members, adopted already.
    auto owner_of_member = [&](const std::string& id) -> std::optional<std::string> {
        std::lock_guard<std::mutex> g(mu_);
        auto it = placed_.find(id);
        if (it == placed_.end()) return std::nullopt;
        return it->second.owner;
    };
    std::map<std::string, std::shared_ptr<ControllerPool>> found;
    std::vector<std::pair<std::string, std::string>> members;  // pool key, sandbox
    for (const slurm::Job& j : slurm_.jobs()) {
        if (j.state != "RUNNING" || !slurm_.ours(j)) continue;
        auto d = definition_of(j);
        if (!d) continue;
        std::string name = d->value("pool", std::string());
        auto owner = owner_of_member(slurm::sandbox_of(j));
        if (!valid_object_name(name) || !owner) continue;
        const std::string key = pool_key(*owner, name);
        auto& pool = found[key];
        long generation = d->value("generation", 0L);
        if (!pool || generation > pool->generation) {
            auto fresh = std::make_shared<ControllerPool>();
            fresh->name = name;
            fresh->owner = *owner;
            fresh->size = std::clamp(d->value("size", 0), 0, 1000);
            fresh->generation = generation;
            fresh->created_at = d->value("created_at", std::string());
            try {
                fresh->options =
                    api::from_json<api::CreateParams>(d->value("options", json::object()));
            } catch (const std::exception& e) {
                log().warn("controller: pool " + name + ": unreadable options: " + e.what());
                continue;
            }
            pool = fresh;
        }
        members.emplace_back(key, slurm::sandbox_of(j));
    }
    for (const auto& [name, id] : members) {
        Placed pl;
        {
            std::lock_guard<std::mutex> g(mu_);
            auto it = placed_.find(id);
            if (it == placed_.end() || !found[name]) continue;
            pl = it->second;
        }
        try {
            if (!pl.link) throw Error(ErrorCode::general, pl.why);  // lost or ended
            SandboxView v = pl.link->api().inspect({id});
            if (v.record.pool_state == "acquired") {
                found[name]->acquired.insert(id);
                continue;
            }
            if (v.record.pool_state == "idle" && v.live == SandboxState::running) {
                found[name]->idle.push_back(id);
                continue;
            }
        } catch (const Error& e) {
            log().warn("controller: pool " + name + ": member " + id + ": " + e.what());
        }
        drop_member(id);  // an idle member that no longer runs: replaced by the refill
    }
    std::lock_guard<std::mutex> g(pools_mu_);
    for (auto& [name, pool] : found) {
        if (!pool) continue;
        log().info("controller: pool " + name + " is back: " + std::to_string(pool->idle.size()) +
                   " warm, " + std::to_string(pool->acquired.size()) + " in use, size " +
                   std::to_string(pool->size));
        pools_[name] = pool;
        start_refill(pool);
    }
}

}  // namespace sandweave::controller
