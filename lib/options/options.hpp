#pragma once
// Option resolution in one place. Precedence, highest first:
//   explicit flag  >  filesystem snapshot's settings  >  template (after extends)  >  default
// An explicit `--hidepid 0` or `--no-audit` always wins. Every resolved value
// remembers where it came from so `inspect` and `template show` can explain it.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/core/units.hpp"
#include "lib/options/network.hpp"
#include "lib/options/template.hpp"

namespace sandweave {

inline constexpr std::uint64_t default_audit_max_bytes = 1ull << 30;

struct RuntimeOptions {
    int hidepid = 0;
    bool audit = false;
    std::uint64_t audit_max_bytes = default_audit_max_bytes;
    std::string platform = "ptrace";
    // runsc's --network: "none", or "sandbox" (the runtime's own network
    // stack in a namespace sandweave makes) exactly when `egress` is set.
    std::string network = "none";
    // `network: none` when unset; else what the guest may reach
    // (lib/options/network.hpp), enforced by lib/sandbox/network.hpp.
    std::optional<EgressPolicy> egress;
};

struct Resources {
    std::optional<double> cpus;
    std::optional<std::uint64_t> memory;
    std::optional<std::int64_t> pids;
};

// The display a `desktop:` template starts at create: an X server and a window
// manager, run by `start` (a program in the image) as `user`, which is never
// root and should not be the agent's uid (lib/sandbox/desktop.hpp).
inline constexpr const char* default_desktop_start = "/usr/local/lib/sandweave/desktop-start";
struct DesktopSpec {
    ScreenSize screen;
    std::string start = default_desktop_start;
    UserSpec user{1000, 1000};
};

// How long a sandbox may live (lib/sandbox/lifetime.hpp): `ttl` from when it
// was created (a pool member: acquired), `idle_timeout` from its last activity.
struct Lifetime {
    std::optional<std::chrono::milliseconds> ttl;
    std::optional<std::chrono::milliseconds> idle_timeout;
    bool any() const { return ttl || idle_timeout; }
};

// Everything needed to launch a sandbox, fully resolved.
// A guest TCP port published on a host loopback port for the sandbox's
// life (lib/sandbox/publish.hpp). Needs a network: a sandbox given one
// without an egress policy gets an empty one (nothing out).
struct PublishedPort {
    std::uint16_t host_port = 0, guest_port = 0;
    std::string str() const;  // "8080:80"
    bool operator==(const PublishedPort&) const = default;
};
// "GUEST_PORT" (the same port on the host) or "HOST_PORT:GUEST_PORT", each
// 1 to 65535; nullopt and `why` otherwise.
std::optional<PublishedPort> parse_published_port(const std::string& text, std::string& why);

struct SandboxSpec {
    std::string template_name;
    std::string image;
    UserSpec user;  // default user for `run`
    std::map<std::string, std::string> env;
    std::string cwd = "/";
    // What the sandbox runs when asked to run "itself" (an imported image's
    // Entrypoint and Cmd, or the template's): see command_line below.
    std::vector<std::string> entrypoint;
    std::vector<std::string> cmd;
    Resources resources;
    RuntimeOptions runtime;
    Lifetime lifetime;
    std::map<std::string, std::string> labels;
    std::optional<DesktopSpec> desktop;  // the template has `desktop:`
    std::vector<PublishedPort> publish;  // not kept by snapshots: ports are the host's
    // "/runtime_options/hidepid" -> "flag" | "snapshot S" | "template T" | "default"
    std::map<std::string, std::string> origin;
};

// What the command line said explicitly (unset = not given).
struct FlagOverrides {
    std::optional<int> hidepid;
    std::optional<bool> audit;
    std::optional<UserSpec> user;
    std::map<std::string, std::string> labels;
    std::optional<std::chrono::milliseconds> ttl;
    std::optional<std::chrono::milliseconds> idle_timeout;
    std::optional<double> cpus;
    std::optional<std::uint64_t> memory;
    // --network none: no network whatever the template says; --allow and
    // --deny add entries to the template's policy (or to an empty one).
    bool network_none = false;
    std::vector<Destination> allow, deny;
    std::vector<PublishedPort> publish;
};

// `snapshot_settings` is a filesystem snapshot's saved runtime_options object
// ({"hidepid": 2, "audit": true, ...}), if any.
SandboxSpec resolve_spec(const ResolvedTemplate& tmpl, const nlohmann::json* snapshot_settings,
                         const std::string& snapshot_name, const FlagOverrides& flags);

// ---- the sandbox's own command: docker run's rule -------------------------------
// The command a run starts, from its arguments `args` and the sandbox's
// entrypoint and cmd:
//   no override:  entrypoint + args, or entrypoint + cmd when args is empty;
//   an override:  override + args (the sandbox's cmd no longer applies, and
//                 an empty override runs args as they are).
// Throws a usage error when that leaves nothing to run. `who` names the
// sandbox in the message.
std::vector<std::string> command_line(const SandboxSpec& spec, const std::vector<std::string>& args,
                                      const std::optional<std::vector<std::string>>& entrypoint,
                                      const std::string& who);
// ---------------------------------------------------------------------------------

nlohmann::json to_json(const SandboxSpec& spec);
SandboxSpec spec_from_json(const nlohmann::json& j);

}  // namespace sandweave
