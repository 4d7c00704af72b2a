#include "cmd/common.hpp"

namespace sandweave::cli {

void register_create(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* sub = app.add_subcommand("create", "Create and start a sandbox; prints its id");
    auto flags = std::make_shared<CreateFlags>();
    add_create_flags(*sub, *flags);
    sub->callback([&g, &out, flags, sub] {
        Session s(g);
        CreateRequest req = to_create_request(*flags);
        req.template_given = sub->count("--template") > 0;
        SandboxRecord r = create_sandbox(s.ctx(), req);
        if (g.json)
            print_json(to_json(r));
        else
            print_line(r.id);
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
