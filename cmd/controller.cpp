// sandweave controller: the API over TLS for weave:// clients, each sandbox
// placed by Slurm on a participating worker (docs/weave.md).
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cmd/common.hpp"
#include "lib/controller/controller.hpp"
#include "lib/controller/identity.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/log.hpp"

namespace sandweave::cli {

namespace {

constexpr const char* default_controller_dir = "/var/lib/sandweave-controller";

// `controller token add|ls|rm`: the per-user tokens in the controller's
// directory (lib/controller/identity.hpp). A running controller reads them at
// each connection, so a change needs no restart.
CLI::App* register_controller_tokens(CLI::App& controller, GlobalOptions& g, Outcome& out,
                                     std::shared_ptr<const std::string> controller_dir) {
    auto* token = controller.add_subcommand("token", "Per-user tokens for weave:// clients");
    token->require_subcommand(1);
    auto dir = std::make_shared<std::string>();
    auto store = [dir, controller_dir] {
        std::string d = !dir->empty()              ? *dir
                        : !controller_dir->empty() ? *controller_dir
                                                   : default_controller_dir;
        controller::act_as_owner_of(d);
        return controller::TokenStore(d);
    };
    auto dir_option = [dir](CLI::App* s) {
        s->add_option("--controller-dir", *dir,
                      std::string("The controller's directory [") + default_controller_dir + "]")
            ->type_name("DIR");
    };

    struct Add {
        std::string name, user;
        bool admin = false;
    };
    auto a = std::make_shared<Add>();
    auto* add = token->add_subcommand(
        "add", "Make a token for NAME and print it (once: only its SHA-256 is kept)");
    add->add_option("NAME", a->name, "Who holds it (shown in the controller's log)")->required();
    add->add_flag("--admin", a->admin, "It sees and acts on every user's sandboxes");
    add->add_option("--user", a->user,
                    "The Unix user its sandboxes' Slurm jobs run as and who owns them "
                    "[NAME; for --admin, the controller's user]")
        ->type_name("USER");
    dir_option(add);
    add->callback([&g, &out, a, store] {
        std::string t = store().add(a->name, a->admin, a->user);
        if (g.json)
            std::cout << nlohmann::json{{"name", a->name}, {"token", t}}.dump() << "\n";
        else
            std::cout << t << "\n";
        out.exit_code = 0;
    });

    auto* ls = token->add_subcommand("ls", "List the tokens (names, users, roles; never a token)");
    dir_option(ls);
    ls->callback([&g, &out, store] {
        auto entries = store().list();
        if (g.json) {
            nlohmann::json j = nlohmann::json::array();
            for (const auto& e : entries)
                j.push_back({{"name", e.name}, {"user", e.unix_user}, {"admin", e.admin}});
            std::cout << j.dump() << "\n";
        } else {
            std::printf("%-24s %-16s %s\n", "NAME", "USER", "ROLE");
            for (const auto& e : entries)
                std::printf("%-24s %-16s %s\n", e.name.c_str(), e.unix_user.c_str(),
                            e.admin ? "admin" : "user");
        }
        out.exit_code = 0;
    });

    auto name = std::make_shared<std::string>();
    auto* rm = token->add_subcommand("rm", "Remove NAME's token (its next connection is refused)");
    rm->add_option("NAME", *name, "The token's name")->required();
    dir_option(rm);
    rm->callback([&out, name, store] {
        store().remove(*name);
        out.exit_code = 0;
    });
    return token;
}

}  // namespace

void register_controller(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* sub = app.add_subcommand(
        "controller", "Serve the API to weave:// clients over TLS, placing sandboxes with Slurm");
    sub->footer("See sandweave-controller(1) and docs/weave.md.");
    struct Flags {
        std::string listen = "127.0.0.1:7443";
        std::string dir, cert, key, token, cluster, worker_binary, munge_socket;
        std::size_t max_connections = 1024;
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
    sub->add_option("--munge-socket", f->munge_socket,
                    "munged's socket, for checking clients' munge credentials "
                    "[the cluster file's SANDWEAVE_WEAVE_MUNGE_SOCKET, else munged's default]")
        ->type_name("PATH");
    sub->add_option("--max-connections", f->max_connections,
                    "Client connections served at once; one more is told the controller is "
                    "busy and closed")
        ->check(CLI::Range(std::size_t{1}, std::size_t{100000}))
        ->capture_default_str();
    auto* token =
        register_controller_tokens(*sub, g, out, std::shared_ptr<const std::string>(f, &f->dir));
    sub->callback([&g, &out, f, token] {
        if (token->parsed()) return;
        if (g.json) throw Error(ErrorCode::usage, "controller: --json does not apply");
        if (g.host != "local" && !g.host.empty())
            throw Error(ErrorCode::usage, "controller: --host does not apply (it is the server)");
        Fd sfd = stop_signals_fd();

        std::string cluster = f->cluster;
        if (cluster.empty()) {
            const char* d = std::getenv("SANDWEAVE_WEAVE_CLUSTER_DIR");
            cluster = std::string(d && *d ? d : "/var/lib/sandweave-cluster") + "/cluster.env";
        }
        auto c = controller::read_cluster_env(cluster);
        c.worker_binary = f->worker_binary;
        if (c.worker_binary.empty()) {
            char buf[4096];
            ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
            c.worker_binary = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "sandweave";
        }
        controller::ControllerOptions o;
        o.listen = f->listen;
        o.state_dir = f->dir.empty() ? default_controller_dir : f->dir;
        c.controller_id = controller::controller_id(o.state_dir);
        auto api = controller::make_controller_api(c);
        o.cert = f->cert;
        o.key = f->key;
        o.token_file = f->token;
        o.munge_socket = f->munge_socket.empty() ? c.munge_socket : f->munge_socket;
        o.max_connections = f->max_connections;
        o.server_name = std::string("sandweave ") + SANDWEAVE_VERSION_STRING + " (controller)";
        controller::serve_controller(*api, o, sfd.get());
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
