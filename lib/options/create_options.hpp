#pragma once
// A create's options as JSON: the one encoding of what a create may set over
// its template (FlagOverrides), and the one place each value is checked.
// sandbox.create and pool.create carry these keys among their params
// (docs/protocol.md), a pool keeps its members' options in them, and the
// worker lists them in its hello (`create_options`), which the SDK's tests
// check its own keys against.
//
//   hidepid 0|1|2, audit bool, user "UID[:GID]", labels {K: V},
//   ttl_ms, idle_timeout_ms (positive), cpus (positive), memory (bytes,
//   positive), network "none", allow, deny [destination], publish ["[HOST:]GUEST"]

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/options/options.hpp"

namespace sandweave {

const std::vector<std::string>& create_option_keys();

// labels always; every other key only when set.
nlohmann::json create_options_to_json(const FlagOverrides& flags);

// The create options among `j`'s keys (others are left alone), each
// checked: a wrong type or value throws Error(usage) naming the key and the
// value, e.g. "hidepid 3: expected 0, 1 or 2".
FlagOverrides create_options_from_json(const nlohmann::json& j);

// The checks the reader above makes, for a caller that reads the value its
// own way (a batch spec, a template): the problem, or nothing.
std::optional<std::string> hidepid_problem(std::int64_t hidepid);

}  // namespace sandweave
