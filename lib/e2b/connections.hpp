#pragma once
// The E2B server's connections, bounded (docs/e2b.md "Limits"): at most
// `max` at once, each on a thread of its own. A connection past the limit
// takes the place of one that waits idle for its next request (that one is
// closed); when none is idle it gets 503 and is closed at once, by the
// accepting thread, so a flood of connections costs no thread and no memory.
// A request's headers must arrive within `headers` of its first byte (a
// client sending them a byte at a time is cut off), an idle keep-alive
// connection is closed after `idle`, and every read or write after the
// headers waits at most `io`; a body must average 1 KiB/s of the time spent
// waiting for it once that is over `io`.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <mutex>

#include <httplib.h>

namespace sandweave::e2b {

struct ConnectionLimits {
    std::size_t max = 64;
    std::chrono::milliseconds idle{15000};
    std::chrono::milliseconds headers{10000};
    std::chrono::milliseconds io{30000};
};

class BoundedServer : public httplib::Server {
  public:
    explicit BoundedServer(const ConnectionLimits& limits);
    ~BoundedServer() override;
    // Closes every connection that waits idle (at shutdown).
    void close_idle();
    // After binding: a listen backlog for bursts (cpp-httplib's is 5, so a
    // burst of connections waited for SYN retransmits while the accepting
    // thread caught up).
    void set_backlog(int n);

    struct Connection;

  private:
    bool process_and_close_socket(socket_t sock) override;
    friend class ConnectionThreads;
    // A slot for a new connection, evicting an idle one when full; false:
    // refuse it.
    bool reserve();
    void release();
    void wait_all();
    bool stopping() const { return svr_sock_ == INVALID_SOCKET; }

    ConnectionLimits limits_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::size_t active_ = 0;
    std::map<int, Connection*> connections_;
};

}  // namespace sandweave::e2b
