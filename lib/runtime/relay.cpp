#include "lib/runtime/relay.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "lib/core/agent_wire.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto hello_timeout = std::chrono::seconds(10);
constexpr std::size_t client_out_limit = 64u << 20;
constexpr std::size_t kept_exited = 64;

std::string utc_now() {
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// The exit status a person sees for an EXIT payload (ps).
std::optional<int> status_of(const std::string& exit_payload) {
    try {
        return agent::exit_status(agent::decode_exit(exit_payload));
    } catch (const agent::ProtocolError&) {
        return std::nullopt;
    }
}

struct Client {
    Fd fd;
    agent::FrameReader reader;
    std::string out;
    std::map<std::uint32_t, std::uint32_t> sessions;  // client's id -> ours
    bool dead = false;
};

struct Watcher {
    int client;
    std::uint32_t csid;
};

struct Session {
    std::uint32_t id = 0;
    int client = -1;  // attached to this client; -1 when detached or orphaned
    std::uint32_t csid = 0;
    bool detached = false;
    std::uint32_t pid = 0;
    std::string user, command, started_at;
    bool ended = false;
    std::string exit_payload;
    std::uint32_t in_flight = 0;  // output the agent sent that we did not ack
    // Detached: the kept output, oldest first.
    std::deque<std::pair<std::uint8_t, std::string>> log;
    std::size_t log_bytes = 0;
    bool log_truncated = false;
    std::vector<Watcher> followers, waiters;
    std::optional<Watcher> starter;  // detached: who asked, until STARTED
};

class Relay {
  public:
    Relay(Fd agent, Fd listener, fs::path activity, fs::path ready)
        : agent_(std::move(agent)),
          listener_(std::move(listener)),
          activity_(std::move(activity)),
          ready_(std::move(ready)) {}
    void run();

  private:
    // --- the agent side
    void agent_send(const std::string& frame) { agent_out_ += frame; }
    void agent_down(const std::string& why);
    void on_agent_readable();
    void on_agent_frame(agent::Frame f);
    void start_pending();

    // --- the clients
    void accept_client();
    void on_client_readable(int fd);
    void on_client_frame(Client& c, agent::Frame f);
    void client_send(int fd, const std::string& frame);
    void drop_client(int fd);
    void exec(Client& c, std::uint32_t csid, const std::string& payload);
    Session* by_handle(const json& req);
    void reply_json(Client& c, std::uint8_t type, std::uint32_t csid, const json& j);

    void deliver_output(Session& s, std::uint8_t type, const std::string& data);
    void end_session(Session& s, const std::string& exit_payload);
    void prune_exited();
    void update_activity();
    void set_ready_flag(bool ready);

    Fd agent_;
    Fd listener_;
    agent::FrameReader agent_reader_;
    std::string agent_out_;
    enum class AgentState { connecting, ready, down } agent_state_ = AgentState::connecting;
    std::string down_reason_;
    std::string nonce_;
    Clock::time_point hello_deadline_;
    // Client frames for the agent that came while it had not said HELLO yet,
    // in order (a signal must not overtake its command).
    struct Pending {
        int client;
        agent::Frame frame;
    };
    std::vector<Pending> pending_;

    std::map<int, Client> clients_;
    std::map<std::uint32_t, Session> sessions_;
    std::deque<std::uint32_t> exited_;
    std::uint32_t next_id_ = 1;
    // While a detached command runs, a shared flock on the sandbox's activity
    // file says "busy" to its idle timeout (lib/sandbox/activity.hpp).
    fs::path activity_;
    Fd activity_lock_;
    // Exclusively flocked while the agent is ready (agent_ready_flag); open
    // from the start, so a reader that finds it unlocked knows it is not.
    fs::path ready_;
    Fd ready_fd_;
};

void Relay::set_ready_flag(bool ready) {
    if (!ready_fd_) return;
    // A reader holds its shared lock for two system calls: waiting is brief.
    while (::flock(ready_fd_.get(), ready ? LOCK_EX : LOCK_UN) != 0 && errno == EINTR) {
    }
}

void Relay::update_activity() {
    bool busy = std::any_of(sessions_.begin(), sessions_.end(),
                            [](const auto& e) { return e.second.detached && !e.second.ended; });
    if (busy == activity_lock_.valid() || activity_.empty()) return;
    if (busy) {
        Fd f(::open(activity_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
        // Refused only while the idle watcher ends the sandbox anyway.
        if (f && ::flock(f.get(), LOCK_SH | LOCK_NB) == 0) activity_lock_ = std::move(f);
    } else {
        activity_lock_.reset();
    }
    ::utimensat(AT_FDCWD, activity_.c_str(), nullptr, 0);  // the last activity: now
}

void Relay::agent_down(const std::string& why) {
    if (agent_state_ == AgentState::down) return;
    agent_state_ = AgentState::down;
    set_ready_flag(false);
    down_reason_ = why;
    agent_.reset();
    agent_out_.clear();
    agent::Exit lost{SW_LOST, 0, why};
    std::string payload = agent::encode_exit(lost);
    for (auto& p : pending_)
        if (p.frame.type == SW_EXEC)
            client_send(p.client, agent::encode(SW_EXIT, p.frame.session, payload));
    pending_.clear();
    std::vector<std::uint32_t> ids;
    for (auto& [id, s] : sessions_)
        if (!s.ended) ids.push_back(id);
    for (auto id : ids) end_session(sessions_[id], payload);
}

void Relay::on_agent_readable() {
    char buf[64 * 1024];
    ssize_t n = ::read(agent_.get(), buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
        agent_down("the guest agent's connection closed (the sandbox stopped)");
        return;
    }
    agent_reader_.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    try {
        if (agent_state_ == AgentState::connecting && !agent_reader_.sync_to_hello(nonce_)) return;
        while (agent_state_ != AgentState::down) {
            auto f = agent_reader_.next();
            if (!f) break;
            on_agent_frame(std::move(*f));
        }
    } catch (const agent::ProtocolError& e) {
        agent_down(std::string("the guest agent broke the protocol: ") + e.what());
    }
}

void Relay::on_agent_frame(agent::Frame f) {
    if (agent_state_ == AgentState::connecting) {
        if (f.type != SW_HELLO) throw agent::ProtocolError("expected HELLO");
        auto h = agent::decode_hello(f.payload);
        if (h.protocol != SW_AGENT_PROTOCOL || h.nonce != nonce_)
            throw agent::ProtocolError("HELLO for another protocol or connection");
        agent_state_ = AgentState::ready;
        set_ready_flag(true);
        start_pending();
        return;
    }
    if (f.session == 0) {
        if (f.type == SW_ERROR) return;  // about a frame of ours; nothing to tie it to
        throw agent::ProtocolError("unexpected frame type " + std::to_string(f.type));
    }
    auto it = sessions_.find(f.session);
    if (it == sessions_.end() || it->second.ended) {
        // A session of ours the agent may still talk about briefly (none after
        // EXIT); anything else is a lie.
        if (f.session >= next_id_) throw agent::ProtocolError("frame for an unknown command");
        return;
    }
    Session& s = it->second;
    switch (f.type) {
        case SW_STARTED: {
            s.pid = agent::decode_u32(f.payload);
            std::string started = f.payload + agent::u32_bytes(s.id);  // pid, handle
            if (s.client >= 0) client_send(s.client, agent::encode(SW_STARTED, s.csid, started));
            if (s.starter)
                client_send(s.starter->client, agent::encode(SW_STARTED, s.starter->csid, started));
            s.starter.reset();
            return;
        }
        case SW_STDOUT:
        case SW_STDERR:
            if (f.payload.size() > SW_AGENT_WINDOW - s.in_flight)
                throw agent::ProtocolError("output beyond the command's window");
            s.in_flight += static_cast<std::uint32_t>(f.payload.size());
            deliver_output(s, f.type, f.payload);
            return;
        case SW_STDIN_ACK:
            agent::decode_u32(f.payload);
            if (s.client >= 0) client_send(s.client, agent::encode(f.type, s.csid, f.payload));
            return;
        case SW_EXIT:
            agent::decode_exit(f.payload);  // validates
            end_session(s, f.payload);
            return;
        case SW_ERROR:
            if (f.payload.size() > 4096) throw agent::ProtocolError("error message too long");
            if (s.client >= 0) client_send(s.client, agent::encode(f.type, s.csid, f.payload));
            return;
        default:
            throw agent::ProtocolError("unexpected frame type " + std::to_string(f.type));
    }
}

void Relay::deliver_output(Session& s, std::uint8_t type, const std::string& data) {
    if (s.client >= 0) {
        // The client acknowledges what it consumed; its acks reopen the window.
        client_send(s.client, agent::encode(type, s.csid, data));
        return;
    }
    // Detached or orphaned: keep it (detached only), ack at once.
    agent_send(agent::encode_u32(SW_OUTPUT_ACK, s.id, static_cast<std::uint32_t>(data.size())));
    s.in_flight -= static_cast<std::uint32_t>(data.size());
    if (!s.detached) return;
    for (const auto& w : s.followers) client_send(w.client, agent::encode(type, w.csid, data));
    s.log.emplace_back(type, data);
    s.log_bytes += data.size();
    while (s.log_bytes > relay_log_limit && !s.log.empty()) {
        s.log_bytes -= s.log.front().second.size();
        s.log.pop_front();
        s.log_truncated = true;
    }
}

void Relay::end_session(Session& s, const std::string& exit_payload) {
    s.ended = true;
    s.exit_payload = exit_payload;
    if (s.client >= 0) {
        client_send(s.client, agent::encode(SW_EXIT, s.csid, exit_payload));
        auto c = clients_.find(s.client);
        if (c != clients_.end()) c->second.sessions.erase(s.csid);
    }
    for (const auto& w : s.followers)
        client_send(w.client, agent::encode(SW_EXIT, w.csid, exit_payload));
    for (const auto& w : s.waiters)
        client_send(w.client, agent::encode(SW_EXIT, w.csid, exit_payload));
    if (s.starter)
        client_send(s.starter->client, agent::encode(SW_EXIT, s.starter->csid, exit_payload));
    s.starter.reset();
    s.followers.clear();
    s.waiters.clear();
    if (s.detached) {
        exited_.push_back(s.id);
        prune_exited();
        update_activity();
    } else {
        sessions_.erase(s.id);
    }
}

void Relay::prune_exited() {
    while (exited_.size() > kept_exited) {
        sessions_.erase(exited_.front());
        exited_.pop_front();
    }
}

void Relay::start_pending() {
    auto pending = std::move(pending_);
    pending_.clear();
    for (auto& p : pending) {
        auto c = clients_.find(p.client);
        if (c == clients_.end() || c->second.dead) continue;
        try {
            on_client_frame(c->second, std::move(p.frame));
        } catch (const std::exception&) {
            c->second.dead = true;
        }
    }
}

void Relay::accept_client() {
    Fd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) return;
    // Only the sandbox's owner (the directory is 0700 too).
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 ||
        cred.uid != ::geteuid())
        return;
    int key = fd.get();
    Client c;
    c.fd = std::move(fd);
    clients_.emplace(key, std::move(c));
}

void Relay::client_send(int fd, const std::string& frame) {
    auto it = clients_.find(fd);
    if (it == clients_.end() || it->second.dead) return;
    it->second.out += frame;
    if (it->second.out.size() > client_out_limit) it->second.dead = true;
}

void Relay::drop_client(int fd) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    // Its attached commands are killed, as a closed terminal would; what they
    // still print is acknowledged and dropped.
    for (auto& [csid, id] : it->second.sessions) {
        auto s = sessions_.find(id);
        if (s == sessions_.end()) continue;
        s->second.client = -1;
        if (!s->second.detached && agent_state_ == AgentState::ready) {
            agent_send(agent::encode_signal(id, SIGKILL, SW_TO_TREE));
            if (s->second.in_flight)
                agent_send(agent::encode_u32(SW_OUTPUT_ACK, id, s->second.in_flight));
            s->second.in_flight = 0;
        }
    }
    for (auto& [id, s] : sessions_) {
        auto gone = [fd](const Watcher& w) { return w.client == fd; };
        s.followers.erase(std::remove_if(s.followers.begin(), s.followers.end(), gone),
                          s.followers.end());
        s.waiters.erase(std::remove_if(s.waiters.begin(), s.waiters.end(), gone), s.waiters.end());
        if (s.starter && s.starter->client == fd) s.starter.reset();
    }
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [fd](const Pending& p) { return p.client == fd; }),
                   pending_.end());
    clients_.erase(it);
}

void Relay::on_client_readable(int fd) {
    Client& c = clients_.at(fd);
    char buf[64 * 1024];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
        c.dead = true;
        return;
    }
    c.reader.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    try {
        while (!c.dead) {
            auto f = c.reader.next();
            if (!f) break;
            on_client_frame(c, std::move(*f));
        }
    } catch (const std::exception&) {
        c.dead = true;  // a client that breaks the protocol is dropped
    }
}

void Relay::exec(Client& c, std::uint32_t csid, const std::string& payload) {
    int key = c.fd.get();
    if (agent_state_ == AgentState::down) {
        client_send(key,
                    agent::encode(SW_EXIT, csid, agent::encode_exit({SW_LOST, 0, down_reason_})));
        return;
    }
    auto spec = agent::decode_exec(payload);
    Session s;
    s.id = next_id_++;
    s.detached = spec.flags & SW_EXEC_DETACH;
    s.client = s.detached ? -1 : key;
    s.csid = csid;
    s.user = std::to_string(spec.uid) + ":" + std::to_string(spec.gid);
    for (const auto& a : spec.argv) s.command += (s.command.empty() ? "" : " ") + a;
    if (spec.flags & SW_EXEC_COPY_OUT) s.command = "(sandweave cp from) " + spec.argv[0];
    if (spec.flags & SW_EXEC_COPY_IN) s.command = "(sandweave cp to) " + spec.argv[0];
    s.started_at = utc_now();
    if (!s.detached) c.sessions[csid] = s.id;
    agent_send(agent::encode(SW_EXEC, s.id, payload));
    // A detached command's client learns its handle from STARTED, then may go.
    if (s.detached) s.starter = Watcher{key, csid};
    bool detached = s.detached;
    sessions_.emplace(s.id, std::move(s));
    if (detached) update_activity();
}

Session* Relay::by_handle(const json& req) {
    std::uint32_t id = 0;
    if (req.contains("handle") && req["handle"].is_number_unsigned())
        id = req["handle"].get<std::uint32_t>();
    auto it = sessions_.find(id);
    return it == sessions_.end() ? nullptr : &it->second;
}

void Relay::reply_json(Client& c, std::uint8_t type, std::uint32_t csid, const json& j) {
    client_send(c.fd.get(), agent::encode(type, csid, j.dump()));
}

void Relay::on_client_frame(Client& c, agent::Frame f) {
    int key = c.fd.get();
    bool for_agent = f.type == SW_EXEC || f.type == SW_STDIN || f.type == SW_SIGNAL ||
                     f.type == SW_RESIZE || f.type == SW_OUTPUT_ACK;
    if (for_agent && agent_state_ == AgentState::connecting) {
        pending_.push_back({key, std::move(f)});
        return;
    }
    auto forward = [&](std::uint8_t type) {
        auto it = c.sessions.find(f.session);
        if (it == c.sessions.end() || agent_state_ != AgentState::ready) return;
        if (type == SW_OUTPUT_ACK) {
            auto& s = sessions_[it->second];
            std::uint32_t n = agent::decode_u32(f.payload);
            s.in_flight -= std::min(n, s.in_flight);
        }
        agent_send(agent::encode(type, it->second, f.payload));
    };
    switch (f.type) {
        case SW_EXEC:
            if (f.session == 0 || c.sessions.count(f.session))
                throw agent::ProtocolError("session");
            exec(c, f.session, f.payload);
            return;
        case SW_STDIN:
        case SW_SIGNAL:
        case SW_RESIZE:
        case SW_OUTPUT_ACK:
            forward(f.type);
            return;
        case SW_LIST: {
            json list = json::array();
            for (const auto& [id, s] : sessions_) {
                json p{{"handle", id},
                       {"pid", s.pid},
                       {"user", s.user},
                       {"command", s.command},
                       {"detached", s.detached},
                       {"started_at", s.started_at},
                       {"state", s.ended ? "exited" : "running"}};
                auto st = s.ended ? status_of(s.exit_payload) : std::nullopt;
                p["exit_code"] = st ? json(*st) : json(nullptr);
                list.push_back(p);
            }
            reply_json(c, SW_LIST, f.session, {{"processes", list}});
            return;
        }
        case SW_STATUS: {
            const char* st = agent_state_ == AgentState::ready        ? "ready"
                             : agent_state_ == AgentState::connecting ? "connecting"
                                                                      : "down";
            json j{{"agent", st}};
            if (agent_state_ == AgentState::down) j["reason"] = down_reason_;
            reply_json(c, SW_STATUS, f.session, j);
            return;
        }
        case SW_ATTACH:
        case SW_WAIT:
        case SW_KILL: {
            json req = parse_untrusted_json(f.payload);
            Session* s = by_handle(req);
            if (!s || !s->detached) {
                client_send(key, agent::encode(SW_ERROR, f.session, "no such process handle"));
                return;
            }
            if (f.type == SW_KILL) {
                int sig = req.value("signal", SIGTERM);
                if (sig < 1 || sig > 64) {
                    client_send(key, agent::encode(SW_ERROR, f.session, "bad signal"));
                    return;
                }
                if (!s->ended && agent_state_ == AgentState::ready) {
                    agent_send(
                        agent::encode_signal(s->id, static_cast<std::uint32_t>(sig), SW_TO_TREE));
                }
                reply_json(c, SW_KILL, f.session, {{"running", !s->ended}});
                return;
            }
            if (f.type == SW_ATTACH) {
                if (s->log_truncated) reply_json(c, SW_ATTACH, f.session, {{"truncated", true}});
                for (const auto& [type, data] : s->log)
                    client_send(key, agent::encode(type, f.session, data));
                if (!s->ended && req.value("follow", false)) {
                    s->followers.push_back({key, f.session});
                    return;
                }
                if (!s->ended) {
                    client_send(key, agent::encode(SW_END_OF_LOG, f.session));
                    return;
                }
            }
            if (s->ended) {
                client_send(key, agent::encode(SW_EXIT, f.session, s->exit_payload));
                return;
            }
            s->waiters.push_back({key, f.session});
            return;
        }
        default:
            throw agent::ProtocolError("unknown request");
    }
}

void Relay::run() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &set, nullptr);
    Fd sfd(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
    if (!ready_.empty())
        ready_fd_.reset(::open(ready_.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));

    nonce_ = random_hex(16);
    agent_send(agent::encode(SW_HELLO, 0, agent::encode_hello(nonce_)));
    hello_deadline_ = Clock::now() + hello_timeout;
    ::fcntl(agent_.get(), F_SETFL, O_NONBLOCK);

    auto reap = [&]() {
        for (;;) {
            pid_t pid = ::waitpid(-1, nullptr, WNOHANG);
            if (pid > 0) continue;
            if (pid < 0 && errno == EINTR) continue;
            return !(pid < 0 && errno == ECHILD);  // false: no child left
        }
    };
    std::vector<pollfd> pfds;
    std::vector<int> keys;
    for (;;) {
        if (!reap()) return;
        for (auto it = clients_.begin(); it != clients_.end();) {
            int fd = it->first;
            ++it;
            if (clients_.at(fd).dead) drop_client(fd);
        }
        int timeout = -1;
        if (agent_state_ == AgentState::connecting) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(hello_deadline_ -
                                                                              Clock::now());
            if (left.count() <= 0) {
                agent_down("the guest agent did not answer within " +
                           std::to_string(hello_timeout.count()) + " s");
            } else {
                timeout = static_cast<int>(left.count()) + 1;
            }
        }
        pfds.clear();
        keys.clear();
        pfds.push_back({sfd.get(), POLLIN, 0});
        keys.push_back(-1);
        pfds.push_back({listener_.get(), POLLIN, 0});
        keys.push_back(-2);
        if (agent_) {
            pfds.push_back(
                {agent_.get(), static_cast<short>(POLLIN | (agent_out_.empty() ? 0 : POLLOUT)), 0});
            keys.push_back(-3);
        }
        for (auto& [fd, c] : clients_) {
            pfds.push_back({fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
            keys.push_back(fd);
        }
        int n = ::poll(pfds.data(), pfds.size(), timeout);
        if (n < 0 && errno != EINTR) return;
        for (std::size_t i = 0; i < pfds.size() && n > 0; i++) {
            short ev = pfds[i].revents;
            if (!ev) continue;
            int key = keys[i];
            if (key == -1) {
                signalfd_siginfo si;
                while (::read(sfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
                }
            } else if (key == -2) {
                accept_client();
            } else if (key == -3) {
                if (ev & POLLOUT) {
                    ssize_t w = ::write(agent_.get(), agent_out_.data(), agent_out_.size());
                    if (w > 0)
                        agent_out_.erase(0, static_cast<std::size_t>(w));
                    else if (w < 0 && errno != EAGAIN && errno != EINTR)
                        agent_down("the guest agent's connection broke");
                }
                if (agent_ && (ev & (POLLIN | POLLHUP | POLLERR))) on_agent_readable();
            } else {
                auto it = clients_.find(key);
                if (it == clients_.end()) continue;
                if (ev & POLLOUT) {
                    auto& out = it->second.out;
                    ssize_t w = ::send(key, out.data(), out.size(), MSG_NOSIGNAL);
                    if (w > 0)
                        out.erase(0, static_cast<std::size_t>(w));
                    else if (w < 0 && errno != EAGAIN && errno != EINTR)
                        it->second.dead = true;
                }
                if (ev & (POLLIN | POLLHUP | POLLERR)) on_client_readable(key);
            }
        }
        // Write to the agent right away too (most frames are small).
        if (agent_ && !agent_out_.empty()) {
            ssize_t w = ::write(agent_.get(), agent_out_.data(), agent_out_.size());
            if (w > 0) agent_out_.erase(0, static_cast<std::size_t>(w));
        }
        for (auto& [fd, c] : clients_) {
            if (c.out.empty() || c.dead) continue;
            ssize_t w = ::send(fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
            if (w > 0) c.out.erase(0, static_cast<std::size_t>(w));
        }
    }
}

}  // namespace

Fd listen_unix(const fs::path& path) {
    UnixAddress a;
    if (!unix_address(path, a)) throw_errno("socket path " + path.string());
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) throw_errno("socket");
    std::error_code ec;
    fs::remove(path, ec);
    mode_t old = ::umask(0177);
    int rc = ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a.addr), a.len);
    ::umask(old);
    if (rc != 0) throw_errno("bind " + path.string());
    if (::listen(fd.get(), 64) != 0) throw_errno("listen " + path.string());
    return fd;
}

Fd connect_unix(const fs::path& path) {
    UnixAddress a;
    if (!unix_address(path, a)) return Fd();
    Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) return Fd();
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a.addr), a.len) != 0) return Fd();
    return fd;
}

void run_relay(Fd agent, Fd listener, const fs::path& activity_file, const fs::path& ready_file) {
    Relay r(std::move(agent), std::move(listener), activity_file, ready_file);
    r.run();
}

fs::path agent_ready_file(const fs::path& agent_socket) {
    return agent_socket.parent_path() / "agent.ready";
}

std::optional<bool> agent_ready_flag(const fs::path& agent_socket) {
    Fd f(::open(agent_ready_file(agent_socket).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!f) return std::nullopt;
    // Held exclusively by a live relay whose agent is ready; anything else
    // (connecting, down, the relay gone) leaves it free.
    int rc;
    while ((rc = ::flock(f.get(), LOCK_SH | LOCK_NB)) != 0 && errno == EINTR) {
    }
    if (rc == 0) return false;
    if (errno == EWOULDBLOCK) return true;
    return std::nullopt;
}

}  // namespace sandweave
