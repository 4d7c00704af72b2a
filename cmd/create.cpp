#include "cmd/common.hpp"

namespace sandweave::cli {

void register_create(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* sub = app.add_subcommand("create", "Create and start a sandbox; prints its id");
    auto flags = std::make_shared<CreateFlags>();
    add_create_flags(*sub, *flags);
    sub->callback([&g, &out, flags, sub] {
        auto params = to_create_params(*flags, *sub);
        Session s(g);
        if (s.remote()) params = api::for_remote_worker(params, StateStore::default_root());
        auto v = s.api().create(params);
        if (g.json)
            print_json(api::encode_value(v));
        else
            print_line(v.record.id);
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
