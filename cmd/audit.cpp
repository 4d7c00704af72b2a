#include <cstdio>
#include <iostream>

#include "cmd/common.hpp"
#include "lib/sandbox/audit_glue.hpp"

namespace sandweave::cli {

void print_audit_status(const audit::Status& st, bool to_stderr) {
    std::string doc = audit::to_json(st).dump(2);
    if (to_stderr)
        std::cerr << doc << std::endl;
    else
        std::cout << doc << std::endl;
}

void register_audit(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* audit =
        app.add_subcommand("audit", "Export and inspect a sandbox's protected runtime audit log");
    audit->require_subcommand(1);

    auto* exp = audit->add_subcommand(
        "export",
        "Flush barrier, then write PATH and PATH.status.json (0600); exit 3 when incomplete");
    auto id = std::make_shared<std::string>();
    auto path = std::make_shared<std::string>();
    exp->add_option("id", *id, "Sandbox id or name")->required();
    exp->add_option("path", *path, "Where to write the JSONL log")->required();
    exp->callback([&g, &out, id, path] {
        Session s(g);
        auto st = export_audit(s.ctx(), *id, *path);
        print_audit_status(st, false);
        out.exit_code = st.complete ? 0 : 3;
    });

    auto* status =
        audit->add_subcommand("status", "The writer's live figures (no export, never complete)");
    auto sid = std::make_shared<std::string>();
    status->add_option("id", *sid, "Sandbox id or name")->required();
    status->callback([&g, &out, sid] {
        Session s(g);
        print_audit_status(audit_status(s.ctx(), *sid), false);
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
