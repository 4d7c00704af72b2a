// ls, inspect, terminate, rm, prune.
#include <cstdio>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"

namespace sandweave::cli {
namespace {

std::string labels_text(const std::map<std::string, std::string>& labels) {
    std::string s;
    for (const auto& [k, v] : labels) s += (s.empty() ? "" : ",") + k + "=" + v;
    return s.empty() ? "-" : s;
}

void print_table(const std::vector<SandboxView>& views) {
    std::printf("%-16s %-16s %-10s %-9s %-21s %s\n", "ID", "NAME", "TEMPLATE", "STATE", "CREATED",
                "LABELS");
    for (const auto& v : views) {
        const auto& r = v.record;
        std::string tmpl = r.spec.template_name.size() > 10
                               ? r.spec.template_name.substr(0, 9) + "~"
                               : r.spec.template_name;
        std::printf("%-16s %-16s %-10s %-9s %-21s %s\n", r.id.c_str(),
                    r.name.empty() ? "-" : r.name.c_str(), tmpl.c_str(), to_string(v.live).c_str(),
                    r.created_at.c_str(), labels_text(r.spec.labels).c_str());
    }
}

}  // namespace

void register_sandbox_verbs(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* ls = app.add_subcommand("ls", "List sandboxes");
    ls->alias("list");
    auto quiet_ids = std::make_shared<bool>(false);
    ls->add_flag("--ids", *quiet_ids, "Print only ids");
    ls->callback([&g, &out, quiet_ids] {
        Session s(g);
        auto views = s.api().ls().sandboxes;
        if (g.json) {
            print_json(api::encode_value(views));
        } else if (*quiet_ids) {
            for (const auto& v : views) print_line(v.record.id);
        } else {
            print_table(views);
        }
        out.exit_code = 0;
    });

    auto* inspect =
        app.add_subcommand("inspect", "Show a sandbox's record and resolved spec (JSON)");
    auto inspect_id = std::make_shared<std::string>();
    inspect->add_option("id", *inspect_id, "Sandbox id or name")->required();
    inspect->callback([&g, &out, inspect_id] {
        Session s(g);
        print_json(api::encode_value(s.api().inspect({*inspect_id})));
        out.exit_code = 0;
    });

    auto* term =
        app.add_subcommand("terminate", "Stop a sandbox (its files and audit log stay until rm)");
    auto term_ids = std::make_shared<std::vector<std::string>>();
    term->add_option("ids", *term_ids, "Sandbox ids or names")->required();
    term->callback([&g, &out, term_ids] {
        Session s(g);
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& id : *term_ids) {
            auto v = s.api().terminate({id});
            if (g.json)
                arr.push_back(api::encode_value(v));
            else
                print_line(v.record.id);
        }
        if (g.json) print_json(arr);
        out.exit_code = 0;
    });

    auto* rm =
        app.add_subcommand("rm", "Remove sandboxes and everything of them, audit log included");
    auto rm_ids = std::make_shared<std::vector<std::string>>();
    rm->add_option("ids", *rm_ids, "Sandbox ids or names")->required();
    rm->callback([&g, &out, rm_ids] {
        Session s(g);
        nlohmann::json arr = nlohmann::json::array();
        for (const auto& ref : *rm_ids) {
            std::string id = s.api().rm({ref}).removed;
            if (g.json)
                arr.push_back(id);
            else
                print_line(id);
        }
        if (g.json) print_json({{"removed", arr}});
        out.exit_code = 0;
    });

    auto* prune = app.add_subcommand("prune", "Remove every stopped or failed sandbox");
    prune->callback([&g, &out] {
        Session s(g);
        auto removed = s.api().prune().removed;
        if (g.json)
            print_json({{"removed", removed}});
        else
            for (const auto& id : removed) print_line(id);
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
