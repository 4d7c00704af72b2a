#include "lib/sandbox/publish.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/store/state.hpp"

namespace sandweave {

namespace {

constexpr std::size_t max_queued = 64 * 1024;

struct Listener {
    Fd fd;
    std::uint16_t guest_port = 0;
};

// One side's bytes on their way to the other.
struct Direction {
    std::string buf;
    bool eof = false;   // the reading side ended
    bool shut = false;  // and the writing side was told (shutdown)
};

struct Connection {
    Fd client, guest;
    bool connecting = true;
    Direction to_guest, to_client;
    bool dead = false;
};

Fd bind_loopback(std::uint16_t port, std::uint16_t guest_port) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw_errno("socket");
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
        throw_errno("publishing guest port " + std::to_string(guest_port) +
                    " on 127.0.0.1:" + std::to_string(port));
    if (::listen(fd.get(), 64) != 0) throw_errno("listen");
    return fd;
}

// A non-blocking connect to the guest's port (it completes in the loop).
Fd connect_guest(const sockaddr_in& guest) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) return fd;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&guest), sizeof guest) != 0 &&
        errno != EINPROGRESS)
        return Fd();
    return fd;
}

// Moves what `from` has into `dir` (up to max_queued); false on an error.
bool pull(int from, Direction& dir) {
    char buf[16 * 1024];
    while (!dir.eof && dir.buf.size() < max_queued) {
        ssize_t n = ::recv(from, buf, std::min(sizeof buf, max_queued - dir.buf.size()), 0);
        if (n > 0) {
            dir.buf.append(buf, static_cast<std::size_t>(n));
            continue;
        }
        if (n == 0) {
            dir.eof = true;
            break;
        }
        if (errno == EINTR) continue;
        return errno == EAGAIN || errno == EWOULDBLOCK;
    }
    return true;
}

// Writes what `dir` holds to `to`, and passes its end on once it is empty.
bool push(int to, Direction& dir) {
    while (!dir.buf.empty()) {
        ssize_t n = ::send(to, dir.buf.data(), dir.buf.size(), MSG_NOSIGNAL);
        if (n > 0) {
            dir.buf.erase(0, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
    if (dir.eof && !dir.shut) {
        ::shutdown(to, SHUT_WR);
        dir.shut = true;
    }
    return true;
}

void relay(std::vector<Listener>& listeners, const sockaddr_in& guest_base, int stop_fd) {
    std::list<Connection> conns;
    std::vector<pollfd> fds;
    std::vector<Connection*> owner;  // per pollfd: its connection (null: stop or a listener)
    for (;;) {
        fds.clear();
        owner.clear();
        fds.push_back({stop_fd, POLLIN, 0});
        owner.push_back(nullptr);
        for (auto& l : listeners) {
            fds.push_back({l.fd.get(), POLLIN, 0});
            owner.push_back(nullptr);
        }
        for (auto& c : conns) {
            short ce = 0, ge = 0;
            if (!c.to_guest.eof && c.to_guest.buf.size() < max_queued) ce |= POLLIN;
            if (!c.to_client.buf.empty()) ce |= POLLOUT;
            if (c.connecting) {
                ge = POLLOUT;
            } else {
                if (!c.to_client.eof && c.to_client.buf.size() < max_queued) ge |= POLLIN;
                if (!c.to_guest.buf.empty()) ge |= POLLOUT;
            }
            fds.push_back({c.client.get(), ce, 0});
            owner.push_back(&c);
            fds.push_back({c.guest.get(), ge, 0});
            owner.push_back(&c);
        }
        if (::poll(fds.data(), fds.size(), -1) < 0) {
            if (errno == EINTR) continue;
            return;
        }
        if (fds[0].revents) return;
        for (std::size_t i = 0; i < listeners.size(); ++i) {
            if (!(fds[1 + i].revents & POLLIN)) continue;
            Fd client(
                ::accept4(listeners[i].fd.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
            if (!client || conns.size() >= max_published_connections) continue;
            sockaddr_in g = guest_base;
            g.sin_port = htons(listeners[i].guest_port);
            Fd to_guest = connect_guest(g);
            if (!to_guest) continue;
            Connection c;
            c.client = std::move(client);
            c.guest = std::move(to_guest);
            conns.push_back(std::move(c));
        }
        for (std::size_t i = 1 + listeners.size(); i < fds.size(); i += 2) {
            Connection& c = *owner[i];
            const pollfd& cp = fds[i];
            const pollfd& gp = fds[i + 1];
            if (c.connecting && gp.revents) {
                int err = 0;
                socklen_t len = sizeof err;
                if (::getsockopt(c.guest.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 ||
                    err != 0) {
                    c.dead = true;  // refused or unreachable: the client sees its close
                    continue;
                }
                c.connecting = false;
            }
            if ((cp.revents & (POLLERR | POLLNVAL)) ||
                (!c.connecting && (gp.revents & (POLLERR | POLLNVAL)))) {
                c.dead = true;
                continue;
            }
            bool ok = true;
            if (cp.revents & (POLLIN | POLLHUP)) ok = ok && pull(c.client.get(), c.to_guest);
            if (!c.connecting && (gp.revents & (POLLIN | POLLHUP)))
                ok = ok && pull(c.guest.get(), c.to_client);
            if (!c.connecting) ok = ok && push(c.guest.get(), c.to_guest);
            ok = ok && push(c.client.get(), c.to_client);
            if (!ok || (c.to_guest.shut && c.to_client.shut)) c.dead = true;
        }
        conns.remove_if([](const Connection& c) { return c.dead; });
    }
}

}  // namespace

std::function<void(int)> start_publisher(const StateStore& store, const std::string& id) {
    return with_context("publishing the ports of " + id, [&] {
        auto r = store.try_load(id);
        if (!r || r->spec.publish.empty() || !r->network || !r->network->contains("guest_address"))
            throw Error(ErrorCode::runtime, "the sandbox's record has no network to publish on");
        sockaddr_in guest{};
        guest.sin_family = AF_INET;
        const std::string address = (*r->network)["guest_address"].get<std::string>();
        if (::inet_pton(AF_INET, address.c_str(), &guest.sin_addr) != 1)
            throw Error(ErrorCode::runtime, "the guest's address is not one: " + address);
        auto listeners = std::make_shared<std::vector<Listener>>();
        for (const auto& p : r->spec.publish)
            listeners->push_back(Listener{bind_loopback(p.host_port, p.guest_port), p.guest_port});
        return std::function<void(int)>(
            [listeners, guest](int stop_fd) { relay(*listeners, guest, stop_fd); });
    });
}

}  // namespace sandweave
