// Bounded connections for the E2B server (connections.hpp): cpp-httplib
// parses and routes; this file decides which connections it gets, for how
// long, and reads and writes their sockets under deadlines.
#include "lib/e2b/connections.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include <nlohmann/json.hpp>

namespace sandweave::e2b {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Set by the accepting thread while it refuses a connection inline.
thread_local bool refusing = false;

int ms_left(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left, 1000));
}

void address(int fd, bool peer, std::string& ip, int& port) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                  : ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    if (rc != 0) return;
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
        auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
        port = ntohs(a->sin6_port);
    }
    ip = buf;
}

}  // namespace

struct BoundedServer::Connection {
    enum class Phase { idle, headers, body };
    int fd;
    std::atomic<Phase> phase{Phase::idle};
    bool evicted = false;  // under the server's mutex
};

namespace {

thread_local BoundedServer::Connection* current = nullptr;

// A connection's socket as cpp-httplib's Stream, under the deadlines.
class DeadlineStream : public httplib::Stream {
  public:
    DeadlineStream(BoundedServer::Connection& c, const ConnectionLimits& l,
                   std::function<bool()> stopping)
        : c_(c), limits_(l), stopping_(std::move(stopping)) {}

    // Waits for the next request's first byte (idle); false: close.
    bool wait_request() {
        header_deadline_.reset();
        if (pos_ < len_) return begin_headers();
        auto deadline = Clock::now() + limits_.idle;
        for (;;) {
            if (stopping_()) return false;
            int left = ms_left(deadline);
            if (left == 0) return false;
            pollfd p{c_.fd, POLLIN, 0};
            int n = ::poll(&p, 1, left);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return false;
            if (n > 0) return begin_headers();
        }
    }

    bool is_readable() const override { return pos_ < len_ || wait(POLLIN); }
    // False too once the client has closed its end: a stream that waits
    // for something to send learns that its client is gone.
    bool is_writable() const override {
        if (stopping_()) return false;
        pollfd p{c_.fd, POLLRDHUP, 0};
        if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) return false;
        return wait(POLLOUT);
    }

    ssize_t read(char* ptr, std::size_t size) override {
        if (pos_ == len_) {
            auto start = Clock::now();
            bool ready = wait(POLLIN);
            if (c_.phase == BoundedServer::Connection::Phase::body) {
                waited_ += Clock::now() - start;
                // A body that trickles: under 1 KiB/s of the client's time.
                auto secs = std::chrono::duration_cast<milliseconds>(waited_).count() / 1000;
                if (waited_ > limits_.io && body_bytes_ < static_cast<std::size_t>(secs) * 1024)
                    return -1;
            }
            if (!ready) return -1;
            ssize_t n;
            do {
                n = ::recv(c_.fd, buf_, sizeof buf_, 0);
            } while (n < 0 && errno == EINTR);
            if (n <= 0) return n;
            pos_ = 0;
            len_ = static_cast<std::size_t>(n);
        }
        std::size_t n = std::min(size, len_ - pos_);
        std::memcpy(ptr, buf_ + pos_, n);
        pos_ += n;
        if (c_.phase == BoundedServer::Connection::Phase::body) body_bytes_ += n;
        return static_cast<ssize_t>(n);
    }

    ssize_t write(const char* ptr, std::size_t size) override {
        if (!is_writable()) return -1;
        ssize_t n;
        do {
            n = ::send(c_.fd, ptr, size, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n;
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        address(c_.fd, true, ip, port);
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        address(c_.fd, false, ip, port);
    }
    socket_t socket() const override { return c_.fd; }

  private:
    bool begin_headers() {
        c_.phase = BoundedServer::Connection::Phase::headers;
        header_deadline_ = Clock::now() + limits_.headers;
        waited_ = {};
        body_bytes_ = 0;
        return true;
    }
    // Readable/writable within the phase's deadline (polled in slices, so a
    // stopping server is noticed).
    bool wait(short events) const {
        auto deadline = Clock::now() + limits_.io;
        if (c_.phase == BoundedServer::Connection::Phase::headers && header_deadline_)
            deadline = std::min(deadline, *header_deadline_);
        for (;;) {
            if (stopping_()) return false;
            int left = ms_left(deadline);
            if (left == 0) return false;
            pollfd p{c_.fd, events, 0};
            int n = ::poll(&p, 1, left);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return false;
            if (n > 0) return true;
        }
    }

    BoundedServer::Connection& c_;
    const ConnectionLimits& limits_;
    std::function<bool()> stopping_;
    char buf_[4096];
    std::size_t pos_ = 0, len_ = 0;
    std::optional<Clock::time_point> header_deadline_;
    Clock::duration waited_{};
    std::size_t body_bytes_ = 0;
};

}  // namespace

// One thread per admitted connection; a refused one is answered inline.
class ConnectionThreads : public httplib::TaskQueue {
  public:
    explicit ConnectionThreads(BoundedServer& s) : s_(s) {}
    void enqueue(std::function<void()> fn) override {
        if (!s_.reserve()) {
            refusing = true;
            fn();
            refusing = false;
            return;
        }
        try {
            std::thread([this, fn = std::move(fn)] {
                fn();
                s_.release();
            }).detach();
        } catch (const std::system_error&) {
            s_.release();
            refusing = true;
            fn();
            refusing = false;
        }
    }
    void shutdown() override { s_.wait_all(); }

  private:
    BoundedServer& s_;
};

BoundedServer::BoundedServer(const ConnectionLimits& limits) : limits_(limits) {
    new_task_queue = [this] { return new ConnectionThreads(*this); };
    // Past the headers: the body and the handler are under `io` alone.
    set_pre_routing_handler([](const httplib::Request&, httplib::Response&) {
        if (current) current->phase = Connection::Phase::body;
        return HandlerResponse::Unhandled;
    });
}

BoundedServer::~BoundedServer() {
    wait_all();
}

bool BoundedServer::reserve() {
    std::lock_guard<std::mutex> lock(mu_);
    if (active_ < limits_.max) {
        ++active_;
        return true;
    }
    for (auto& [fd, c] : connections_) {
        if (c->evicted || c->phase != Connection::Phase::idle) continue;
        c->evicted = true;
        ::shutdown(fd, SHUT_RDWR);  // its wait ends; its slot is freed as it goes
        ++active_;
        return true;
    }
    return false;
}

void BoundedServer::release() {
    std::lock_guard<std::mutex> lock(mu_);
    --active_;
    cv_.notify_all();
}

void BoundedServer::wait_all() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return active_ == 0; });
}

void BoundedServer::set_backlog(int n) {
    socket_t sock = svr_sock_;
    if (sock != INVALID_SOCKET) (void)::listen(sock, n);  // Linux takes the new backlog
}

void BoundedServer::close_idle() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [fd, c] : connections_)
        if (c->phase == Connection::Phase::idle && !c->evicted) {
            c->evicted = true;
            ::shutdown(fd, SHUT_RDWR);
        }
}

bool BoundedServer::process_and_close_socket(socket_t sock) {
    if (refusing) {
        std::string body =
            nlohmann::json{{"code", 503},
                           {"message", "too many connections (at most " +
                                           std::to_string(limits_.max) + " at once); try again"}}
                .dump();
        std::string answer =
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
        (void)::send(sock, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        ::shutdown(sock, SHUT_RDWR);
        ::close(sock);
        return false;
    }
    Connection c;
    c.fd = sock;
    {
        std::lock_guard<std::mutex> lock(mu_);
        connections_[sock] = &c;
    }
    DeadlineStream stream(c, limits_, [this] { return stopping(); });
    bool ok = true;
    for (std::size_t n = 0; ok && n < keep_alive_max_count_; ++n) {
        c.phase = Connection::Phase::idle;
        if (!stream.wait_request()) break;
        bool closed = false;
        current = &c;
        ok = process_request(stream, n + 1 == keep_alive_max_count_, closed,
                             [](httplib::Request&) {});
        current = nullptr;
        if (closed) break;
    }
    {
        std::lock_guard<std::mutex> lock(mu_);
        connections_.erase(sock);
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ok;
}

}  // namespace sandweave::e2b
