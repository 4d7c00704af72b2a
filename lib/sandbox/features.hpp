#pragma once
// Runtime features sandweave must never pretend to have. hidepid 1/2 is used only
// with a runtime that was seen enforcing it: once per runtime binary, a throwaway
// guest checks that an unprivileged process cannot see root's PID 1 under
// hidepid=2 (Debian's stock runsc accepts and silently ignores the option). The
// verdict is cached in <state>/runtime/, keyed by the binary's path, inode, size
// and mtime. A runtime that fails gets exit 5 and a message, never a silent pass.
// Audit needs the runtime's trace points (`runsc trace metadata`), cached alike.

#include <filesystem>
#include <string>
#include <vector>

#include "lib/audit/audit.hpp"
#include "lib/options/options.hpp"
#include "lib/sandbox/context.hpp"

namespace sandweave {

struct HidepidVerdict {
    bool supported = false;
    std::string detail;
    bool cached = false;
    bool conclusive = true;  // the probe answered (false: it could not run)
};

HidepidVerdict hidepid_support(Context& ctx, const std::filesystem::path& runsc);

// `runsc --version`'s first line, cached the same way (it costs a process start).
std::string runtime_version(Context& ctx, const std::filesystem::path& runsc);

// The patches built into a runtime, from the manifest runtime/build-runsc.sh
// writes beside it (`<runsc>.build.json`). Known only when that manifest
// exists and its sha256 is the binary's own (the digest is cached per binary);
// otherwise `detail` says why not, and sandweave claims nothing.
struct RuntimeBuild {
    bool known = false;
    std::vector<std::string> patches;
    std::string detail;
};
RuntimeBuild runtime_build(Context& ctx, const std::filesystem::path& runsc);

// The runtime's trace points (`runsc trace metadata`), cached per binary; throws
// ErrorCode::runtime when the runtime has no runtime monitoring.
audit::TraceMetadata trace_metadata(Context& ctx, const std::filesystem::path& runsc);

// Resource limits: refused (ErrorCode::runtime) when they cannot be enforced
// inside the guest (lib/runtime/limits.hpp); pids and memory need a runtime
// seen enforcing them, probed once per binary and cached like hidepid.
void require_limit_support(Context& ctx, const SandboxSpec& spec,
                           const std::filesystem::path& runsc);

void require_runtime_features(Context& ctx, const SandboxSpec& spec,
                              const std::filesystem::path& runsc);

}  // namespace sandweave
