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
        std::string client = std::string("sandweave ") + SANDWEAVE_VERSION_STRING;
        std::string worker = s.remote() ? s.server_name() : client;
        if (g.json) {
            auto j = api::to_json(report);
            j["client_version"] = client;
            j["worker_version"] = worker;
            if (s.remote()) j["worker"] = s.remote_url();
            print_json(j);
        } else {
            if (s.remote())
                std::printf("client: %s; worker %s: %s\n", client.c_str(), s.remote_url().c_str(),
                            worker.c_str());
            for (const auto& c : checks)
                std::printf("%-5s %-18s %s\n", c.ok ? "ok" : (c.required ? "FAIL" : "warn"),
                            c.name.c_str(), c.detail.c_str());
            std::string where = s.remote() ? "on " + s.remote_url() : "here";
            std::printf("sandweave %s run sandboxes %s\n", usable ? "can" : "cannot",
                        where.c_str());
        }
        out.exit_code = usable ? 0 : 5;
    });
}

}  // namespace sandweave::cli
