// sandweave controller: the API over TLS for weave:// clients, each sandbox
// placed by Slurm on a participating worker (docs/weave.md).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/log.hpp"
#include "lib/weave/controller.hpp"

namespace sandweave::cli {

void register_controller(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* sub = app.add_subcommand(
        "controller", "Serve the API to weave:// clients over TLS, placing sandboxes with Slurm");
    sub->footer("See sandweave-controller(1) and docs/weave.md.");
    struct Flags {
        std::string listen = "127.0.0.1:7443";
        std::string dir, cert, key, token, cluster, worker_binary;
    };
    auto f = std::make_shared<Flags>();
    sub->add_option("--listen", f->listen, "TCP address to listen on (HOST:PORT)")
        ->capture_default_str();
    sub->add_option("--controller-dir", f->dir,
                    "Where the certificate, key, token, fingerprint and the id its Slurm jobs "
                    "carry live (0700) [/var/lib/sandweave-controller]")
        ->type_name("DIR");
    sub->add_option("--cert", f->cert, "TLS certificate (PEM; default: made at first start)")
        ->type_name("FILE");
    sub->add_option("--key", f->key, "TLS private key (PEM) for --cert")->type_name("FILE");
    sub->add_option("--token-file", f->token,
                    "The token clients must present (0600; default: made at first start)")
        ->type_name("FILE");
    sub->add_option("--cluster-env", f->cluster,
                    "SLURM_CONF and each worker's state directory, as "
                    "scripts/weave-cluster.sh writes them "
                    "[$SANDWEAVE_WEAVE_CLUSTER_DIR/cluster.env, else "
                    "/var/lib/sandweave-cluster/cluster.env]")
        ->type_name("FILE");
    sub->add_option("--worker-binary", f->worker_binary,
                    "sandweave on the workers [this binary's path]")
        ->type_name("PATH");
    sub->callback([&g, &out, f] {
        if (g.json) throw Error(ErrorCode::usage, "controller: --json does not apply");
        if (g.host != "local" && !g.host.empty())
            throw Error(ErrorCode::usage, "controller: --host does not apply (it is the server)");
        Fd sfd = stop_signals_fd();

        std::string cluster = f->cluster;
        if (cluster.empty()) {
            const char* d = std::getenv("SANDWEAVE_WEAVE_CLUSTER_DIR");
            cluster = std::string(d && *d ? d : "/var/lib/sandweave-cluster") + "/cluster.env";
        }
        auto c = weave::read_cluster_env(cluster);
        c.worker_binary = f->worker_binary;
        if (c.worker_binary.empty()) {
            char buf[4096];
            ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
            c.worker_binary = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "sandweave";
        }
        weave::ControllerOptions o;
        o.listen = f->listen;
        o.state_dir = f->dir.empty() ? "/var/lib/sandweave-controller" : f->dir;
        c.controller_id = weave::controller_id(o.state_dir);
        auto api = weave::make_controller_api(c);
        o.cert = f->cert;
        o.key = f->key;
        o.token_file = f->token;
        o.server_name = std::string("sandweave ") + SANDWEAVE_VERSION_STRING + " (controller)";
        weave::serve_controller(*api, o, sfd.get());
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
