#pragma once
// The one owning file-descriptor type. Every descriptor the library opens is
// held by an Fd (or a FileLock, which is one with an flock on it) from the
// moment it exists, so an exception on any path closes it. Descriptors are
// opened close-on-exec; a child gets only what a Command passes it explicitly.

#include <fcntl.h>
#include <unistd.h>

#include <string_view>

namespace sandweave {

class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() { reset(); }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    Fd(Fd&& o) noexcept : fd_(o.release()) {}
    Fd& operator=(Fd&& o) noexcept {
        if (this != &o) {
            reset();
            fd_ = o.release();
        }
        return *this;
    }

    int get() const { return fd_; }
    bool valid() const { return fd_ >= 0; }
    explicit operator bool() const { return valid(); }

    // Gives up ownership without closing.
    int release() {
        int f = fd_;
        fd_ = -1;
        return f;
    }
    void reset(int fd = -1) {
        if (fd_ >= 0) ::close(fd_);
        fd_ = fd;
    }

  private:
    int fd_ = -1;
};

struct Pipe {
    Fd read, write;
};

// A close-on-exec pipe; throws Error on failure.
Pipe make_pipe();

// Writes all of `data` to `fd` (retrying short writes and EINTR); false when
// the reader is gone or the write fails.
bool write_all(int fd, std::string_view data);
// The same for a socket, with MSG_NOSIGNAL: a peer gone away is EPIPE, false,
// not a SIGPIPE that kills the CLI (a relay that closes while `ls` asks it).
bool send_all(int fd, std::string_view data);

}  // namespace sandweave
