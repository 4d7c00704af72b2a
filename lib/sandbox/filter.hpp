#pragma once
// Selecting sandboxes: the KEY=VALUE terms of `ls --filter` (and rm,
// terminate, prune), all of which must hold:
//   label=K=V      the sandbox has label K with value V (label=K: any value)
//   state=S        its live state: creating, running, stopped or failed (lost:
//                  through a controller, its worker failed)
//   template=T     the template it was created from
//   pool=P         a member of pool P (idle or acquired)
//   older-than=D   created more than D ago (30s, 2h, 1d is 24h)

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

struct SandboxFilter {
    std::map<std::string, std::optional<std::string>> labels;
    std::optional<SandboxState> state;
    std::optional<std::string> template_name;
    std::optional<std::string> pool;
    std::optional<std::chrono::milliseconds> older_than;

    bool matches(const SandboxView& v, std::chrono::system_clock::time_point now) const;
};

// Throws Error(usage) naming the term that is wrong (with a "did you mean").
SandboxFilter parse_filter(const std::vector<std::string>& terms);

// "2026-12-01T09:45:13Z" (what now_rfc3339 writes); nullopt otherwise.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& s);

}  // namespace sandweave
