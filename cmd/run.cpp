#include <signal.h>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"
#include "lib/core/log.hpp"
#include "lib/core/units.hpp"
#include "lib/sandbox/audit_glue.hpp"

namespace sandweave::cli {
namespace {

struct RunFlags {
    std::string id;
    CreateFlags create;
    std::string user, cwd, timeout, shell, audit_log;
    std::vector<std::string> env;
};

RunRequest to_run_request(const RunFlags& f, std::vector<std::string> command) {
    RunRequest req;
    if (!f.shell.empty() && !command.empty())
        throw Error(ErrorCode::usage,
                    "run: give either -c 'shell string' or `-- COMMAND`, not both");
    if (!f.shell.empty()) command = {"/bin/sh", "-c", f.shell};
    if (command.empty())
        throw Error(
            ErrorCode::usage,
            "run: missing command: put it after `--` (sandweave run ID -- id -u) or use -c");
    req.argv = std::move(command);
    if (!f.user.empty()) {
        auto u = parse_user(f.user);
        if (!u)
            throw Error(
                ErrorCode::usage,
                "--user '" + f.user + "': expected UID[:GID] with numeric ids (e.g. 1001:1001)");
        req.user = *u;
    }
    if (!f.cwd.empty()) {
        if (f.cwd[0] != '/')
            throw Error(ErrorCode::usage, "--cwd '" + f.cwd + "': must be an absolute path");
        req.cwd = f.cwd;
    }
    for (const auto& e : f.env) {
        auto eq = e.find('=');
        if (eq == std::string::npos || eq == 0)
            throw Error(ErrorCode::usage, "--env '" + e + "': expected KEY=VALUE");
    }
    req.env = f.env;
    if (!f.timeout.empty()) {
        auto d = parse_duration(f.timeout);
        if (!d)
            throw Error(ErrorCode::usage, "--timeout '" + f.timeout +
                                              "': expected a duration such as 30s, 500ms or 2m");
        req.timeout = *d;
    }
    return req;
}

// One-shot: create, run, remove. Termination signals are held back (blocked)
// for the whole call, so cleanup always runs; one that arrives while the command
// runs is forwarded to it by the attached runner.
int one_shot(Session& s, const RunFlags& f, RunRequest req, bool template_given) {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, nullptr);

    CreateRequest creq = to_create_request(f.create);
    creq.template_given = template_given;
    SandboxRecord r = create_sandbox(s.ctx(), creq);
    req.id = r.id;
    if (!f.audit_log.empty() && !r.spec.runtime.audit) {
        remove_sandbox(s.ctx(), r.id);
        throw Error(
            ErrorCode::usage,
            "run: --audit-log needs audit (add --audit or use a template with audit: true)");
    }
    int status = 125;
    std::optional<Error> failure;
    try {
        status = run_in_sandbox(s.ctx(), req);
    } catch (const Error& e) {
        failure = e;
    }
    if (!f.audit_log.empty()) {
        // terminate's final barrier first, so the export covers the whole run.
        try {
            terminate_sandbox(s.ctx(), r.id);
            auto st = export_audit(s.ctx(), r.id, f.audit_log);
            log().info("audit: " + f.audit_log + " complete=" + (st.complete ? "true" : "false") +
                       " events=" + std::to_string(st.events) +
                       " dropped=" + std::to_string(st.dropped) +
                       (st.reasons.empty() ? "" : " reasons=" + nlohmann::json(st.reasons).dump()));
            if (!st.complete)
                log().warn("the audit log " + f.audit_log +
                           " is incomplete (see its .status.json)");
        } catch (const Error& e) {
            log().error("audit export to " + f.audit_log + " failed: " + e.what());
            if (!failure) failure = e;
        }
    }
    try {
        remove_sandbox(s.ctx(), r.id);
    } catch (const Error& e) {
        log().error("removing one-shot sandbox " + r.id + ": " + e.what());
        if (!failure) failure = e;
    }
    if (failure) throw *failure;
    return status;
}

}  // namespace

void register_run(CLI::App& app, GlobalOptions& g, Outcome& out,
                  std::vector<std::string>& command) {
    auto* sub = app.add_subcommand(
        "run", "Run a command in a sandbox (or, with --template, in a one-shot sandbox)");
    sub->footer(
        "Usage: sandweave run ID [options] -- COMMAND [ARGS...]\n"
        "       sandweave run ID [options] -c 'shell string'\n"
        "       sandweave run --template T [create options] -- COMMAND [ARGS...]");
    auto f = std::make_shared<RunFlags>();
    sub->add_option("id", f->id, "Sandbox id or name (omit with --template for a one-shot run)");
    add_create_flags(*sub, f->create, false);
    sub->add_option("--user", f->user, "UID[:GID] to run as (default: the sandbox's user)");
    sub->add_option("--cwd", f->cwd, "Working directory in the sandbox");
    sub->add_option("-e,--env", f->env, "Environment KEY=VALUE (repeatable)")
        ->allow_extra_args(false);
    sub->add_option("--timeout", f->timeout,
                    "Kill the command after this long (exit 124), e.g. 30s");
    sub->add_option("-c", f->shell, "Run this string with /bin/sh -c");
    sub->add_option(
        "--audit-log", f->audit_log,
        "One-shot with audit: export the log here (and PATH.status.json) before removal");
    sub->callback([&g, &out, &command, f, sub] {
        out.docker_exit_codes = true;
        RunRequest req = to_run_request(*f, command);
        bool one_shot_mode = sub->count("--template") > 0 || sub->count("--from-snapshot") > 0;
        if (!f->id.empty() && one_shot_mode)
            throw Error(
                ErrorCode::usage,
                "run: give a sandbox ID or --template/--from-snapshot (one-shot), not both");
        if (f->id.empty() && !one_shot_mode)
            throw Error(ErrorCode::usage,
                        "run: missing sandbox ID (or --template T for a one-shot sandbox)");
        bool create_flags_used = sub->count("--hidepid") || sub->count("--audit") ||
                                 sub->count("--no-audit") || sub->count("--name") ||
                                 sub->count("--label");
        if (!f->audit_log.empty() && !one_shot_mode)
            throw Error(ErrorCode::usage,
                        "run: --audit-log applies to one-shot runs (--template); use `sandweave "
                        "audit export` for a sandbox");
        if (!one_shot_mode && create_flags_used)
            throw Error(ErrorCode::usage,
                        "run: create options (--hidepid, --audit, ...) only apply with --template");
        Session s(g);
        if (one_shot_mode) {
            out.exit_code = one_shot(s, *f, std::move(req), sub->count("--template") > 0);
        } else {
            req.id = f->id;
            out.exit_code = run_in_sandbox(s.ctx(), req);
        }
    });
}

}  // namespace sandweave::cli
