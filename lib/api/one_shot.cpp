// The one-shot run, composed from API calls so that it works the same over
// any connection. Every step after create runs even when an earlier one
// failed, so a one-shot never leaves its sandbox behind; the first error is
// the one reported.

#include <optional>

#include "lib/api/api.hpp"
#include "lib/core/log.hpp"
#include "lib/options/options.hpp"

namespace sandweave::api {

OneShotResult one_shot(Api& api, const OneShotParams& p, const RunIo& io) {
    // Refused before anything runs: an episode whose log cannot be had is
    // not worth running.
    if (p.audit_log && p.via && !api.offers("audit.fetch"))
        throw Error(ErrorCode::runtime, *p.via +
                                            " cannot send an audit log to the client (its "
                                            "sandweave is older; update it); nothing was run");
    if (p.run.argv.empty() && p.create.template_ref && !p.create.from_snapshot) {
        // The command is the template's (its image's) own: refuse before
        // creating anything when it has none.
        TemplateShowResult t = api.template_show(TemplateShowParams{*p.create.template_ref});
        SandboxSpec own;
        own.entrypoint = t.resolved.value("entrypoint", std::vector<std::string>{});
        own.cmd = t.resolved.value("cmd", std::vector<std::string>{});
        (void)command_line(own, {}, p.run.entrypoint, "template " + t.name);
    }
    SandboxView created = api.create(p.create);
    const std::string id = created.record.id;
    OneShotResult out;
    std::optional<Error> failure;
    auto step = [&](const char* what, auto fn) {
        try {
            fn();
        } catch (const Error& e) {
            log().error(std::string(what) + ": " + e.what());
            if (!failure) failure = e;
        }
    };

    if (p.audit_log && !created.record.spec.runtime.audit) {
        // Nothing runs; the caller says why in its own terms.
        out.audit_log_refused = true;
    } else {
        RunParams run = p.run;
        run.id = id;
        try {
            out.run = api.run(run, io);
        } catch (const Error& e) {
            failure = e;
        }
    }
    if (p.audit_log && created.record.spec.runtime.audit) {
        // terminate's final barrier first, so the export covers the whole run.
        step("terminating one-shot sandbox", [&] { api.terminate(IdParams{id}); });
        step("exporting the audit log", [&] {
            out.audit = p.via ? export_to_client(api, id, *p.audit_log, *p.via)
                              : api.audit_export(AuditExportParams{id, *p.audit_log});
        });
    }
    step("removing one-shot sandbox", [&] { api.rm(IdParams{id}); });
    if (failure) throw *failure;
    return out;
}

}  // namespace sandweave::api
