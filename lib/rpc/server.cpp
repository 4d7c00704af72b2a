#include "lib/rpc/server.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "lib/api/methods.hpp"
#include "lib/core/after_answer.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/log.hpp"
#include "lib/core/progress.hpp"
#include "lib/rpc/jsonrpc.hpp"

namespace sandweave::rpc {

namespace {

using nlohmann::json;

constexpr std::size_t max_in_flight = 256;
constexpr std::size_t max_stdin_backlog = 16u << 20;

json error_data(int exit_status) {
    return json{{"exit_status", exit_status}};
}

// The answer to request `id` whose work `fn` does: its result, or the
// error it threw, with the exit status a CLI would have used.
template <class Fn>
std::string answer(const json& id, Fn fn) {
    try {
        return encode_result(id, fn());
    } catch (const Error& e) {
        int status = static_cast<int>(e.code());
        return encode_error(id, status, e.what(), error_data(status));
    } catch (const std::filesystem::filesystem_error& e) {
        return encode_error(id, 1, e.what(), error_data(1));
    } catch (const std::exception& e) {
        return encode_error(id, code::internal_error, std::string("internal error: ") + e.what(),
                            error_data(1));
    }
}

class Connection;

// A request's log lines, as `log` notifications to the client that made it.
class RequestLogger final : public Logger {
  public:
    RequestLogger(Connection& c, json id) : c_(c), id_(std::move(id)) {}
    void debug(const std::string& m) override { send("debug", m); }
    void info(const std::string& m) override { send("info", m); }
    void warn(const std::string& m) override { send("warn", m); }
    void error(const std::string& m) override { send("error", m); }

  private:
    void send(const char* level, const std::string& m);
    Connection& c_;
    json id_;
};

// A request's progress reports, as `progress` notifications to the client
// that made it, when it asked for them (capability "progress").
class RequestProgress final : public ProgressSink {
  public:
    RequestProgress(Connection& c, json id) : c_(c), id_(std::move(id)) {}
    void update(const ProgressUpdate& u) override;

  private:
    Connection& c_;
    json id_;
};

// The stdin of one running command: chunks from run.stdin requests, written
// to the command's pipe by a thread of its own, each acknowledged once it is
// in the pipe.
struct StdinFeed {
    struct Chunk {
        std::string data;
        bool eof = false;
        json reply_id;  // null for a notification
    };
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Chunk> queue;
    std::size_t backlog = 0;
    bool eof_queued = false;
    bool stop = false;
    Fd write_end;  // non-blocking
    Fd stop_efd{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};

    void request_stop() {  // with mu held
        stop = true;
        std::uint64_t one = 1;
        (void)!::write(stop_efd.get(), &one, sizeof one);
        cv.notify_all();
    }

    // Writes all of `data` unless stopped first; false when it could not.
    bool write(std::string_view data) {
        while (!data.empty()) {
            ssize_t w = ::write(write_end.get(), data.data(), data.size());
            if (w > 0) {
                data.remove_prefix(static_cast<std::size_t>(w));
                continue;
            }
            if (w < 0 && errno == EINTR) continue;
            if (w < 0 && errno != EAGAIN) return false;
            pollfd fds[2] = {{write_end.get(), POLLOUT, 0}, {stop_efd.get(), POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0 && errno != EINTR) return false;
            if (fds[1].revents & POLLIN) return false;
        }
        return true;
    }
};

struct Running {
    RunControl control;
    std::shared_ptr<StdinFeed> feed;  // when the client streams stdin
};

class Connection {
  public:
    Connection(api::Api& api, int in_fd, int out_fd, int stop_fd, const ServeOptions& opts)
        : api_(api),
          in_(in_fd),
          out_(out_fd),
          stop_(stop_fd),
          opts_(opts),
          gone_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
        if (!gone_.valid()) throw_errno("eventfd");
    }

    void serve();

    void send(const std::string& line) {
        std::lock_guard<std::mutex> g(out_mu_);
        if (out_dead_) return;
        std::string framed = line;
        framed += '\n';
        if (!write_all(out_, framed)) {
            out_dead_ = true;
            // Nobody reads any more: the reader loop stops what runs, as for
            // EOF on input.
            std::uint64_t one = 1;
            (void)!::write(gone_.get(), &one, sizeof one);
        }
    }
    void notify(const std::string& method, const json& params) {
        send(encode_notification(method, params));
    }
    bool wants_log() const { return client_log_; }
    bool wants_progress() const { return client_progress_; }

  private:
    void handle_line(std::string_view line);
    void dispatch(Request r);
    void hello(const Request& r);
    void start_run(Request r);
    void start_copy(Request r);
    // sandbox.run and sandbox.cp_*: output as run.output notifications, stdin
    // (when asked) from run.stdin requests, signals and cancel through
    // run.signal / run.cancel. `call` does the work; it may add to the data of
    // the "cancelled" error it gets when the client cancelled it.
    using StreamingCall =
        std::function<json(const json& id, const api::RunIo& io, json& cancelled)>;
    void start_streaming(Request r, bool with_stdin, StreamingCall call);
    // audit.fetch and desktop.screenshot: bytes as <noun>.data notifications, then the result.
    void start_fetch(Request r);
    void run_stdin(const Request& r);
    void run_signal(const Request& r);
    void run_resize(const Request& r);
    void run_cancel(const Request& r);
    void start_thread(std::function<void()> fn);
    void finish_request(const std::string& key);
    void cancel_all();
    std::shared_ptr<Running> find_run(const json& request_id);
    // find_run for a control request (run.stdin, run.signal, run.resize):
    // when nothing runs under that id, r gets the error and null is returned.
    std::shared_ptr<Running> running_or_refuse(const Request& r, const json& request_id);
    // Whether this server lists and serves `method` (ServeOptions).
    bool serves(const std::string& method) const {
        const auto& only = api::controller_only_methods();
        return std::find(opts_.without.begin(), opts_.without.end(), method) ==
                   opts_.without.end() &&
               (opts_.controller || std::find(only.begin(), only.end(), method) == only.end());
    }
    void stdin_writer(std::shared_ptr<StdinFeed> feed);

    static std::string key_of(const json& id) { return id.dump(); }

    api::Api& api_;
    int in_, out_;
    int stop_;  // readable: stop serving (a signal), -1 for none
    ServeOptions opts_;
    Fd gone_;  // written when the peer stopped reading

    std::mutex out_mu_;
    bool out_dead_ = false;

    std::mutex mu_;
    std::condition_variable idle_;
    std::size_t threads_ = 0;
    std::set<std::string> in_flight_;  // ids of requests not yet answered
    std::map<std::string, std::shared_ptr<Running>> runs_;
    bool hello_done_ = false;
    bool client_log_ = false;
    bool client_progress_ = false;
};

void RequestLogger::send(const char* level, const std::string& m) {
    if (!c_.wants_log()) return;
    c_.notify("log", {{"request", id_}, {"level", level}, {"message", m}});
}

void RequestProgress::update(const ProgressUpdate& u) {
    if (!c_.wants_progress()) return;
    c_.notify("progress", {{"request", id_},
                           {"task", u.task},
                           {"step", u.step},
                           {"done", u.done},
                           {"total", u.total},
                           {"unit", u.unit == ProgressUnit::bytes ? "bytes" : "count"},
                           {"finished", u.finished}});
}

void Connection::start_thread(std::function<void()> fn) {
    {
        std::lock_guard<std::mutex> g(mu_);
        ++threads_;
    }
    std::thread([this, fn = std::move(fn)] {
        try {
            fn();
        } catch (const std::exception& e) {
            // A bug, not a client error: say so on our stderr, keep serving.
            std::fprintf(stderr, "sandweave serve: internal error: %s\n", e.what());
        }
        std::lock_guard<std::mutex> g(mu_);
        --threads_;
        idle_.notify_all();
    }).detach();
}

void Connection::finish_request(const std::string& key) {
    std::lock_guard<std::mutex> g(mu_);
    in_flight_.erase(key);
    runs_.erase(key);
}

void Connection::cancel_all() {
    std::vector<std::shared_ptr<Running>> runs;
    {
        std::lock_guard<std::mutex> g(mu_);
        for (auto& [k, r] : runs_) runs.push_back(r);
    }
    for (auto& r : runs) {
        r->control.cancel();
        if (r->feed) {
            std::lock_guard<std::mutex> g(r->feed->mu);
            r->feed->request_stop();
        }
    }
}

void Connection::serve() {
    std::string pending;
    bool discarding = false;  // inside a line that was over the limit
    char buf[65536];
    for (;;) {
        pollfd fds[3] = {{in_, POLLIN, 0}, {gone_.get(), POLLIN, 0}, {stop_, POLLIN, 0}};
        if (::poll(fds, 3, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if ((fds[1].revents & POLLIN) || (stop_ >= 0 && (fds[2].revents & POLLIN))) break;
        ssize_t n = ::read(in_, buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) break;
        std::string_view chunk(buf, static_cast<std::size_t>(n));
        while (!chunk.empty()) {
            auto nl = chunk.find('\n');
            std::string_view part = chunk.substr(0, nl);
            if (discarding) {
                if (nl != std::string_view::npos) discarding = false;
            } else if (pending.size() + part.size() > max_line_bytes) {
                send(encode_error(nullptr, code::invalid_request,
                                  "line over the limit of " + std::to_string(max_line_bytes) +
                                      " bytes; discarded",
                                  error_data(2)));
                pending.clear();
                discarding = nl == std::string_view::npos;
            } else {
                pending.append(part);
                if (nl != std::string_view::npos) {
                    handle_line(pending);
                    pending.clear();
                }
            }
            if (nl == std::string_view::npos) break;
            chunk.remove_prefix(nl + 1);
        }
    }
    if (!pending.empty() && !discarding) handle_line(pending);
    // The peer is gone: what still runs is killed; then wait for every thread.
    cancel_all();
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return threads_ == 0; });
}

void Connection::handle_line(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) return;
    auto decoded = decode_request(line);
    if (auto* err = std::get_if<DecodeError>(&decoded)) {
        send(encode_error(err->id, err->code, err->message, error_data(2)));
        return;
    }
    dispatch(std::get<Request>(std::move(decoded)));
}

void Connection::dispatch(Request r) {
    const bool notification = r.is_notification();
    auto refuse = [&](int c, const std::string& msg, int status = 2) {
        if (!notification) send(encode_error(r.id, c, msg, error_data(status)));
    };
    if (r.method != "hello" && !hello_done_)
        return refuse(code::handshake_required,
                      "handshake required: the first request must be `hello`");
    const api::Method* m = api::find_method(r.method);
    if (m && !serves(r.method)) m = nullptr;
    if (!m)
        return refuse(code::method_not_found, "unknown method '" + r.method.substr(0, 64) + "'");
    try {
        m->check(r.params);
    } catch (const Error& e) {
        return refuse(code::invalid_params, e.what());
    }
    // Served here, on the reader thread, in the order received.
    try {
        if (r.method == "hello") return hello(r);
        if (r.method == "run.stdin") return run_stdin(r);
        if (r.method == "run.signal") return run_signal(r);
        if (r.method == "run.resize") return run_resize(r);
        if (r.method == "run.cancel") return run_cancel(r);
    } catch (const Error& e) {
        int status = static_cast<int>(e.code());
        return refuse(status, e.what(), status);
    }
    if (notification) return;  // nothing else is meaningful without an answer

    std::string key = key_of(r.id);
    {
        std::lock_guard<std::mutex> g(mu_);
        // Answered with id null: an answer with that id would look like the
        // first request's own.
        if (in_flight_.count(key))
            return (void)send(encode_error(nullptr, code::invalid_request,
                                           "id " + r.id.dump() + " is already in flight",
                                           error_data(2)));
        if (in_flight_.size() >= max_in_flight)
            return (void)send(
                encode_error(r.id, code::invalid_request,
                             "too many requests in flight (" + std::to_string(max_in_flight) + ")",
                             error_data(1)));
        in_flight_.insert(key);
    }
    if (r.method == "sandbox.run") return start_run(std::move(r));
    if (r.method == "sandbox.cp_in" || r.method == "sandbox.cp_out")
        return start_copy(std::move(r));
    if (r.method == "audit.fetch") return start_fetch(std::move(r));
    if (r.method == "desktop.screenshot") return start_fetch(std::move(r));

    start_thread([this, r = std::move(r), m, key] {
        AfterAnswer after;  // what the request left for later runs once it is answered
        RequestLogger logger(*this, r.id);
        ThreadLogger scope(logger);
        RequestProgress progress(*this, r.id);
        ThreadProgress progress_scope(progress);
        std::string line = answer(r.id, [&] { return m->call(api_, r.params); });
        finish_request(key);
        send(line);
    });
}

void Connection::hello(const Request& r) {
    auto p = api::from_json<api::HelloParams>(r.params);
    if (p.protocol < 1) {
        if (!r.is_notification())
            send(encode_error(r.id, code::invalid_params,
                              "protocol " + std::to_string(p.protocol) +
                                  ": this server speaks protocol " +
                                  std::to_string(protocol_version) + " and no older",
                              error_data(2)));
        return;
    }
    {
        std::lock_guard<std::mutex> g(mu_);
        hello_done_ = true;
        client_log_ =
            std::find(p.capabilities.begin(), p.capabilities.end(), "log") != p.capabilities.end();
        client_progress_ = std::find(p.capabilities.begin(), p.capabilities.end(), "progress") !=
                           p.capabilities.end();
    }
    api::HelloResult res;
    res.protocol = std::min(p.protocol, protocol_version);
    res.server = opts_.server_name;
    res.capabilities = {"log",        "progress",   "run.cancel", "run.entrypoint",
                        "run.resize", "run.signal", "run.stdin"};
    for (const auto& name : api::method_names())
        if (serves(name)) res.methods.push_back(name);
    res.create_options = create_option_keys();
    if (!r.is_notification()) send(encode_result(r.id, api::to_json(res)));
}

std::shared_ptr<Running> Connection::running_or_refuse(const Request& r, const json& request_id) {
    auto running = find_run(request_id);
    if (!running && !r.is_notification())
        send(encode_error(r.id, code::invalid_params,
                          "no running command has request id " + request_id.dump(), error_data(2)));
    return running;
}

std::shared_ptr<Running> Connection::find_run(const json& request_id) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = runs_.find(key_of(request_id));
    return it == runs_.end() ? nullptr : it->second;
}

void Connection::start_run(Request r) {
    auto p = api::from_json<api::RunParams>(r.params);
    bool with_stdin = p.stdin;
    start_streaming(
        std::move(r), with_stdin,
        [this, p = std::move(p)](const json& id, const api::RunIo& io, json& cancelled) {
            api::RunResult res = api_.run(p, io);
            notify("run.exit",
                   {{"request", id}, {"exit_code", res.exit_code}, {"timed_out", res.timed_out}});
            cancelled["exit_code"] = res.exit_code;
            return api::to_json(res);
        });
}

// sandweave cp: the copy stream as a run's stdin (cp_in) or output (cp_out).
void Connection::start_copy(Request r) {
    bool in = r.method == "sandbox.cp_in";
    json params = r.params;
    start_streaming(std::move(r), in, [this, in, params](const json&, const api::RunIo& io, json&) {
        api::CpIo cio;
        cio.in_fd = io.stdin_fd;
        cio.out = io.out;
        cio.control = io.control;
        if (in) return api::to_json(api_.cp_in(api::from_json<api::CpInParams>(params), cio));
        return api::to_json(api_.cp_out(api::from_json<api::CpOutParams>(params), cio));
    });
}

void Connection::start_streaming(Request r, bool with_stdin, StreamingCall call) {
    std::string key = key_of(r.id);
    auto running = std::make_shared<Running>();
    Fd stdin_read;
    if (with_stdin) {
        Pipe pipe = make_pipe();
        stdin_read = std::move(pipe.read);
        running->feed = std::make_shared<StdinFeed>();
        running->feed->write_end = std::move(pipe.write);
        ::fcntl(running->feed->write_end.get(), F_SETFL, O_NONBLOCK);
        if (!running->feed->stop_efd.valid()) throw_errno("eventfd");
    }
    {
        std::lock_guard<std::mutex> g(mu_);
        runs_[key] = running;
    }
    if (running->feed) start_thread([this, feed = running->feed] { stdin_writer(feed); });

    auto stdin_fd = std::make_shared<Fd>(std::move(stdin_read));
    start_thread([this, r = std::move(r), call = std::move(call), running, stdin_fd, key] {
        RequestLogger logger(*this, r.id);
        ThreadLogger scope(logger);
        auto stream = [this, id = r.id](const char* name) {
            return OutputSink{
                -1, [this, id, name](std::string_view chunk) {
                    notify("run.output",
                           {{"request", id}, {"stream", name}, {"data", base64_encode(chunk)}});
                }};
        };
        api::RunIo io;
        io.stdin_fd = stdin_fd->valid() ? stdin_fd->get() : -1;
        io.out = stream("stdout");
        io.err = stream("stderr");
        io.control = &running->control;
        bool returned = false;
        json cancelled{{"exit_status", 1}};
        std::string line = answer(r.id, [&] {
            json res = call(r.id, io, cancelled);
            returned = true;
            return res;
        });
        if (returned && running->control.cancelled())
            line = encode_error(r.id, code::request_cancelled, "cancelled", cancelled);
        stdin_fd->reset();
        if (running->feed) {
            std::lock_guard<std::mutex> g(running->feed->mu);
            running->feed->request_stop();
        }
        finish_request(key);
        send(line);
    });
}

void Connection::start_fetch(Request r) {
    std::string key = key_of(r.id);
    start_thread([this, r = std::move(r), key] {
        RequestLogger logger(*this, r.id);
        ThreadLogger scope(logger);
        RequestProgress progress(*this, r.id);
        ThreadProgress progress_scope(progress);
        std::string line = answer(r.id, [&] {
            auto p = api::from_json<api::IdParams>(r.params);
            if (r.method == "desktop.screenshot")
                return api::to_json(api_.desktop_screenshot(p, [&](std::string_view chunk) {
                    notify("desktop.data", {{"request", r.id}, {"data", base64_encode(chunk)}});
                }));
            auto st = api_.audit_fetch(p, [&](std::string_view chunk) {
                notify("audit.data", {{"request", r.id}, {"data", base64_encode(chunk)}});
            });
            return api::encode_value(st);
        });
        finish_request(key);
        send(line);
    });
}

void Connection::stdin_writer(std::shared_ptr<StdinFeed> feed) {
    for (;;) {
        StdinFeed::Chunk chunk;
        {
            std::unique_lock<std::mutex> lock(feed->mu);
            feed->cv.wait(lock, [&] { return feed->stop || !feed->queue.empty(); });
            if (feed->queue.empty()) break;  // stopped
            if (feed->stop) {
                // The command ended: what was not written is answered so.
                for (auto& c : feed->queue)
                    if (!c.reply_id.is_null())
                        send(encode_error(c.reply_id, 1,
                                          "the command ended before this stdin was written",
                                          error_data(1)));
                feed->queue.clear();
                break;
            }
            chunk = std::move(feed->queue.front());
            feed->queue.pop_front();
        }
        bool ok = chunk.data.empty() || feed->write(chunk.data);
        {
            std::lock_guard<std::mutex> g(feed->mu);
            feed->backlog -= chunk.data.size();
        }
        if (chunk.eof) feed->write_end.reset();
        if (!chunk.reply_id.is_null()) {
            if (ok)
                send(encode_result(chunk.reply_id, json::object()));
            else
                send(encode_error(chunk.reply_id, 1,
                                  "the command's stdin is closed (it exited or closed it)",
                                  error_data(1)));
        }
        if (!ok) {
            // Nothing more can be written; later chunks fail the same way.
            std::lock_guard<std::mutex> g(feed->mu);
            feed->write_end.reset();
        }
    }
    std::lock_guard<std::mutex> g(feed->mu);
    feed->write_end.reset();
}

void Connection::run_stdin(const Request& r) {
    auto p = api::from_json<api::StdinParams>(r.params);
    auto refuse = [&](int c, const std::string& msg) {
        if (!r.is_notification()) send(encode_error(r.id, c, msg, error_data(2)));
    };
    auto running = running_or_refuse(r, p.request);
    if (!running) return;
    if (!running->feed)
        return refuse(code::invalid_params,
                      "request " + p.request.dump() + " did not ask for stdin (\"stdin\": true)");
    auto data = base64_decode(p.data);
    if (!data) return refuse(code::invalid_params, "params.data: not base64");
    if (data->size() > max_chunk_bytes)
        return refuse(code::invalid_params, "params.data: over " + std::to_string(max_chunk_bytes) +
                                                " bytes in one chunk");
    auto& feed = *running->feed;
    std::lock_guard<std::mutex> g(feed.mu);
    if (feed.eof_queued || feed.stop)
        return refuse(code::invalid_params,
                      "the stdin of request " + p.request.dump() + " is closed");
    if (feed.backlog + data->size() > max_stdin_backlog) {
        if (!r.is_notification())
            send(encode_error(r.id, 1,
                              "stdin backlog over 16 MiB: wait for earlier run.stdin results",
                              error_data(1)));
        return;
    }
    feed.backlog += data->size();
    feed.eof_queued = p.eof;
    feed.queue.push_back(StdinFeed::Chunk{std::move(*data), p.eof, r.id});
    feed.cv.notify_all();
}

void Connection::run_signal(const Request& r) {
    auto p = api::from_json<api::SignalParams>(r.params);
    int sig = api::parse_signal(p.signal);
    auto running = running_or_refuse(r, p.request);
    if (!running) return;
    running->control.signal(sig);
    if (!r.is_notification()) send(encode_result(r.id, json::object()));
}

void Connection::run_resize(const Request& r) {
    auto p = api::from_json<api::ResizeParams>(r.params);
    auto rows = api::window_dimension(p.rows, "rows");
    auto cols = api::window_dimension(p.cols, "cols");
    auto running = running_or_refuse(r, p.request);
    if (!running) return;
    running->control.resize(rows, cols);
    if (!r.is_notification()) send(encode_result(r.id, json::object()));
}

void Connection::run_cancel(const Request& r) {
    auto p = api::from_json<api::RequestRef>(r.params);
    auto running = find_run(p.request);
    if (running) running->control.cancel();
    if (!r.is_notification()) send(encode_result(r.id, {{"cancelled", running != nullptr}}));
}

// Answers a peer we will not serve with one error line (id null), then
// closes gently: with the peer's unread bytes still queued, close() would
// reset the connection and the peer might never read why.
void refuse_peer(int fd, int c, const std::string& message) {
    std::string line = encode_error(nullptr, c, message, error_data(1));
    line += '\n';
    (void)write_all(fd, line);
    ::shutdown(fd, SHUT_WR);
    pollfd p{fd, POLLIN, 0};
    char sink[4096];
    for (int i = 0; i < 8 && ::poll(&p, 1, 50) > 0; ++i)
        if (::read(fd, sink, sizeof sink) <= 0) break;
}

// The descriptors `serve --socket` may spend on connections. A new connection
// is refused (error -32003) once fewer than a quarter of the open-file limit
// (at least 32) would be left, so that the connections already served can
// still open what their requests need (a command's pipes, a copy's files).
// When none is left at all, accept() fails and the peer stays in the backlog,
// where poll() would report it again at once: one spare descriptor, given up
// for a moment, lets us accept that peer and tell it why.
class FdBudget {
  public:
    FdBudget() : spare_(open_spare()) {
        rlimit rl{};
        if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
            limit_ = static_cast<std::uint64_t>(rl.rlim_cur);
        reserve_ = std::max<std::uint64_t>(32, limit_ / 4);
    }

    bool room_for_another(int newest_fd) const {
        return static_cast<std::uint64_t>(newest_fd) + reserve_ < limit_;
    }

    std::string busy_message() const {
        return "server busy: no room for another connection within its limit of " +
               std::to_string(limit_) + " open files; try again once one has closed";
    }

    // Accepts one waiting peer with the spare descriptor and refuses it;
    // false when there was no spare or no peer.
    bool refuse_with_spare(int listener) {
        if (!spare_.valid()) {
            spare_ = open_spare();
            return false;
        }
        spare_.reset();
        Fd conn(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC));
        bool refused = conn.valid();
        if (refused) refuse_peer(conn.get(), code::server_busy, busy_message());
        conn.reset();
        spare_ = open_spare();
        return refused;
    }

  private:
    static Fd open_spare() { return Fd(::open("/dev/null", O_RDONLY | O_CLOEXEC)); }

    Fd spare_;
    std::uint64_t limit_ = 1u << 20;
    std::uint64_t reserve_ = 32;
};

// A socket directory we may use: ours, and nobody else may write into it
// (nor list it; `searchable`: others may reach the socket inside).
void prepare_socket_dir(const std::filesystem::path& dir, bool searchable) {
    const mode_t allowed = searchable ? 011 : 0;
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
        if (errno != ENOENT) throw_errno("stat " + dir.string());
        if (::mkdir(dir.c_str(), 0700 | allowed) != 0 && errno != EEXIST)
            throw_errno("mkdir " + dir.string());
        if (::stat(dir.c_str(), &st) != 0) throw_errno("stat " + dir.string());
    }
    if (!S_ISDIR(st.st_mode)) throw Error(ErrorCode::usage, dir.string() + ": not a directory");
    if (st.st_uid != ::geteuid())
        throw Error(ErrorCode::usage, "socket directory " + dir.string() + " belongs to uid " +
                                          std::to_string(st.st_uid) + ", not to us");
    if (st.st_mode & 077 & ~allowed)
        throw Error(
            ErrorCode::usage,
            "socket directory " + dir.string() + " has mode " +
                [&] {
                    char b[8];
                    std::snprintf(b, sizeof b, "%04o", st.st_mode & 07777);
                    return std::string(b);
                }() +
                (searchable ? "; it must be 0700 or 0711 (others may only search it)"
                            : "; it must be 0700 (no access for others)"));
}

// The listening socket at `path`: its directory checked, a socket file a
// dead server left replaced (a live one is not), 0600 (0666 when
// `admit_other` judges each peer by its credentials).
Fd listen_on(const std::filesystem::path& path, bool admit_other) {
    std::filesystem::path dir = path.parent_path().empty() ? "." : path.parent_path();
    prepare_socket_dir(dir, admit_other);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.string().size() >= sizeof addr.sun_path)
        throw Error(ErrorCode::usage, "socket path " + path.string() + " is too long (over " +
                                          std::to_string(sizeof addr.sun_path - 1) + " bytes)");
    std::strcpy(addr.sun_path, path.c_str());
    Fd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!listener.valid()) throw_errno("socket");
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            throw Error(ErrorCode::usage, path.string() + " exists and is not a socket");
        Fd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
        if (::connect(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0)
            throw Error(ErrorCode::usage, "another server is listening on " + path.string());
        ::unlink(path.c_str());
    }
    mode_t old_umask = ::umask(0177);
    int rc = ::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    int err = errno;
    ::umask(old_umask);
    if (rc != 0) throw_errno("bind " + path.string(), err);
    if (::chmod(path.c_str(), admit_other ? 0666 : 0600) != 0)
        throw_errno("chmod " + path.string());
    if (::listen(listener.get(), 64) != 0) throw_errno("listen " + path.string());
    return listener;
}

// Whether the peer of `conn` may be served, and with which API: ours (a
// null pointer), or admit_other's view of it; false after refusing it.
bool admit_peer(int conn, const ServeOptions& opts, std::shared_ptr<api::Api>& scoped) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        refuse_peer(conn, code::peer_not_allowed, errno_message("SO_PEERCRED"));
        return false;
    }
    if (cred.uid == 0 || cred.uid == ::geteuid()) return true;
    std::string why = "uid " + std::to_string(cred.uid) +
                      " may not use this server (only root and uid " + std::to_string(::geteuid()) +
                      ")";
    try {
        if (opts.admit_other) scoped = opts.admit_other(cred.pid, cred.uid);
    } catch (const std::exception& e) {
        why = e.what();
    }
    if (scoped) return true;
    log().warn("sandweave serve: refused a peer: " + why);
    refuse_peer(conn, code::peer_not_allowed, why);
    return false;
}

// The connections being served, each on a thread of its own.
class LiveConnections {
  public:
    // Serves `conn` with `api` from here on, or refuses it (server busy).
    void start(Fd conn, api::Api& api, std::shared_ptr<api::Api> scoped, const ServeOptions& opts) {
        std::unique_ptr<Connection> c;
        try {
            c = std::make_unique<Connection>(scoped ? *scoped : api, conn.get(), conn.get(), -1,
                                             opts);
        } catch (const Error& e) {
            refuse_peer(conn.get(), code::server_busy, std::string("server busy: ") + e.what());
            return;
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            live_.insert(conn.get());
        }
        // The thread owns both from here (it may finish before we return).
        int fd = conn.release();
        Connection* served = c.release();
        try {
            std::thread([this, fd, served, scoped] {
                std::unique_ptr<Connection>(served)->serve();
                ::close(fd);
                std::lock_guard<std::mutex> g(mu_);
                live_.erase(fd);
                cv_.notify_all();
            }).detach();
        } catch (const std::system_error& e) {
            delete served;
            Fd again(fd);
            {
                std::lock_guard<std::mutex> g(mu_);
                live_.erase(fd);
            }
            refuse_peer(fd, code::server_busy,
                        std::string("server busy: cannot start a thread: ") + e.what());
        }
    }

    // Waits a little for one to end (out of descriptors: rather than spin).
    void wait_for_one_to_end() {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(200));
    }

    // Ends every connection as if its peer had gone (their commands are
    // killed) and returns once each has finished.
    void end_all() {
        std::unique_lock<std::mutex> lock(mu_);
        for (int fd : live_) ::shutdown(fd, SHUT_RDWR);
        cv_.wait(lock, [&] { return live_.empty(); });
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::set<int> live_;
};

}  // namespace

void serve_connection(api::Api& api, int in_fd, int out_fd, int stop_fd, const ServeOptions& opts) {
    // A peer that goes away makes writes fail with EPIPE instead of killing us.
    ::signal(SIGPIPE, SIG_IGN);
    Connection c(api, in_fd, out_fd, stop_fd, opts);
    c.serve();
}

void serve_socket(api::Api& api, const std::filesystem::path& path, int stop_fd,
                  const ServeOptions& opts) {
    ::signal(SIGPIPE, SIG_IGN);
    Fd listener = listen_on(path, static_cast<bool>(opts.admit_other));
    log().info("sandweave serve: listening on " + path.string());
    LiveConnections connections;
    FdBudget budget;
    for (;;) {
        pollfd fds[2] = {{listener.get(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
        if (::poll(fds, stop_fd >= 0 ? 2 : 1, -1) < 0) {
            if (errno == EINTR) continue;
            throw_errno("poll");
        }
        if (stop_fd >= 0 && (fds[1].revents & POLLIN)) break;
        if (!(fds[0].revents & POLLIN)) continue;
        Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
        if (!conn.valid()) {
            int accept_err = errno;
            if (accept_err == EMFILE || accept_err == ENFILE || accept_err == ENOBUFS ||
                accept_err == ENOMEM) {
                // The peer waits in the backlog, and poll would report it again
                // at once: refuse it with the spare descriptor, or wait for a
                // connection to end rather than spin.
                if (!budget.refuse_with_spare(listener.get())) connections.wait_for_one_to_end();
            }
            continue;
        }
        std::shared_ptr<api::Api> scoped;
        if (!admit_peer(conn.get(), opts, scoped)) continue;
        // The kernel hands out the lowest free descriptor: a high one means
        // that many are open, and what is left belongs to the connections
        // already served (their commands' pipes, their copies).
        if (!budget.room_for_another(conn.get())) {
            refuse_peer(conn.get(), code::server_busy, budget.busy_message());
            continue;
        }
        connections.start(std::move(conn), api, std::move(scoped), opts);
    }
    ::unlink(path.c_str());
    connections.end_all();
}

}  // namespace sandweave::rpc
