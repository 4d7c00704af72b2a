// `sandweave version` (and `--version`): this client's version and git
// revision, the protocol it speaks, and the runtime that would run sandboxes:
// the local one, or with --host the worker's, asked through the API's
// `version` method after the handshake.

#include <cstdio>

#include "cmd/common.hpp"
#include "lib/core/build_info.hpp"

namespace sandweave::cli {
namespace {

std::string with_revision(const std::string& version, const std::optional<std::string>& rev) {
    return "sandweave " + version + " (git " + rev.value_or("unknown") + ")";
}

void print_runtime(const std::optional<api::RuntimeInfo>& rt, const std::string& where) {
    if (!rt) {
        std::printf("runtime:  none found%s (see sandweave doctor)\n", where.c_str());
        return;
    }
    std::printf("runtime:  %s%s\n", rt->path.c_str(), where.c_str());
    std::printf("          %s\n", rt->version.c_str());
    if (rt->patches) {
        std::string list;
        for (const auto& p : *rt->patches) list += (list.empty() ? "" : ", ") + p;
        std::printf("patches:  %s\n", list.empty() ? "none" : list.c_str());
    } else {
        std::printf("patches:  %s\n", rt->patches_detail.value_or("not known").c_str());
    }
}

}  // namespace

void register_version(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* version = app.add_subcommand(
        "version",
        "Print the versions of sandweave, its protocol, and the runtime (with --host: "
        "the worker's)");
    version->callback([&g, &out] {
        Session s(g);
        api::VersionResult worker = s.api().version();
        api::VersionResult client;
        client.version = build_version();
        client.revision = build_revision();
        if (g.json) {
            nlohmann::json j;
            if (s.remote()) {
                j = api::to_json(client);
                nlohmann::json w = api::to_json(worker);
                w["host"] = s.remote_url();
                w["server"] = s.server_name();
                w["protocol_in_use"] = s.protocol();
                j["worker"] = w;
            } else {
                j = api::to_json(worker);
            }
            print_json(j);
        } else {
            std::printf("client:   %s\n", with_revision(client.version, client.revision).c_str());
            std::printf("protocol: %d\n", client.protocol);
            if (s.remote()) {
                std::printf("worker:   %s: %s, protocol %d (speaking %d)\n", s.remote_url().c_str(),
                            with_revision(worker.version, worker.revision).c_str(), worker.protocol,
                            s.protocol());
                print_runtime(worker.runtime, " (on the worker)");
            } else {
                print_runtime(worker.runtime, "");
            }
        }
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
