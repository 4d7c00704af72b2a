#include <cstdio>

#include "cmd/common.hpp"

namespace sandweave::cli {

void register_image(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* image = app.add_subcommand("image", "Build, list and remove root filesystem images");
    image->require_subcommand(1);

    auto* build = image->add_subcommand(
        "build", "Build an image (base: busybox; coding: Debian with Python and git)");
    auto name = std::make_shared<std::string>();
    auto force = std::make_shared<bool>(false);
    build->add_option("name", *name, "Image name: base or coding")->required()->type_name("IMAGE");
    build->add_flag("--force", *force, "Rebuild even if it exists");
    build->callback([&g, &out, name, force] {
        Session s(g);
        auto info = s.api().image_build({*name, *force});
        if (g.json)
            print_json(api::to_json(info));
        else
            print_line(info.name);
        out.exit_code = 0;
    });

    auto* ls = image->add_subcommand("ls", "List built images");
    ls->callback([&g, &out] {
        Session s(g);
        auto list = s.api().image_ls().images;
        if (g.json) {
            print_json(api::encode_value(list));
        } else {
            std::printf("%-12s %-10s %s\n", "NAME", "SIZE", "BUILT");
            for (const auto& i : list)
                std::printf("%-12s %-10s %s\n", i.name.c_str(),
                            (std::to_string(i.bytes >> 20) + "MiB").c_str(), i.built_at.c_str());
        }
        out.exit_code = 0;
    });

    auto* rm = image->add_subcommand("rm", "Remove an image (running sandboxes keep working)");
    auto rm_name = std::make_shared<std::string>();
    rm->add_option("name", *rm_name, "Image name")->required()->type_name("IMAGE");
    rm->callback([&g, &out, rm_name] {
        Session s(g);
        s.api().image_rm({*rm_name});
        if (g.json)
            print_json({{"removed", *rm_name}});
        else
            print_line(*rm_name);
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
