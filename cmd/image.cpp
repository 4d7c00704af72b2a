#include <cstdio>

#include "cmd/common.hpp"

namespace sandweave::cli {

void register_image(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* image = app.add_subcommand(
        "image", "Build, import, list, inspect and remove root filesystem images");
    image->require_subcommand(1);

    auto* build = image->add_subcommand("build",
                                        "Build an image (base: busybox; coding: Debian with Python "
                                        "and git; desktop: an X display)");
    auto name = std::make_shared<std::string>();
    auto force = std::make_shared<bool>(false);
    build->add_option("name", *name, "A built-in recipe: base, coding or desktop")
        ->required()
        ->type_name("RECIPE");
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

    auto* import = image->add_subcommand(
        "import",
        "Import an image: docker-archive:FILE (docker save), oci-archive:FILE or oci:DIR");
    auto import_p = std::make_shared<api::ImageImportParams>();
    import->add_option("name", import_p->name, "Name to give the image")->required();
    import
        ->add_option("source", import_p->source,
                     "docker-archive:FILE, oci-archive:FILE or oci:DIR (on the worker)")
        ->required()
        ->type_name("SOURCE");
    import->add_flag("--force", import_p->force, "Replace an image of that name");
    import->callback([&g, &out, import_p] {
        Session s(g);
    auto info = s.api().image_import(*import_p);
    if (g.json)
        print_json(api::to_json(info));
    else
        print_line(info.name);
    out.exit_code = 0;
});

auto* ls = image->add_subcommand("ls", "List images: source, size, created");
ls->callback([&g, &out] {
    Session s(g);
    auto list = s.api().image_ls().images;
    if (g.json) {
        print_json(api::encode_value(list));
    } else {
        std::printf("%-16s %-10s %-22s %s\n", "NAME", "SIZE", "CREATED", "SOURCE");
        for (const auto& i : list)
            std::printf("%-16s %-10s %-22s %s%s\n", i.name.c_str(),
                        (std::to_string(i.bytes >> 20) + "MiB").c_str(),
                        i.created.value_or(i.built_at).c_str(), i.source.value_or("").c_str(),
                        missing_on(i.missing_on).c_str());
    }
    out.exit_code = 0;
});

auto* inspect = image->add_subcommand("inspect", "Show an image's metadata (JSON)");
auto inspect_name = std::make_shared<std::string>();
inspect->add_option("name", *inspect_name, "Image name")->required()->type_name("IMAGE");
inspect->callback([&g, &out, inspect_name] {
    Session s(g);
    print_json(api::to_json(s.api().image_inspect({*inspect_name})));
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
}  // namespace sandweave::cli

}  // namespace sandweave::cli
