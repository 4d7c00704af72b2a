#include "lib/sandbox/copy.hpp"

#include "lib/core/agent_wire.hpp"
#include "lib/core/error.hpp"
#include "lib/sandbox/activity.hpp"
#include "lib/sandbox/audit_glue.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

namespace {

// A relative path is the guest's own business: the copier runs in the
// sandbox's working directory (its template's `cwd`), as docker cp resolves
// one against the container's WORKDIR.
void check_guest_path(const std::string& path) {
    if (path.empty()) throw Error(ErrorCode::usage, "an empty guest path");
    if (path.size() > 4096 || path.find('\0') != std::string::npos)
        throw Error(ErrorCode::usage, "guest path is not usable");
}

// Runs the copier; its stderr (one line) is the reason when it fails.
void run_copier(Context& ctx, const std::string& id_text, agent::ExecSpec spec,
                const std::optional<UserSpec>& user, AttachOptions io, const std::string& what) {
    std::string id = ctx.store.resolve_id(id_text);
    CommandActivity busy(ctx.store.sandbox_dir(id));
    SandboxRecord r = ctx.store.load(id);
    // A sandbox whose runtime is gone says so first (connect_agent).
    AgentClient agent = connect_agent(ctx, r, what);
    require_audit_writer(ctx, r, what);
    UserSpec u = user.value_or(UserSpec{0, 0});
    spec.uid = u.uid;
    spec.gid = u.gid;
    spec.cwd = r.spec.cwd.empty() ? "/" : r.spec.cwd;
    std::string said;
    io.err = OutputSink{-1, [&said](std::string_view chunk) {
                            if (said.size() < 4096) said.append(chunk.substr(0, 4096));
                        }};
    RunOutcome o = agent.run(spec, io);
    if (o.status == 0 && !o.cancelled) return;
    while (!said.empty() && (said.back() == '\n' || said.back() == '\r')) said.pop_back();
    if (auto nl = said.find('\n'); nl != std::string::npos) said.resize(nl);
    if (o.cancelled) throw Error(ErrorCode::general, "cannot " + what + ": cancelled");
    if (said.empty())
        said =
            o.message.value_or("the guest's copier ended with status " + std::to_string(o.status));
    throw Error(ErrorCode::general, "sandbox " + id + ": " + said);
}

}  // namespace

void copy_out_of_sandbox(Context& ctx, const CopyOutRequest& req, const OutputSink& out,
                         RunControl* control, bool forward_own_signals) {
    check_guest_path(req.path);
    agent::ExecSpec spec;
    spec.flags = SW_EXEC_COPY_OUT;
    spec.argv = {req.path};
    AttachOptions io;
    io.stdin_fd = -1;
    io.out = out;
    io.control = control;
    io.forward_own_signals = forward_own_signals;
    run_copier(ctx, req.id, spec, req.user, io, "copy files out of a sandbox");
}

void copy_into_sandbox(Context& ctx, const CopyInRequest& req, int stream_fd, RunControl* control,
                       bool forward_own_signals) {
    check_guest_path(req.path);
    agent::ExecSpec spec;
    spec.flags = SW_EXEC_COPY_IN | (req.contents ? SW_EXEC_COPY_CONTENTS : 0u);
    spec.argv = {req.path, req.name};
    AttachOptions io;
    io.stdin_fd = stream_fd;
    io.out = OutputSink{-1, [](std::string_view) {}};
    io.control = control;
    io.forward_own_signals = forward_own_signals;
    run_copier(ctx, req.id, spec, req.user, io, "copy files into a sandbox");
}

}  // namespace sandweave
