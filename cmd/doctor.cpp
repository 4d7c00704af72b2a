#include <cstdio>

#include "cmd/common.hpp"

namespace sandweave::cli {

void register_doctor(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* doctor =
        app.add_subcommand("doctor", "Check the runtime, overlayfs, cgroups and permissions");
    doctor->callback([&g, &out] {
        Session s(g);
        auto report = s.api().doctor();
        const auto& checks = report.checks;
        bool usable = report.ok;
        if (g.json) {
            print_json(api::to_json(report));
        } else {
            for (const auto& c : checks)
                std::printf("%-5s %-18s %s\n", c.ok ? "ok" : (c.required ? "FAIL" : "warn"),
                            c.name.c_str(), c.detail.c_str());
            std::printf("%s\n", usable ? "sandweave can run sandboxes here"
                                       : "sandweave cannot run sandboxes here");
        }
        out.exit_code = usable ? 0 : 5;
    });
}

}  // namespace sandweave::cli
