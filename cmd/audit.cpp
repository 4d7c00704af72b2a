#include <cstdio>
#include <iostream>

#include "cmd/common.hpp"
#include "lib/audit/audit.hpp"
#include "lib/core/error.hpp"

namespace sandweave::cli {

namespace {

// One line by default (complete=… events=… dropped=… bytes=… sha256=…), the
// whole status with --json.
void print_audit_status(const GlobalOptions& g, const audit::Status& st) {
    if (g.json)
        print_json(api::encode_value(st));
    else
        print_line(audit::summary_line(st));
}

}  // namespace

void register_audit(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* audit =
        app.add_subcommand("audit", "Export and inspect a sandbox's protected runtime audit log");
    audit->require_subcommand(1);

    auto* exp = audit->add_subcommand(
        "export",
        "Flush barrier, then write PATH and PATH.status.json (0600); exit 3 when incomplete");
    auto id = std::make_shared<std::string>();
    auto path = std::make_shared<std::string>();
    exp->add_option("id", *id, "Sandbox id or name")->required()->type_name("SANDBOX");
    exp->add_option("path", *path, "Where to write the JSONL log")->required()->type_name("FILE");
    exp->callback([&g, &out, id, path] {
        Session s(g);
        // A remote connection writes PATH here, on the client (RpcClient).
        auto st = s.api().audit_export({*id, *path});
        print_audit_status(g, st);
        out.exit_code = st.complete ? 0 : 3;
    });

    auto* status =
        audit->add_subcommand("status", "The writer's live figures (no export, never complete)");
    auto sid = std::make_shared<std::string>();
    status->add_option("id", *sid, "Sandbox id or name")->required()->type_name("SANDBOX");
    status->callback([&g, &out, sid] {
        Session s(g);
        print_audit_status(g, s.api().audit_status({*sid}));
        out.exit_code = 0;
    });

    // ---- audit verify (offline: no sandbox, no connection) ----
    auto* verify = audit->add_subcommand(
        "verify",
        "Check a copy of an exported log against its sidecar and its record chain; exit 3 at "
        "the first discrepancy");
    auto vpath = std::make_shared<std::string>();
    auto vside = std::make_shared<std::string>();
    verify->add_option("path", *vpath, "The exported JSONL log")->required();
    verify->add_option("--status", *vside, "The sidecar (default PATH.status.json)");
    verify->callback([&g, &out, vpath, vside] {
        auto r = audit::verify_log(
            *vpath, vside->empty() ? std::nullopt : std::optional<std::filesystem::path>(*vside));
        if (!r.ok)
            throw Error(ErrorCode::audit_incomplete,
                        "audit verify " + *vpath + ": " + r.discrepancy);
        if (g.json)
            print_json({{"ok", true},
                        {"lines", r.lines},
                        {"events", r.events},
                        {"bytes", r.bytes},
                        {"dropped", r.sidecar.dropped},
                        {"complete", r.sidecar.complete},
                        {"sha256", r.sidecar.sha256},
                        {"chain", r.sidecar.chain}});
        else
            print_line("ok lines=" + std::to_string(r.lines) + " events=" +
                       std::to_string(r.events) + " dropped=" + std::to_string(r.sidecar.dropped) +
                       " bytes=" + std::to_string(r.bytes) + " complete=" +
                       (r.sidecar.complete ? "true" : "false") + " sha256=" + r.sidecar.sha256);
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
