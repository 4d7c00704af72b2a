#pragma once
// nftables through libnftables, in its JSON dialect only: callers build the
// commands as JSON values (never text with user input spliced in), and read
// the ruleset back as JSON. libnftables is opened on first use
// (lib/core/lazy_library.hpp): only a sandbox with a network needs it.

#include <nlohmann/json.hpp>

namespace sandweave {

// Runs {"nftables": [commands...]} as one transaction (all or nothing).
// Returns what nft printed, parsed (a list command's ruleset), or null.
// Throws Error(runtime) with nft's own first error line.
nlohmann::json nft_run(const nlohmann::json& commands);

// Like nft_run, but a failure is returned as false instead of thrown (for
// teardown steps where "no such chain" is the expected outcome).
bool nft_try(const nlohmann::json& commands);

}  // namespace sandweave
