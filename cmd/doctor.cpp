#include <cstdio>

#include "cmd/common.hpp"
#include "lib/sandbox/doctor.hpp"

namespace sandweave::cli {

void register_doctor(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* doctor =
        app.add_subcommand("doctor", "Check the runtime, overlayfs, cgroups and permissions");
    doctor->callback([&g, &out] {
        Session s(g);
        auto checks = run_doctor(s.ctx());
        bool usable = true;
        for (const auto& c : checks) usable = usable && (c.ok || !c.required);
        if (g.json) {
            nlohmann::json arr = nlohmann::json::array();
            for (const auto& c : checks)
                arr.push_back({{"name", c.name},
                               {"ok", c.ok},
                               {"required", c.required},
                               {"detail", c.detail}});
            print_json({{"ok", usable}, {"checks", arr}});
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
