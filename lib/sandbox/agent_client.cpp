#include "lib/sandbox/agent_client.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <termios.h>

#include <cerrno>
#include <cstring>

#include "lib/core/error.hpp"
#include "lib/core/json_input.hpp"
#include "lib/runtime/relay.hpp"
#include "lib/sandbox/sandbox.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// The calling thread's terminal signals, taken through a signalfd for the
// life of an attached command (the CLI's Ctrl-C goes to the guest).
class OwnSignals {
  public:
    explicit OwnSignals(bool active, bool winch) {
        if (!active) return;
        sigemptyset(&set_);
        for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&set_, s);
        if (winch) sigaddset(&set_, SIGWINCH);
        ::pthread_sigmask(SIG_BLOCK, &set_, &old_);
        fd_ = Fd(::signalfd(-1, &set_, SFD_CLOEXEC | SFD_NONBLOCK));
        active_ = true;
    }
    ~OwnSignals() {
        if (!active_) return;
        // Drop what arrived meanwhile (it was forwarded), then unblock.
        fd_.reset();
        timespec zero{};
        while (::sigtimedwait(&set_, nullptr, &zero) > 0) {
        }
        ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
    }
    int fd() const { return fd_.get(); }
    std::vector<int> take() {
        std::vector<int> out;
        signalfd_siginfo si;
        while (fd_ && ::read(fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si))
            out.push_back(static_cast<int>(si.ssi_signo));
        return out;
    }

  private:
    bool active_ = false;
    sigset_t set_{}, old_{};
    Fd fd_;
};

void deliver(const OutputSink& sink, std::string_view data) {
    if (sink.on_data) {
        sink.on_data(data);
    } else if (sink.fd >= 0) {
        write_all(sink.fd, data);  // a reader gone away is not our failure
    }
}

}  // namespace

AgentClient::AgentClient(Fd fd, std::string sandbox)
    : fd_(std::move(fd)), sandbox_(std::move(sandbox)) {}

AgentClient::AgentClient(const fs::path& socket, std::string sandbox)
    : sandbox_(std::move(sandbox)) {
    fd_ = connect_unix(socket);
    if (!fd_)
        throw Error(ErrorCode::general, "cannot reach the guest agent of sandbox " + sandbox_ +
                                            ": " + std::strerror(errno));
}

std::optional<AgentClient> AgentClient::try_connect(const fs::path& socket, std::string sandbox) {
    Fd fd = connect_unix(socket);
    if (!fd) return std::nullopt;
    return AgentClient(std::move(fd), std::move(sandbox));
}

void AgentClient::lost(const std::string& why) const {
    throw Error(ErrorCode::general, "guest agent of sandbox " + sandbox_ + ": " + why);
}

void AgentClient::send(const std::string& frame) {
    if (!send_all(fd_.get(), frame)) lost("its supervisor closed the connection");
}

agent::Frame AgentClient::receive(std::optional<Clock::time_point> deadline) {
    for (;;) {
        try {
            if (auto f = reader_.next()) return std::move(*f);
        } catch (const agent::ProtocolError& e) {
            lost(e.what());
        }
        int timeout = -1;
        if (deadline) {
            auto left =
                std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now());
            if (left.count() <= 0) lost("no answer in time");
            timeout = static_cast<int>(left.count());
        }
        pollfd p{fd_.get(), POLLIN, 0};
        int n = ::poll(&p, 1, timeout);
        if (n < 0 && errno == EINTR) continue;
        if (n == 0) continue;  // the deadline check above ends it
        char buf[64 * 1024];
        ssize_t r = ::read(fd_.get(), buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) lost("its supervisor closed the connection (the sandbox stopped?)");
        reader_.feed(std::string_view(buf, static_cast<std::size_t>(r)));
    }
}

RunOutcome AgentClient::outcome(const agent::Frame& f, const std::string& argv0,
                                std::optional<std::uint32_t> timeout_ms) const {
    agent::Exit e;
    try {
        e = agent::decode_exit(f.payload);
    } catch (const agent::ProtocolError& err) {
        lost(err.what());
    }
    auto status = agent::exit_status(e);
    if (!status) lost(e.message.empty() ? "it went away" : e.message);
    RunOutcome out;
    out.status = *status;
    if (e.kind == SW_TIMED_OUT) {
        out.timed_out = true;
        // A detached command's timeout is the agent's to know, not this client's.
        out.message = timeout_ms ? "command timed out after " + std::to_string(*timeout_ms) +
                                       " ms and was killed"
                                 : "command timed out and was killed";
    } else if (e.kind == SW_NOT_STARTED) {
        // The agent's message is "exec: ..." or "chdir: ..." (guest/agent.c).
        if (out.status == 127)
            out.message = "command not found in sandbox " + sandbox_ + ": " + argv0;
        else if (e.message.rfind("exec", 0) == 0)
            out.message = "command not executable in sandbox " + sandbox_ + ": " + argv0 + " (" +
                          e.message.substr(6) + ")";
        else if (e.message.rfind("chdir", 0) == 0)
            out.message = "cannot start " + argv0 + " in sandbox " + sandbox_ +
                          ": working directory: " + e.message.substr(7);
        else
            out.message = "cannot start " + argv0 + " in sandbox " + sandbox_ + ": " + e.message;
    }
    return out;
}

namespace {

// The request for `spec_in` as `io` runs it: stdin, the terminal's size, the timeout.
agent::ExecSpec exec_request(const agent::ExecSpec& spec_in, const AttachOptions& io, bool tty_in) {
    agent::ExecSpec spec = spec_in;
    const bool pty = spec.flags & SW_EXEC_PTY;
    if (io.stdin_fd >= 0) spec.flags |= SW_EXEC_STDIN;
    if (tty_in) {
        winsize ws{};
        if (::ioctl(io.stdin_fd, TIOCGWINSZ, &ws) == 0)
            spec.rows = ws.ws_row, spec.cols = ws.ws_col;
    } else if (pty && io.rows && io.cols) {
        spec.rows = io.rows, spec.cols = io.cols;  // a remote client's terminal
    }
    if (io.timeout) spec.timeout_ms = static_cast<std::uint32_t>(io.timeout->count());
    return spec;
}

}  // namespace

// One attached command, from its EXEC to its EXIT: the agent's frames, the
// caller's stdin, signals and control, each a step of its own.
class AgentClient::Run {
  public:
    Run(AgentClient& c, const agent::ExecSpec& spec_in, const AttachOptions& io)
        : c_(c),
          io_(io),
          pty_(spec_in.flags & SW_EXEC_PTY),
          tty_in_(pty_ && io.stdin_fd >= 0 && ::isatty(io.stdin_fd)),
          spec_(exec_request(spec_in, io, tty_in_)),
          sid_(c.next_session_++),
          argv0_(spec_.argv.empty() ? "" : spec_.argv[0]),
          own_(io.forward_own_signals, tty_in_),
          stdin_open_(io.stdin_fd >= 0),
          start_deadline_(Clock::now() + agent_start_timeout) {
        if (io.timeout) exit_deadline_ = Clock::now() + *io.timeout + agent_exit_grace;
    }

    RunOutcome go() {
        c_.send(agent::encode(SW_EXEC, sid_, agent::encode_exec(spec_)));
        for (;;) {
            if (auto f = next_frame()) {
                if (auto out = handle(*f)) return *out;
                continue;
            }
            check_deadlines();
            wait_and_relay();
        }
    }

  private:
    std::optional<agent::Frame> next_frame() {
        try {
            return c_.reader_.next();
        } catch (const agent::ProtocolError& e) {
            c_.lost(e.what());
        }
    }

    // One whole frame of the agent's; the outcome once it is the EXIT.
    std::optional<RunOutcome> handle(const agent::Frame& f) {
        if (f.session != sid_) c_.lost("answer for another command");
        switch (f.type) {
            case SW_STARTED:
                if (f.payload.size() != 8) c_.lost("malformed STARTED");
                started_ = true;
                return std::nullopt;
            case SW_STDOUT:
            case SW_STDERR:
                deliver(f.type == SW_STDOUT ? io_.out : io_.err, f.payload);
                c_.send(agent::encode_u32(SW_OUTPUT_ACK, sid_,
                                          static_cast<std::uint32_t>(f.payload.size())));
                return std::nullopt;
            case SW_STDIN_ACK: {
                std::uint32_t n = 0;
                try {
                    n = agent::decode_u32(f.payload);
                } catch (const agent::ProtocolError& e) {
                    c_.lost(e.what());
                }
                stdin_window_ = std::min<std::uint32_t>(SW_AGENT_STDIN_WINDOW, stdin_window_ + n);
                return std::nullopt;
            }
            case SW_ERROR:
                return std::nullopt;  // the EXIT that follows says what matters
            case SW_EXIT: {
                RunOutcome out = c_.outcome(f, argv0_, spec_.timeout_ms);
                out.cancelled = cancelled_;
                return out;
            }
            default:
                c_.lost("unexpected frame type " + std::to_string(f.type));
        }
    }

    void check_deadlines() {
        auto now = Clock::now();
        if (!started_ && now > start_deadline_)
            c_.lost("did not start the command within " +
                    std::to_string(agent_start_timeout.count()) + " s");
        if (exit_deadline_ && now > *exit_deadline_) {
            c_.send(agent::encode_signal(sid_, SIGKILL, SW_TO_TREE));
            c_.lost("did not report the command's end after its timeout");
        }
    }

    // Waits (a second at most) for the agent, stdin (while the agent's window
    // has room), our own signals or the caller's control, and relays each.
    void wait_and_relay() {
        std::vector<pollfd> p;
        p.push_back({c_.fd_.get(), POLLIN, 0});
        int in_at = -1, own_at = -1, ctl_at = -1;
        if (stdin_open_ && stdin_window_ > 0) {
            in_at = static_cast<int>(p.size());
            p.push_back({io_.stdin_fd, POLLIN, 0});
        }
        if (own_.fd() >= 0) {
            own_at = static_cast<int>(p.size());
            p.push_back({own_.fd(), POLLIN, 0});
        }
        if (io_.control) {
            ctl_at = static_cast<int>(p.size());
            p.push_back({io_.control->fd(), POLLIN, 0});
        }
        int n = ::poll(p.data(), p.size(), 1000);
        if (n < 0 && errno == EINTR) return;
        if (n < 0) throw_errno("poll");
        if (p[0].revents) read_agent();
        if (in_at >= 0 && p[in_at].revents) send_stdin();
        if (own_at >= 0 && p[own_at].revents) relay_own_signals();
        if (ctl_at >= 0 && p[ctl_at].revents) relay_control();
    }

    void read_agent() {
        char buf[64 * 1024];
        ssize_t r = ::read(c_.fd_.get(), buf, sizeof buf);
        if (r < 0 && errno != EINTR && errno != EAGAIN) r = 0;
        if (r == 0) c_.lost("its supervisor closed the connection (the sandbox stopped?)");
        if (r > 0) c_.reader_.feed(std::string_view(buf, static_cast<std::size_t>(r)));
    }

    // What stdin has, up to the agent's window; its end as an empty STDIN.
    void send_stdin() {
        char buf[64 * 1024];
        std::size_t want = std::min<std::size_t>(sizeof buf, stdin_window_);
        ssize_t r = ::read(io_.stdin_fd, buf, want);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
        if (r <= 0) {
            stdin_open_ = false;
            c_.send(agent::encode(SW_STDIN, sid_));  // EOF
            return;
        }
        stdin_window_ -= static_cast<std::uint32_t>(r);
        c_.send(agent::encode(SW_STDIN, sid_, std::string_view(buf, static_cast<std::size_t>(r))));
    }

    void forward(int sig) {
        if (io_.forward_signal) {
            io_.forward_signal(sig);
            return;
        }
        c_.send(agent::encode_signal(sid_, static_cast<std::uint32_t>(sig), SW_TO_GROUP));
    }

    void relay_own_signals() {
        for (int sig : own_.take()) {
            if (sig == SIGWINCH) {
                winsize ws{};
                if (::ioctl(io_.stdin_fd, TIOCGWINSZ, &ws) == 0)
                    c_.send(agent::encode_resize(sid_, ws.ws_row, ws.ws_col));
            } else if (!pty_) {
                forward(sig);
            } else if (sig != SIGINT && sig != SIGQUIT) {
                forward(sig);  // with a pty, ^C reaches the guest as a byte
            }
        }
    }

    void relay_control() {
        for (int sig : io_.control->take_signals()) forward(sig);
        if (auto w = io_.control->take_resize(); w && pty_)
            c_.send(agent::encode_resize(sid_, w->first, w->second));
        if (io_.control->cancelled() && !cancelled_) {
            cancelled_ = true;
            c_.send(agent::encode_signal(sid_, SIGKILL, SW_TO_TREE));
        }
    }

    AgentClient& c_;
    const AttachOptions& io_;
    const bool pty_, tty_in_;
    const agent::ExecSpec spec_;
    const std::uint32_t sid_;
    const std::string argv0_;
    OwnSignals own_;
    bool started_ = false, stdin_open_, cancelled_ = false;
    std::uint32_t stdin_window_ = SW_AGENT_STDIN_WINDOW;
    const Clock::time_point start_deadline_;
    std::optional<Clock::time_point> exit_deadline_;
};

RunOutcome AgentClient::run(const agent::ExecSpec& spec, const AttachOptions& io) {
    return Run(*this, spec, io).go();
}

AgentClient::Started AgentClient::start_detached(agent::ExecSpec spec) {
    spec.flags |= SW_EXEC_DETACH;
    spec.flags &= ~static_cast<std::uint32_t>(SW_EXEC_STDIN | SW_EXEC_PTY);
    std::uint32_t sid = next_session_++;
    send(agent::encode(SW_EXEC, sid, agent::encode_exec(spec)));
    auto deadline = Clock::now() + agent_start_timeout;
    for (;;) {
        agent::Frame f = receive(deadline);
        if (f.session != sid) lost("answer for another command");
        if (f.type == SW_STARTED) {
            if (f.payload.size() != 8) lost("malformed STARTED");
            return {agent::get_u32(f.payload, 4), agent::get_u32(f.payload, 0)};
        }
        if (f.type == SW_EXIT) {
            RunOutcome out = outcome(f, spec.argv.empty() ? "" : spec.argv[0], std::nullopt);
            throw Error(ErrorCode::general, out.message.value_or("the command did not start"));
        }
        if (f.type != SW_ERROR) lost("unexpected frame type " + std::to_string(f.type));
    }
}

json AgentClient::request(std::uint8_t type, const json& req) {
    std::uint32_t sid = next_session_++;
    send(agent::encode(type, sid, req.dump()));
    agent::Frame f = receive(Clock::now() + agent_start_timeout);
    if (f.session != sid) lost("answer for another request");
    if (f.type == SW_ERROR)
        throw Error(ErrorCode::not_found, f.payload + " in sandbox " + sandbox_);
    if (f.type != type) lost("unexpected frame type " + std::to_string(f.type));
    try {
        return parse_untrusted_json(f.payload);
    } catch (const json::exception&) {
        lost("malformed answer");
    }
}

json AgentClient::list() {
    return request(SW_LIST, json::object());
}
json AgentClient::status() {
    return request(SW_STATUS, json::object());
}

bool AgentClient::kill(std::uint32_t handle, int sig) {
    return request(SW_KILL, {{"handle", handle}, {"signal", sig}}).value("running", false);
}

RunOutcome AgentClient::logs(std::uint32_t handle, bool follow, const AttachOptions& io) {
    std::uint32_t sid = next_session_++;
    send(agent::encode(SW_ATTACH, sid, json{{"handle", handle}, {"follow", follow}}.dump()));
    for (;;) {
        agent::Frame f = receive(std::nullopt);
        if (f.session != sid) lost("answer for another request");
        switch (f.type) {
            case SW_STDOUT:
            case SW_STDERR:
                deliver(f.type == SW_STDOUT ? io.out : io.err, f.payload);
                break;
            case SW_ATTACH:
                break;  // {"truncated": true}: the oldest output is gone
            case SW_END_OF_LOG: {
                RunOutcome out;
                out.status = -1;
                return out;
            }
            case SW_EXIT:
                return outcome(f, "", std::nullopt);
            case SW_ERROR:
                throw Error(ErrorCode::not_found, f.payload + " in sandbox " + sandbox_);
            default:
                lost("unexpected frame type " + std::to_string(f.type));
        }
    }
}

RunOutcome AgentClient::wait(std::uint32_t handle) {
    std::uint32_t sid = next_session_++;
    send(agent::encode(SW_WAIT, sid, json{{"handle", handle}}.dump()));
    agent::Frame f = receive(std::nullopt);
    if (f.session != sid) lost("answer for another request");
    if (f.type == SW_ERROR)
        throw Error(ErrorCode::not_found, f.payload + " in sandbox " + sandbox_);
    if (f.type != SW_EXIT) lost("unexpected frame type " + std::to_string(f.type));
    return outcome(f, "", std::nullopt);
}

}  // namespace sandweave
