// Reservations (lib/controller/controller_api.hpp): a batch's sandbox slots as
// one Slurm job array. Slurm queues the slots past the array's `%K` cap and
// starts the next as a sandbox's rm ends its slot's task; a create names
// its slot and waits until Slurm runs it. The controller keeps no list of
// reservations: the array's jobs carry their owner in their comment, and
// watch.cpp ends an array whose slots Slurm runs with no create coming.
#include <algorithm>
#include <set>

#include "lib/controller/controller_api.hpp"
#include "lib/controller/identity.hpp"
#include "lib/controller/slurm.hpp"
#include "lib/core/error.hpp"
#include "lib/core/log.hpp"

namespace sandweave::controller {

namespace {

// After the controller's mark on a reservation's jobs not yet holding a
// sandbox: the Unix user it is for and the batch key. Keys are each user's own.
std::string array_comment(const std::string& user, const std::string& key) {
    return ":array:" + user + "/" + key;
}

// The Unix user a reservation's job is for (array_comment); nullopt for a
// job of no reservation.
std::optional<std::string> array_user(const slurm::Job& job) {
    const std::string rest = slurm::rest_of(job), prefix = ":array:";
    if (rest.rfind(prefix, 0) != 0) return std::nullopt;
    auto slash = rest.find('/', prefix.size());
    if (slash == std::string::npos) return std::string();  // no user: an admin's
    return rest.substr(prefix.size(), slash - prefix.size());
}

void check_owner(const std::string& owner) {
    bool ok =
        !owner.empty() && owner.size() <= 64 && std::all_of(owner.begin(), owner.end(), [](char c) {
            return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '.' || c == '_' || c == '-';
        });
    if (!ok)
        throw Error(ErrorCode::usage,
                    "a reservation's owner is 1 to 64 letters, digits, '.', '_' or '-'");
}

long array_id(const std::string& id) {
    if (id.empty() || id.size() > 18 || id.find_first_not_of("0123456789") != std::string::npos)
        throw Error(ErrorCode::usage, "'" + id + "' is no reservation (a Slurm job array's id)");
    return std::stol(id);
}

}  // namespace

bool ControllerApi::stopping() {
    std::lock_guard<std::mutex> g(stop_mu_);
    return stopping_;
}

api::Reservation ControllerApi::batch_reserve(const api::ReserveParams& p) {
    check_owner(p.owner);
    if (p.count < 1 || p.at_once < 1)
        throw Error(ErrorCode::usage, "a reservation needs count and at_once of 1 or more");
    // What an earlier reservation of this owner left (its runner died):
    // ended, pending slots and waiting ones alike.
    // Only the caller's: batch keys are each user's own.
    const std::string user = caller().unix_user;
    const std::string comment = slurm_.comment(array_comment(user, p.owner));
    std::set<long> earlier;
    for (const slurm::Job& j : slurm_.jobs())
        if (j.comment == comment && (j.state == "PENDING" || j.state == "RUNNING"))
            earlier.insert(j.array ? j.array : j.id);
    for (long a : earlier) {
        log().info("controller: ending job array " + std::to_string(a) + " of an earlier run of " +
                   p.owner);
        slurm_.cancel(a);
    }
    slurm::AllocationRequest req;
    req.partition = c_.partition;
    req.name = instance_;
    req.ttl_ms = p.ttl_ms;
    req.cpus = p.cpus;
    req.memory = p.memory;
    req.comment = array_comment(user, p.owner);
    req.user = user;  // Slurm charges the array to the user who asked
    long id = slurm_.submit_array(req, p.count, std::min<std::int64_t>(p.at_once, p.count));
    {
        std::lock_guard<std::mutex> g(mu_);
        array_owners_[id] = user;
    }
    log().info("controller: job array " + std::to_string(id) + " of " + std::to_string(p.count) +
               " slots, " + std::to_string(p.at_once) + " at once, for " + p.owner);
    return api::Reservation{std::to_string(id), p.count,
                            static_cast<int>(std::min<std::int64_t>(p.at_once, p.count))};
}

api::Removed ControllerApi::batch_release(const api::IdParams& p) {
    long array = array_id(p.id);
    // Its slots that hold no sandbox: the pending ones and those Slurm
    // started for a create that will not come. A slot with a sandbox ends
    // with the sandbox's rm.
    bool found = false;
    std::vector<long> unused;  // task indices
    std::string pending;       // the pending record's indices
    const std::vector<slurm::Job> jobs = slurm_.jobs();
    // Slots a create is making its sandbox in, or made it in since Slurm
    // answered (a job moves from in_flight_ to placed_ under one lock): their
    // sandbox's rm ends them.
    std::set<long> placing;
    {
        std::lock_guard<std::mutex> g(mu_);
        placing = in_flight_;
        for (const auto& [id, pl] : placed_) placing.insert(pl.job);
    }
    array_owner(array, jobs);  // not_found when another user's
    for (const slurm::Job& j : jobs) {
        if (j.array != array || !slurm_.ours(j)) continue;
        found = true;
        if (j.state == "PENDING" && j.task < 0)
            pending = j.array_tasks;
        else if ((j.state == "PENDING" || j.state == "RUNNING") && slurm::sandbox_of(j).empty() &&
                 !placing.count(j.id))
            unused.push_back(j.task);
    }
    if (!found) throw Error(ErrorCode::not_found, "no reservation " + p.id + " on this controller");
    if (!pending.empty()) slurm_.cancel_tasks(array, pending);
    for (long index : unused) slurm_.cancel_task(array, index);
    return api::Removed{p.id};
}

SandboxView ControllerApi::create_in_slot(const api::CreateParams& p) {
    if (!p.reservation || !p.slot || *p.slot < 0)
        throw Error(ErrorCode::usage, "a create in a reservation names its reservation and slot");
    long array = array_id(*p.reservation);
    std::string owner = array_owner(array, {});
    long job = slurm_.await_array_task(array, *p.slot, [this] { return stopping(); });
    return place_in(job, p, owner,
                    [this](long j, const std::string& id) { slurm_.name_job(j, id); })
        .view;
}

// Whose reservation `array` is (its unused slots' comment, kept after the
// first look, or the owner of a sandbox in one of its slots; `jobs`:
// Slurm's listing if the caller has one); not_found when it is not the
// caller's to use. One Slurm no longer lists counts as the caller's:
// awaiting a slot of an ended array says it ended.
std::string ControllerApi::array_owner(long array, std::vector<slurm::Job> jobs) {
    std::optional<std::string> owner;
    {
        std::lock_guard<std::mutex> g(mu_);
        if (auto it = array_owners_.find(array); it != array_owners_.end()) owner = it->second;
    }
    if (!owner) {
        if (jobs.empty()) jobs = slurm_.jobs();
        for (const slurm::Job& j : jobs) {
            if (j.array != array || !slurm_.ours(j)) continue;
            if (auto user = array_user(j)) {
                owner = user;
                break;
            }
            // A slot holding a sandbox: the sandbox's owner.
            std::lock_guard<std::mutex> g(mu_);
            if (auto it = placed_.find(slurm::sandbox_of(j)); it != placed_.end()) {
                owner = it->second.owner;
                break;
            }
        }
        if (owner) {
            std::lock_guard<std::mutex> g(mu_);
            array_owners_[array] = *owner;
        }
    }
    if (!owner) return caller().unix_user;
    if (!caller().sees(*owner))
        throw Error(ErrorCode::not_found,
                    "no reservation " + std::to_string(array) + " on this controller");
    return *owner;
}

}  // namespace sandweave::controller
