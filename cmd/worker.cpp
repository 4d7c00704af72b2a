// sandweave worker: a Weave node's daemon, which owns the sandboxes there
// (lib/rpc/worker.hpp, docs/weave.md).
#include "lib/rpc/worker.hpp"
#include "cmd/common.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/units.hpp"

namespace sandweave::cli {

void register_worker(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* sub = app.add_subcommand(
        "worker",
        "Run a Weave node's daemon: serve the API on a Unix socket for the controller's "
        "relays, owning the node's sandboxes outside every Slurm job");
    sub->footer("See sandweave-worker(1) and docs/weave.md.");
    struct Flags {
        std::string socket = "/run/sandweave/worker.sock";
        std::string retain = "24h";
        std::string controller_user;
    };
    auto f = std::make_shared<Flags>();
    sub->add_option(
           "--socket", f->socket,
           "Listen on this Unix socket (0666 in a 0711 directory: each peer is judged by its "
           "credentials and cgroups)")
        ->capture_default_str();
    sub->add_option("--controller-user", f->controller_user,
                    "Serve this Unix user (the Weave controller's) like root; other users only "
                    "from a step of their own Slurm job, and only that job's sandboxes");
    sub->add_option("--retain", f->retain,
                    "Keep a sandbox whose Slurm job ended (its record and audit log, for its "
                    "export) this long, then remove it")
        ->capture_default_str();
    sub->callback([&g, &out, f] {
        if (g.json) throw Error(ErrorCode::usage, "worker: --json does not apply");
        if (g.host != "local" && !g.host.empty())
            throw Error(ErrorCode::usage, "worker: --host does not apply (it is the server)");
        auto retain = parse_duration(f->retain);
        if (!retain || retain->count() < 0)
            throw Error(ErrorCode::usage,
                        "worker: --retain '" + f->retain + "': expected a duration (24h, 90m)");
        Fd sfd = stop_signals_fd();
        rpc::WorkerOptions o;
        o.state_dir = g.state_dir;
        if (!g.runsc.empty()) o.runsc = g.runsc;
        o.socket = f->socket;
        o.controller_user = f->controller_user;
        o.retain = std::chrono::duration_cast<std::chrono::seconds>(*retain);
        o.serve.server_name = std::string("sandweave ") + SANDWEAVE_VERSION_STRING + " (worker)";
        rpc::serve_worker(o, sfd.get());
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
