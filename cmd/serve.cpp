// sandweave serve: the API over JSON-RPC on stdin/stdout or a Unix socket.
#include <signal.h>
#include <sys/signalfd.h>

#include "cmd/common.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/rpc/server.hpp"

namespace sandweave::cli {

void register_serve(CLI::App& app, GlobalOptions& g, Outcome& out) {
    auto* sub = app.add_subcommand(
        "serve", "Serve the sandweave API as JSON-RPC 2.0 (for SDKs and remote clients)");
    sub->footer("The protocol: docs/protocol.md. See sandweave-serve(1).");
    auto stdio = std::make_shared<bool>(false);
    auto socket = std::make_shared<std::string>();
    auto* o_stdio = sub->add_flag("--stdio", *stdio, "One connection on stdin/stdout");
    auto* o_socket = sub->add_option("--socket", *socket,
                                     "Listen on this Unix socket (0600, in a 0700 directory)");
    o_stdio->excludes(o_socket);
    sub->callback([&g, &out, stdio, socket] {
        if (!*stdio && socket->empty())
            throw Error(ErrorCode::usage, "serve: give --stdio or --socket PATH");
        if (g.json)
            throw Error(ErrorCode::usage, "serve: --json does not apply (the protocol is JSON)");
        Session s(g);
        rpc::ServeOptions opts{std::string("sandweave ") + SANDWEAVE_VERSION_STRING};
        if (*stdio) {
            rpc::serve_connection(s.api(), 0, 1, opts);
        } else {
            sigset_t stop;
            sigemptyset(&stop);
            sigaddset(&stop, SIGINT);
            sigaddset(&stop, SIGTERM);
            sigaddset(&stop, SIGHUP);
            // Blocked before any thread starts, so every thread inherits it and
            // only the signalfd sees these.
            sigprocmask(SIG_BLOCK, &stop, nullptr);
            Fd sfd(::signalfd(-1, &stop, SFD_CLOEXEC));
            if (!sfd.valid()) throw_errno("signalfd");
            rpc::serve_socket(s.api(), *socket, sfd.get(), opts);
        }
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
