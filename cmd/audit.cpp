#include <cstdio>
#include <iostream>

#include "cmd/common.hpp"

namespace sandweave::cli {

namespace {

void print_audit_status(const audit::Status& st) {
    print_json(api::encode_value(st));
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
        auto st = s.remote() ? api::export_to_client(s.api(), *id, *path, s.remote_url())
                             : s.api().audit_export({*id, *path});
        print_audit_status(st);
        out.exit_code = st.complete ? 0 : 3;
    });

    auto* status =
        audit->add_subcommand("status", "The writer's live figures (no export, never complete)");
    auto sid = std::make_shared<std::string>();
    status->add_option("id", *sid, "Sandbox id or name")->required()->type_name("SANDBOX");
    status->callback([&g, &out, sid] {
        Session s(g);
        print_audit_status(s.api().audit_status({*sid}));
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
