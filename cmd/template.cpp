#include <cstdio>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"

namespace sandweave::cli {
namespace {

// The resolved document, one leaf per line with where it came from.
void print_with_origins(const nlohmann::json& j, const std::string& ptr,
                        const api::TemplateShowResult& t, int indent) {
    for (const auto& [k, v] : j.items()) {
        std::string p = ptr + "/" + pointer_token(k);
        std::string pad(static_cast<std::size_t>(indent) * 2, ' ');
        if (v.is_object() && !v.empty()) {
            std::printf("%s%s:\n", pad.c_str(), k.c_str());
            print_with_origins(v, p, t, indent + 1);
        } else {
            auto it = t.origin.find(p);
            std::printf("%s%s: %s    # from %s\n", pad.c_str(), k.c_str(), v.dump().c_str(),
                        it == t.origin.end() ? "?" : it->second.c_str());
        }
    }
}

}  // namespace

void register_template(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* tmpl = app.add_subcommand("template", "List, show and validate templates");
    tmpl->require_subcommand(1);

    auto* ls = tmpl->add_subcommand("ls", "List templates (user directories first, then built-in)");
    ls->callback([&g, &out] {
        Session s(g);
        auto list = s.api().template_ls().templates;
        if (g.json) {
            print_json(api::encode_value(list));
        } else {
            std::printf("%-16s %-8s %s\n", "NAME", "SOURCE", "DESCRIPTION");
            for (const auto& t : list)
                std::printf("%-16s %-8s %s%s\n", t.name.c_str(), t.builtin ? "builtin" : "user",
                            t.description.c_str(), missing_on(t.missing_on).c_str());
        }
        out.exit_code = 0;
    });

    auto* show = tmpl->add_subcommand(
        "show", "Print a template fully resolved, with where each value came from");
    auto show_ref = std::make_shared<std::string>();
    show->add_option("template", *show_ref, "Name, file or inline JSON/YAML")
        ->required()
        ->type_name("TEMPLATE");
    show->callback([&g, &out, show_ref] {
        Session s(g);
        api::TemplateShowParams p{*show_ref};
        if (s.remote()) p = api::for_remote_worker(p, StateStore::default_root());
        auto t = s.api().template_show(p);
        if (g.json) {
            print_json(api::to_json(t));
        } else {
            std::string chain;
            for (const auto& c : t.chain) chain += (chain.empty() ? "" : " -> ") + c;
            std::printf("# %s (chain: %s)\n", t.name.c_str(), chain.c_str());
            print_with_origins(t.resolved, "", t, 0);
        }
        out.exit_code = 0;
    });

    auto* validate =
        tmpl->add_subcommand("validate", "Check a template file and its extends chain");
    auto file = std::make_shared<std::string>();
    validate->add_option("file", *file, "Template file")->required()->type_name("FILE");
    validate->callback([&g, &out, file] {
        Session s(g);
        auto t = s.remote() ? api::validate_on_client({*file}, StateStore::default_root())
                            : s.api().template_validate({*file});
        if (g.json)
            print_json(api::to_json(t));
        else
            print_line(*file + ": ok");
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
