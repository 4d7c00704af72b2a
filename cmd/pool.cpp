#include <cstdio>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"

namespace sandweave::cli {

void register_pool(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* pool = app.add_subcommand("pool", "Warm pools of identical sandboxes");
    pool->require_subcommand(1);

    auto* create =
        pool->add_subcommand("create", "Start a pool of N sandboxes with the given create options");
    auto name = std::make_shared<std::string>();
    auto size = std::make_shared<int>(0);
    auto flags = std::make_shared<CreateFlags>();
    create->add_option("name", *name, "Pool name")->required();
    create->add_option("--size", *size, "Number of warm sandboxes")->required();
    add_create_flags(*create, *flags, true, false);
    create->callback([&g, &out, name, size, flags, create] {
        if (!flags->name.empty())
            throw Error(ErrorCode::usage, "pool create: --name does not apply to pool members");
        if (*size < 0 || *size > 1000)
            throw Error(ErrorCode::usage,
                        "--size " + std::to_string(*size) + ": expected 0 to 1000");
        api::PoolCreateParams p{*name, *size, to_create_params(*flags, *create)};
        Session s(g);
        if (s.remote()) p.options = api::for_remote_worker(p.options, StateStore::default_root());
        auto info = s.api().pool_create(p);
        if (g.json)
            print_json(api::encode_value(info));
        else
            print_line(info.name);
        out.exit_code = 0;
    });

    auto* acquire = pool->add_subcommand(
        "acquire", "Hand out one sandbox of the pool (prints its id); the pool refills");
    auto aname = std::make_shared<std::string>();
    acquire->add_option("name", *aname, "Pool name")->required()->type_name("POOL");
    acquire->callback([&g, &out, aname] {
        Session s(g);
        auto v = s.api().pool_acquire({*aname});
        if (g.json)
            print_json(api::encode_value(v));
        else
            print_line(v.record.id);
        out.exit_code = 0;
    });

    auto* ls = pool->add_subcommand("ls", "List pools: size, warm, in use, options");
    ls->callback([&g, &out] {
        Session s(g);
        auto list = s.api().pool_ls().pools;
        if (g.json) {
            print_json(api::encode_value(list));
        } else {
            std::printf("%-16s %-5s %-5s %-7s %s\n", "NAME", "SIZE", "WARM", "IN_USE", "OPTIONS");
            for (const auto& p : list)
                std::printf("%-16s %-5d %-5d %-7d %s%s\n", p.name.c_str(), p.size, p.warm, p.in_use,
                            p.request.dump().c_str(),
                            p.last_error ? ("  error: " + *p.last_error).c_str() : "");
        }
        out.exit_code = 0;
    });

    auto* resize = pool->add_subcommand("resize", "Change the number of warm sandboxes");
    auto rname = std::make_shared<std::string>();
    auto rsize = std::make_shared<int>(0);
    resize->add_option("name", *rname, "Pool name")->required()->type_name("POOL");
    resize->add_option("size", *rsize, "New size")->required();
    resize->callback([&g, &out, rname, rsize] {
        Session s(g);
        auto info = s.api().pool_resize({*rname, *rsize});
        if (g.json)
            print_json(api::encode_value(info));
        else
            print_line(info.name);
        out.exit_code = 0;
    });

    auto* rm = pool->add_subcommand(
        "rm", "Remove a pool and every idle sandbox (and audit writer) it owns");
    auto names = std::make_shared<std::vector<std::string>>();
    rm->add_option("names", *names, "Pool names")->required()->type_name("POOL");
    rm->callback([&g, &out, names] {
        Session s(g);
        for (const auto& n : *names) {
            s.api().pool_rm({n});
            if (!g.json) print_line(n);
        }
        if (g.json) print_json({{"removed", *names}});
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
