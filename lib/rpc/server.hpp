#pragma once
// `sandweave serve`: the API over JSON-RPC 2.0 (docs/protocol.md).
//
// One connection: a reader loop on the input takes one line at a time, checks
// it (lib/rpc/jsonrpc.hpp, then the method's params), and starts each request
// on a thread of its own, so many requests are in flight at once; run.stdin,
// run.signal and run.cancel are applied by the reader itself, in the order
// received. Every line written goes out whole under one lock. A sandbox.run
// streams its output as run.output notifications from the thread that waits
// for the command (a slow client slows the command down, never grows a
// buffer), and its stdin is a pipe fed by a writer thread of its own.
//
// When the peer goes away (EOF, or a write that fails), every command still
// running is cancelled (killed in the guest), as a closed terminal would; the
// connection returns once every request thread has finished. Sandboxes stay.

#include <sys/types.h>
#include <filesystem>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "lib/api/api.hpp"

namespace sandweave::rpc {

struct ServeOptions {
    std::string server_name;  // "sandweave 0.1.0"
    // Methods this server neither lists nor serves: simulates an older
    // worker in tests (SANDWEAVE_SERVE_WITHOUT=audit.fetch,run.signal).
    std::vector<std::string> without;
    // A Weave controller: also serves the methods only a controller has
    // (api::controller_only_methods), which a worker neither lists nor serves.
    bool controller = false;
    // serve_socket: admits peers besides root and our own uid (the socket
    // is then 0666, and this decides): the API to serve peer (pid, uid), a
    // view of the server's, or throws Error with the one line it is refused
    // with. Unset: only root and our own uid (the socket 0600).
    std::function<std::shared_ptr<api::Api>(pid_t pid, uid_t uid)> admit_other = {};
};

// Serves one connection until the peer closes it, or until `stop_fd` (a
// signalfd, or -1) becomes readable, which ends it the same way: running
// commands are killed. Reads in_fd, writes out_fd.
void serve_connection(api::Api& api, int in_fd, int out_fd, int stop_fd, const ServeOptions& opts);

// Listens on a Unix stream socket at `path` (0600, in a 0700 directory; see
// docs/protocol.md) and serves each accepted peer on a thread of its own,
// refusing peers whose uid is neither root nor ours (unless
// opts.admit_other admits them). Returns when `stop_fd`
// becomes readable (a signalfd for SIGINT/SIGTERM), removing the socket.
void serve_socket(api::Api& api, const std::filesystem::path& path, int stop_fd,
                  const ServeOptions& opts);

}  // namespace sandweave::rpc
