// sandweave serve: the API over JSON-RPC on stdin/stdout or a Unix socket.
#include <signal.h>
#include <stdlib.h>

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
        // SIGINT/SIGTERM/SIGHUP end serving as a closed connection does (what
        // runs is killed). Blocked before any thread starts, so every thread
        // inherits the mask and only the signalfd sees them.
        Fd sfd = stop_signals_fd();
        // Whatever arrives over the protocol is a remote client's request,
        // even through a socket on this host: template files are its own to read.
        Session s(g, api::Caller::remote);
        rpc::ServeOptions opts{std::string("sandweave ") + SANDWEAVE_VERSION_STRING, {}};
        if (const char* w = std::getenv("SANDWEAVE_SERVE_WITHOUT")) {
            std::string list = w;
            for (std::size_t pos = 0; pos <= list.size();) {
                auto comma = list.find(',', pos);
                std::string m = list.substr(pos, comma == std::string::npos ? comma : comma - pos);
                if (!m.empty()) opts.without.push_back(m);
                if (comma == std::string::npos) break;
                pos = comma + 1;
            }
        }
        if (*stdio)
            rpc::serve_connection(s.api(), 0, 1, sfd.get(), opts);
        else
            rpc::serve_socket(s.api(), *socket, sfd.get(), opts);
        out.exit_code = 0;
    });
}

}  // namespace sandweave::cli
