#include <cstdio>

#include "cmd/common.hpp"

namespace sandweave::cli {

void register_snapshot(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* snap =
        app.add_subcommand("snapshot", "Filesystem and memory snapshots of running sandboxes");
    snap->require_subcommand(1);

    auto* create = snap->add_subcommand(
        "create",
        "Snapshot a running sandbox; prints the snapshot id (restore: create --from-snapshot)");
    auto req = std::make_shared<api::SnapshotCreateParams>();
    auto kind = std::make_shared<std::string>("auto");
    auto name = std::make_shared<std::string>();
    create->add_option("id", req->sandbox, "Sandbox id or name")->required()->type_name("SANDBOX");
    create->add_option("--kind", *kind, "fs, memory, or auto (fs when audit is on, else memory)")
        ->capture_default_str()
        ->type_name("fs|memory|auto");
    create->add_option("--name", *name, "A unique name for the snapshot");
    create->callback([&g, &out, req, kind, name] {
        if (*kind != "fs" && *kind != "memory" && *kind != "auto")
            throw Error(ErrorCode::usage, "--kind '" + *kind + "': expected fs, memory or auto");
        req->kind = *kind;
        if (!name->empty()) req->name = *name;
        Session s(g);
        auto r = s.api().snapshot_create(*req);
        if (g.json) {
            print_json(api::encode_value(r));
        } else {
            print_line(r.id);
            std::fprintf(
                stderr, "%s snapshot of %s (%s)\n", to_string(r.kind).c_str(), r.source.c_str(),
                *kind == "auto"
                    ? (r.kind == SnapshotKind::fs ? "auto: audit is on" : "auto: audit is off")
                    : "as asked");
        }
        out.exit_code = 0;
    });

    auto* ls = snap->add_subcommand("ls", "List snapshots");
    ls->callback([&g, &out] {
        Session s(g);
        auto list = s.api().snapshot_ls().snapshots;
        if (g.json) {
            print_json(api::encode_value(list));
        } else {
            std::printf("%-18s %-12s %-7s %-16s %-9s %-8s %-6s %s\n", "ID", "NAME", "KIND",
                        "SOURCE", "SIZE", "HIDEPID", "AUDIT", "CREATED");
            for (const auto& r : list)
                std::printf("%-18s %-12s %-7s %-16s %-9s %-8d %-6s %s\n", r.id.c_str(),
                            r.name.empty() ? "-" : r.name.c_str(), to_string(r.kind).c_str(),
                            r.source.c_str(), (std::to_string(r.bytes / 1024) + "KiB").c_str(),
                            r.spec.runtime.hidepid, r.spec.runtime.audit ? "yes" : "no",
                            r.created_at.c_str());
        }
        out.exit_code = 0;
    });

    auto* rm = snap->add_subcommand("rm", "Remove snapshots");
    auto ids = std::make_shared<std::vector<std::string>>();
    rm->add_option("ids", *ids, "Snapshot ids or names")->required()->type_name("SNAPSHOT");
    rm->callback([&g, &out, ids] {
        Session s(g);
        nlohmann::json removed = nlohmann::json::array();
        for (const auto& id : *ids) {
            std::string removed_id = s.api().snapshot_rm({id}).removed;
            removed.push_back(removed_id);
            if (!g.json) print_line(removed_id);
        }
        if (g.json) print_json({{"removed", removed}});
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
