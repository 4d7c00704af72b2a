// The one-shot run, composed from API calls so that it works the same over
// any connection. Every step after create runs even when an earlier one
// failed, so a one-shot never leaves its sandbox behind; the first error is
// the one reported.

#include <optional>

#include "lib/api/api.hpp"
#include "lib/core/log.hpp"

namespace sandweave::api {

OneShotResult one_shot(Api& api, const OneShotParams& p, const RunIo& io) {
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
