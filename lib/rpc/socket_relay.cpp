// A byte relay from a job step's stdio to a worker daemon's socket
// (lib/rpc/socket_relay.hpp).
#include "lib/rpc/socket_relay.hpp"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/rpc/jsonrpc.hpp"
#include "lib/runtime/relay.hpp"

namespace sandweave::rpc {

namespace {

// Reads what `from` has and writes it all to `to`: false at end of input
// or when either side fails.
bool pump(int from, int to) {
    char buf[65536];
    ssize_t n;
    do {
        n = ::read(from, buf, sizeof buf);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return false;
    return write_all(to, std::string_view(buf, static_cast<std::size_t>(n)));
}

}  // namespace

void relay_to_socket(const std::filesystem::path& socket, int in, int out) {
    ::signal(SIGPIPE, SIG_IGN);
    Fd sock = connect_unix(socket);
    if (!sock.valid()) {
        std::string why = errno_message("the sandweave worker daemon at " + socket.string() +
                                        " does not answer: connect");
        std::string line = encode_error(nullptr, code::peer_not_allowed, why) + "\n";
        (void)write_all(out, line);
        throw Error(ErrorCode::connection, why);
    }
    bool in_open = true;
    for (;;) {
        pollfd p[2] = {{sock.get(), POLLIN, 0}, {in_open ? in : -1, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            throw_errno("poll");
        }
        if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
            // The daemon closed (or failed): nothing more will come.
            if (!pump(sock.get(), out)) return;
        }
        if (in_open && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (!pump(in, sock.get())) {
                // The controller went away: the daemon sees the end of this
                // connection and answers what is in flight, then closes.
                in_open = false;
                ::shutdown(sock.get(), SHUT_WR);
            }
        }
    }
}

}  // namespace sandweave::rpc
