#pragma once
// Warm pools (docs/design.md, "Pools"): N started sandboxes with identical options, handed out
// atomically. A pool is <state>/pools/<name>/pool.json (size, the create
// request); its members are ordinary sandboxes whose record names the pool and
// says "idle" or "acquired".
//
// acquire: under the pool's flock, pick an idle running member and mark it
// acquired (two callers never get the same one); with none idle, wait outside
// the lock for a member the refill is creating, or with none on its way create
// one on demand. Either way a background refill (`sandweave __pool-refill`, one
// at a time per pool via its own flock) brings the pool back to N without
// making acquire wait (while members are warm, a woken refill lets the
// acquire's answer go out before its create starts). A refill that fails records the error in
// pool.json and stops instead of spinning; the next acquire reports it.
// pool rm removes the pool record first (a running refill then stops and
// discards what it made), then every idle member with its audit writer.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/sandbox/records.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

PoolInfo create_pool(Context& ctx, const std::string& name, int size, const CreateRequest& req);
// Returns the acquired sandbox (already marked as the caller's).
SandboxRecord acquire_from_pool(Context& ctx, const std::string& name);
// Hands out the idle member `id` (created with CreateRequest::pool = name);
// the worker need not hold the pool: a Weave controller does, each member in
// a Slurm allocation of its own. No refill and no create on demand here.
SandboxRecord claim_pool_member(Context& ctx, const std::string& name, const std::string& id);
std::vector<PoolInfo> list_pools(Context& ctx);
PoolInfo pool_info(Context& ctx, const std::string& name);
PoolInfo resize_pool(Context& ctx, const std::string& name, int size);
// Also finishes a pool rm that was killed half-way (the directory without its record).
void remove_pool(Context& ctx, const std::string& name);
// Finishes every half-removed pool, with its idle members; returns their names.
std::vector<std::string> prune_pools(Context& ctx);

// pool.json's "request": the create options the pool was made with, as given
// (template, hidepid, audit, user, labels, snapshot), nothing resolved: every
// member, made now or by a later refill, is what `create` with the same options
// would make. Members have no names and are not handed out at creation.
nlohmann::json pool_request_to_json(const CreateRequest& r);
CreateRequest pool_request_from_json(const nlohmann::json& j, const std::string& pool);

// Body of `sandweave __pool-refill NAME` (state dir from the environment).
int pool_refill_main(Context& ctx, const std::string& name);
inline constexpr const char* pool_refill_verb = "__pool-refill";

}  // namespace sandweave
