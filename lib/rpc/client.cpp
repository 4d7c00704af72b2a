#include "lib/rpc/client.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "lib/api/protocol.hpp"
#include "lib/core/build_info.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/core/progress.hpp"
#include "lib/rpc/jsonrpc.hpp"

namespace sandweave::rpc {

using nlohmann::json;

namespace {

// A server line may carry 64 KiB of data as base64 plus framing.
constexpr std::size_t max_server_line = 4u << 20;

// Threads of the client take no signals: a Ctrl-C is for the thread that
// waits on a run (which forwards it), or kills the process as usual.
void block_all_signals() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

ErrorCode code_of(int c) {
    switch (c) {
        case 1:
        case 2:
        case 3:
        case 4:
        case 5:
            return static_cast<ErrorCode>(c);
        case code::invalid_params:
        case code::method_not_found:
        case code::invalid_request:
        case code::handshake_required:
            return ErrorCode::usage;
        default:
            return ErrorCode::general;
    }
}

void deliver(const OutputSink& sink, std::string_view data) {
    if (sink.on_data)
        sink.on_data(data);
    else if (sink.fd >= 0)
        (void)write_all(sink.fd, data);
}

}  // namespace

struct RpcClient::Impl {
    struct Pending {
        bool done = false;
        json result;
        std::optional<json> error;
        const api::RunIo* run = nullptr;  // a sandbox.run: where its output goes
        const std::function<void(std::string_view)>* data =
            nullptr;                             // audit.fetch, desktop.screenshot
        int wake_fd = -1;                        // an eventfd written when it is done
        std::optional<std::string> local_error;  // our side of a stream failed
    };

    static void wake(const Pending& p) {
        if (p.wake_fd < 0) return;
        std::uint64_t one = 1;
        (void)!::write(p.wake_fd, &one, sizeof one);
    }

    Fd in, out;
    std::string peer;
    api::HelloResult hello;

    std::mutex out_mu;
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::int64_t, Pending> pending;
    std::atomic<std::int64_t> next_id{1};
    bool broken = false;
    std::string broken_reason;
    std::string last_refusal;  // the last error that answered no request
    std::thread reader;

    Error lost() const {
        return Error(ErrorCode::connection,
                     "connection to " + peer + " lost" +
                         (broken_reason.empty() ? "" : ": " + broken_reason));
    }

    void fail_all(const std::string& reason) {
        std::lock_guard<std::mutex> g(mu);
        if (!broken) broken_reason = reason;
        broken = true;
        for (const auto& [id, p] : pending) wake(p);
        cv.notify_all();
    }

    bool send_line(const json& j) {
        std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace);
        line += '\n';
        std::lock_guard<std::mutex> g(out_mu);
        return write_all(out.get(), line);
    }

    void handle(const std::string& line) {
        json j;
        try {
            j = parse_untrusted_json(line);
        } catch (const json::exception& e) {
            return fail_all(std::string("the server sent a line that is not JSON we accept: ") +
                            e.what());
        }
        if (!j.is_object()) return fail_all("the server sent something that is not an object");
        if (auto m = j.find("method"); m != j.end() && m->is_string()) {
            const json& params = j.value("params", json::object());
            if (!params.is_object()) return;
            return notification(m->get<std::string>(), params);
        }
        auto id = j.find("id");
        if (id == j.end() || !id->is_number_integer()) {
            // An error about a line we sent that it could not read at all, or
            // the server's (or a relay's) one line before it closes: kept as
            // the reason if the connection ends next.
            if (auto e = j.find("error"); e != j.end() && e->is_object()) {
                std::string msg = e->value("message", std::string("error"));
                log().debug(peer + ": " + msg);
                std::lock_guard<std::mutex> g(mu);
                last_refusal = msg;
            }
            return;
        }
        std::lock_guard<std::mutex> g(mu);
        auto it = pending.find(id->get<std::int64_t>());
        if (it == pending.end()) return;
        if (auto e = j.find("error"); e != j.end())
            it->second.error = e->is_object() ? *e : json{{"code", 1}, {"message", "bad error"}};
        else
            it->second.result = j.value("result", json());
        it->second.done = true;
        wake(it->second);
        cv.notify_all();
    }

    void notification(const std::string& method, const json& params) {
        if (method == "log") {
            std::string msg = params.value("message", std::string());
            std::string level = params.value("level", std::string("info"));
            if (level == "error")
                log().error(msg);
            else if (level == "warn")
                log().warn(msg);
            else if (level == "debug")
                log().debug(msg);
            else
                log().info(msg);
            return;
        }
        if (method == "progress") {
            // The worker's progress, shown here as if it were ours.
            ProgressSink* sink = progress_sink();
            if (!sink) return;
            ProgressUpdate u;
            try {
                u.task = params.value("task", std::string());
                u.step = params.value("step", std::string());
                u.done = params.value("done", std::uint64_t{0});
                u.total = params.value("total", std::uint64_t{0});
                u.unit = params.value("unit", std::string()) == "bytes" ? ProgressUnit::bytes
                                                                        : ProgressUnit::count;
                u.finished = params.value("finished", false);
            } catch (const std::exception&) {
                return;  // a malformed report is not worth failing a call for
            }
            sink->update(u);
            return;
        }
        bool data_method = method == "audit.data" || method == "desktop.data";
        if (method != "run.output" && !data_method) return;
        auto req = params.find("request");
        if (req == params.end() || !req->is_number_integer()) return;
        const api::RunIo* io = nullptr;
        const std::function<void(std::string_view)>* sink = nullptr;
        {
            std::lock_guard<std::mutex> g(mu);
            auto it = pending.find(req->get<std::int64_t>());
            if (it != pending.end()) {
                io = it->second.run;
                sink = it->second.data;
            }
        }
        auto data = base64_decode(params.value("data", std::string()));
        if (!data) return fail_all("the server sent data that is not base64");
        if (data_method) {
            if (!sink) return;
            try {
                (*sink)(*data);
            } catch (const std::exception& e) {
                // The local write failed: the call fails when its answer comes.
                std::lock_guard<std::mutex> g(mu);
                auto it = pending.find(req->get<std::int64_t>());
                if (it != pending.end() && !it->second.local_error)
                    it->second.local_error = e.what();
                it->second.data = nullptr;
            }
            return;
        }
        if (!io) return;
        // Delivered on this thread: a slow local reader slows the remote command.
        deliver(params.value("stream", std::string()) == "stderr" ? io->err : io->out, *data);
    }

    void read_loop() {
        block_all_signals();
        std::string buf;
        char chunk[65536];
        for (;;) {
            ssize_t n = ::read(in.get(), chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            buf.append(chunk, static_cast<std::size_t>(n));
            std::size_t start = 0, nl;
            while ((nl = buf.find('\n', start)) != std::string::npos) {
                handle(buf.substr(start, nl - start));
                start = nl + 1;
            }
            buf.erase(0, start);
            if (buf.size() > max_server_line)
                return fail_all("the server sent a line over " + std::to_string(max_server_line) +
                                " bytes");
        }
        fail_all([&] {
            std::lock_guard<std::mutex> g(mu);
            return last_refusal;
        }());
    }

    // Sends a request; `sinks` says where its streamed data goes (a run's
    // output, an audit.fetch's bytes) and what to wake when it is answered.
    std::int64_t start(const std::string& method, const json& params) {
        return start(method, params, Pending());
    }
    std::int64_t start(const std::string& method, const json& params, Pending sinks) {
        std::int64_t id = next_id++;
        {
            std::lock_guard<std::mutex> g(mu);
            if (broken) throw lost();
            pending[id] = std::move(sinks);
        }
        if (!send_line({{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", params}})) {
            fail_all("could not send a request");
            std::lock_guard<std::mutex> g(mu);
            pending.erase(id);
            throw lost();
        }
        return id;
    }

    // Waits for the answer to `id` and takes it out of the table.
    Pending wait(std::int64_t id) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return pending[id].done || broken; });
        Pending p = std::move(pending[id]);
        pending.erase(id);
        if (!p.done) throw lost();
        return p;
    }

    // Waits for the answer to `id`; throws its error.
    json finish(std::int64_t id) {
        Pending p = wait(id);
        if (p.error) {
            int c = p.error->value("code", 1);
            throw Error(code_of(c), p.error->value("message", std::string("error")));
        }
        if (p.local_error) throw Error(ErrorCode::general, *p.local_error);
        return p.result;
    }

    // Closing our end makes the server see EOF (and stop what still runs); the
    // reader then sees the server close its side.
    void close() {
        out.reset();
        if (in.valid()) ::shutdown(in.get(), SHUT_RDWR);
        if (reader.joinable()) reader.join();
    }

    bool done(std::int64_t id) {
        std::lock_guard<std::mutex> g(mu);
        auto it = pending.find(id);
        return broken || it == pending.end() || it->second.done;
    }
};

RpcClient::RpcClient(Fd in, Fd out, std::string peer, json hello_extra)
    : impl_(std::make_unique<Impl>()) {
    impl_->in = std::move(in);
    impl_->out = std::move(out);
    impl_->peer = std::move(peer);
    ::signal(SIGPIPE, SIG_IGN);
    impl_->reader = std::thread([this] { impl_->read_loop(); });
    try {
        handshake(hello_extra);
    } catch (...) {
        // The destructor does not run for a constructor that throws: stop
        // the reader here.
        impl_->close();
        throw;
    }
}

void RpcClient::handshake(const json& hello_extra) {
    json res;
    try {
        json params{{"protocol", protocol_version},
                    {"client", std::string("sandweave ") + build_version()},
                    {"capabilities", {"log", "progress"}}};
        params.update(hello_extra);
        res = impl_->finish(impl_->start("hello", params));
    } catch (const Error& e) {
        if (e.code() == ErrorCode::connection)
            throw Error(ErrorCode::connection,
                        impl_->peer + ": the worker closed the connection during the handshake" +
                            (impl_->broken_reason.empty() ? " (is sandweave installed there?)"
                                                          : ": " + impl_->broken_reason));
        throw Error(e.code(), impl_->peer + ": handshake refused: " + e.what());
    }
    try {
        impl_->hello = api::from_json<api::HelloResult>(res, "hello result", api::Unknown::ignore);
    } catch (const Error& e) {
        throw Error(ErrorCode::general, impl_->peer + ": unusable handshake: " + e.what());
    }
    if (impl_->hello.protocol < 1)
        throw Error(ErrorCode::runtime, impl_->peer + " speaks protocol " +
                                            std::to_string(impl_->hello.protocol) +
                                            "; this client needs 1");
}

RpcClient::~RpcClient() {
    impl_->close();
}

const api::HelloResult& RpcClient::server() const {
    return impl_->hello;
}

bool RpcClient::has_method(const std::string& name) const {
    const auto& m = impl_->hello.methods;
    return std::find(m.begin(), m.end(), name) != m.end();
}

Error RpcClient::lacks(const std::string& what) const {
    // "sandweave 0.1.0 (...)": only a server of another version is told to update.
    const std::string& server = impl_->hello.server;
    const std::string ours = std::string("sandweave ") + SANDWEAVE_VERSION;
    bool same =
        server.rfind(ours, 0) == 0 && (server.size() == ours.size() || server[ours.size()] == ' ');
    return Error(ErrorCode::runtime,
                 impl_->peer + " " + what + " (it is " + server + (same ? ")" : "; update it)"));
}

json RpcClient::call(const std::string& method, const json& params) {
    if (!has_method(method)) throw lacks("does not offer '" + method + "'");
    return impl_->finish(impl_->start(method, params));
}

namespace {

template <class R>
R decoded(const json& j, const std::string& method) {
    R out{};
    api::decode_value(j, out, method + " result", api::Unknown::ignore);
    return out;
}

// A protocol row's request (api/protocol.hpp) and its answer, typed.
template <class P, class R, class On>
R invoke(RpcClient& c, const api::Row<P, R, On>& row, const P& p) {
    return decoded<R>(c.call(row.name, api::to_json(p)), row.name);
}
template <class R>
R invoke(RpcClient& c, const api::Row0<R>& row) {
    return decoded<R>(c.call(row.name, json::object()), row.name);
}

}  // namespace

json RpcClient::streamed(const std::string& request_method, const json& request_params,
                         const api::RunIo& io, bool follow_window) {
    Fd finished(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));  // tells the stdin feeder to stop
    Fd answered(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));  // the reader saw the response
    if (!finished.valid() || !answered.valid()) throw_errno("eventfd");

    // Our termination signals go to the remote command while it runs.
    sigset_t forward, old;
    sigemptyset(&forward);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&forward, s);
    if (follow_window) sigaddset(&forward, SIGWINCH);
    Fd sfd;
    if (io.forward_own_signals) {
        ::pthread_sigmask(SIG_BLOCK, &forward, &old);
        sfd.reset(::signalfd(-1, &forward, SFD_CLOEXEC | SFD_NONBLOCK));
    }
    struct Restore {
        bool active;
        sigset_t* old;
        ~Restore() {
            if (active) ::pthread_sigmask(SIG_SETMASK, old, nullptr);
        }
    } restore{io.forward_own_signals, &old};

    Impl::Pending sinks;
    sinks.run = &io;
    sinks.wake_fd = answered.get();
    std::int64_t id = impl_->start(request_method, request_params, std::move(sinks));
    auto notify = [&](const char* method, json params) {
        params["request"] = id;
        impl_->send_line({{"jsonrpc", "2.0"}, {"method", method}, {"params", params}});
    };

    // stdin: one chunk in flight at a time, each acknowledged by the server.
    std::thread feeder;
    if (io.stdin_fd >= 0) {
        feeder = std::thread([&] {
            block_all_signals();
            char buf[rpc::max_chunk_bytes];
            for (;;) {
                pollfd fds[2] = {{io.stdin_fd, POLLIN, 0}, {finished.get(), POLLIN, 0}};
                if (::poll(fds, 2, -1) < 0) {
                    if (errno == EINTR) continue;
                    return;
                }
                if (fds[1].revents & POLLIN) return;
                ssize_t n = ::read(io.stdin_fd, buf, sizeof buf);
                if (n < 0 && errno == EINTR) continue;
                bool eof = n <= 0;
                json params{{"request", id},
                            {"data", eof ? std::string()
                                         : base64_encode(
                                               std::string_view(buf, static_cast<std::size_t>(n)))},
                            {"eof", eof}};
                try {
                    impl_->finish(impl_->start("run.stdin", params));
                } catch (const Error&) {
                    return;  // the command ended or stopped reading its stdin
                }
                if (eof) return;
            }
        });
    }

    while (!impl_->done(id)) {
        pollfd fds[3] = {{sfd.get(), POLLIN, 0},
                         {io.control ? io.control->fd() : -1, POLLIN, 0},
                         {answered.get(), POLLIN, 0}};
        if (::poll(fds, 3, -1) < 0 && errno != EINTR) throw_errno("poll");
        signalfd_siginfo si;
        while (sfd.valid() &&
               ::read(sfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
            if (si.ssi_signo != SIGWINCH) {
                notify("run.signal", {{"signal", static_cast<int>(si.ssi_signo)}});
                continue;
            }
            winsize ws{};
            if (::ioctl(io.stdin_fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
                notify("run.resize", {{"rows", ws.ws_row}, {"cols", ws.ws_col}});
        }
        if (io.control && (fds[1].revents & POLLIN)) {
            for (int sig : io.control->take_signals()) notify("run.signal", {{"signal", sig}});
            if (io.control->cancelled()) notify("run.cancel", json::object());
        }
    }
    std::uint64_t one = 1;
    (void)!::write(finished.get(), &one, sizeof one);
    Impl::Pending answer;
    try {
        answer = impl_->wait(id);
    } catch (...) {
        if (feeder.joinable()) feeder.join();
        throw;
    }
    if (feeder.joinable()) feeder.join();
    if (answer.error) return {{"error", *answer.error}};
    return {{"result", answer.result}};
}

api::RunResult RpcClient::run(const api::RunParams& p_in, const api::RunIo& io) {
    if (!has_method("sandbox.run"))
        throw Error(ErrorCode::runtime, impl_->peer + " does not offer 'sandbox.run'");
    api::RunParams p = p_in;
    p.stdin = io.stdin_fd >= 0;
    // A worker without "run.entrypoint" runs argv as it is: [] means just
    // that, and anything else it cannot do.
    const auto& caps = impl_->hello.capabilities;
    if (!p.attach && std::find(caps.begin(), caps.end(), "run.entrypoint") == caps.end()) {
        if (p.entrypoint && p.entrypoint->empty()) p.entrypoint.reset();
        if (p.entrypoint || p.argv.empty())
            throw lacks("cannot run a sandbox's entrypoint or cmd; give the whole command");
    }
    // A pty in the guest follows our terminal's size, when we have one.
    bool follow_window = p.tty && p.stdin && ::isatty(io.stdin_fd) && io.forward_own_signals &&
                         has_method("run.resize");
    if (follow_window) {
        winsize ws{};
        if (::ioctl(io.stdin_fd, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col)
            p.rows = ws.ws_row, p.cols = ws.ws_col;
    }
    json answer = streamed("sandbox.run", api::to_json(p), io, follow_window);
    std::optional<json> error;
    if (answer.contains("error")) error = answer["error"];
    const json result = answer.value("result", json());
    if (error) {
        int c = error->value("code", 1);
        if (c == code::request_cancelled) {
            api::RunResult r;
            r.exit_code = error->value("data", json::object()).value("exit_code", 137);
            return r;
        }
        throw Error(code_of(c), error->value("message", std::string("error")));
    }
    return decoded<api::RunResult>(result, "sandbox.run");
}

// ---- sandweave cp: streams like a run's (docs/protocol.md) ---------------------

namespace {

void copy_answer(const json& answer, const std::string& method) {
    if (!answer.contains("error")) return;
    const json& e = answer["error"];
    int c = e.value("code", 1);
    if (c == code::request_cancelled) throw Error(ErrorCode::general, method + ": cancelled");
    throw Error(code_of(c), e.value("message", std::string("error")));
}

}  // namespace

api::Empty RpcClient::copy_request(const std::string& method, const json& params,
                                   const api::CpIo& io) {
    if (!has_method(method)) throw lacks("cannot copy files");
    api::RunIo run;
    run.out = io.out;
    run.stdin_fd = io.in_fd;
    run.forward_own_signals = io.forward_own_signals;
    run.control = io.control;
    copy_answer(streamed(method, params, run), method);
    return {};
}

api::Empty RpcClient::cp_out(const api::CpOutParams& p, const api::CpIo& io) {
    return copy_request("sandbox.cp_out", api::to_json(p), io);
}

api::Empty RpcClient::cp_in(const api::CpInParams& p, const api::CpIo& io) {
    return copy_request("sandbox.cp_in", api::to_json(p), io);
}

api::VersionResult RpcClient::version() {
    return invoke(*this, api::protocol::version);
}
SandboxView RpcClient::create(const api::CreateParams& p) {
    return invoke(*this, api::protocol::sandbox_create, p);
}
api::SandboxList RpcClient::ls(const api::LsParams& p) {
    return invoke(*this, api::protocol::sandbox_ls, p);
}
api::ProcessList RpcClient::ps(const api::IdParams& p) {
    return invoke(*this, api::protocol::sandbox_ps, p);
}
api::KillResult RpcClient::kill(const api::KillParams& p) {
    return invoke(*this, api::protocol::sandbox_kill, p);
}
api::RunResult RpcClient::wait(const api::HandleParams& p) {
    return invoke(*this, api::protocol::sandbox_wait, p);
}

SandboxView RpcClient::inspect(const api::IdParams& p) {
    return invoke(*this, api::protocol::sandbox_inspect, p);
}
SandboxView RpcClient::terminate(const api::IdParams& p) {
    return invoke(*this, api::protocol::sandbox_terminate, p);
}
api::Removed RpcClient::rm(const api::IdParams& p) {
    return invoke(*this, api::protocol::sandbox_rm, p);
}
api::Finished RpcClient::finish(const api::FinishParams& p) {
    // The log is written on this host (audit_export below), so with a path
    // the calls go one by one; so they do to a worker without the method.
    if (p.audit_path || !has_method(api::protocol::sandbox_finish.name)) return Api::finish(p);
    return invoke(*this, api::protocol::sandbox_finish, p);
}
api::RemovedList RpcClient::prune() {
    return invoke(*this, api::protocol::sandbox_prune);
}
// PATH names a file on this host, wherever the worker is: whoever holds this
// Api (the CLI, or a `serve` child an SDK drives with --host) gets the log
// here, checked against the worker's sha256, never written on the worker.
audit::Status RpcClient::audit_export(const api::AuditExportParams& p) {
    return api::export_to_client(*this, p.id, p.path, impl_->peer);
}
audit::Status RpcClient::audit_fetch(const api::IdParams& p,
                                     const std::function<void(std::string_view)>& on_data) {
    if (!has_method("audit.fetch")) throw lacks("cannot send an audit log to the client");
    Impl::Pending sinks;
    sinks.data = &on_data;
    std::int64_t id = impl_->start("audit.fetch", api::to_json(p), std::move(sinks));
    return decoded<audit::Status>(impl_->finish(id), "audit.fetch");
}

audit::Status RpcClient::audit_status(const api::IdParams& p) {
    return invoke(*this, api::protocol::audit_status, p);
}
SnapshotRecord RpcClient::snapshot_create(const api::SnapshotCreateParams& p) {
    return invoke(*this, api::protocol::snapshot_create, p);
}
api::SnapshotList RpcClient::snapshot_ls() {
    return invoke(*this, api::protocol::snapshot_ls);
}
api::Removed RpcClient::snapshot_rm(const api::IdParams& p) {
    return invoke(*this, api::protocol::snapshot_rm, p);
}
PoolInfo RpcClient::pool_create(const api::PoolCreateParams& p) {
    return invoke(*this, api::protocol::pool_create, p);
}
SandboxView RpcClient::pool_acquire(const api::PoolAcquireParams& p) {
    return invoke(*this, api::protocol::pool_acquire, p);
}
api::PoolList RpcClient::pool_ls() {
    return invoke(*this, api::protocol::pool_ls);
}
PoolInfo RpcClient::pool_resize(const api::PoolResizeParams& p) {
    return invoke(*this, api::protocol::pool_resize, p);
}
api::Removed RpcClient::pool_rm(const api::NameParams& p) {
    return invoke(*this, api::protocol::pool_rm, p);
}
api::Reservation RpcClient::batch_reserve(const api::ReserveParams& p) {
    return invoke(*this, api::protocol::batch_reserve, p);
}
api::Removed RpcClient::batch_release(const api::IdParams& p) {
    return invoke(*this, api::protocol::batch_release, p);
}
api::TemplateList RpcClient::template_ls() {
    return invoke(*this, api::protocol::template_ls);
}
api::TemplateShowResult RpcClient::template_show(const api::TemplateShowParams& p) {
    return invoke(*this, api::protocol::template_show, p);
}
api::TemplateValidateResult RpcClient::template_validate(const api::TemplateValidateParams& p) {
    return invoke(*this, api::protocol::template_validate, p);
}
api::Image RpcClient::image_build(const api::ImageBuildParams& p) {
    return invoke(*this, api::protocol::image_build, p);
}
api::ImageList RpcClient::image_ls() {
    return invoke(*this, api::protocol::image_ls);
}
api::RecipeList RpcClient::image_recipes() {
    return invoke(*this, api::protocol::image_recipes);
}
api::Removed RpcClient::image_rm(const api::NameParams& p) {
    return invoke(*this, api::protocol::image_rm, p);
}
api::Image RpcClient::image_import(const api::ImageImportParams& p) {
    return invoke(*this, api::protocol::image_import, p);
}
api::Image RpcClient::image_inspect(const api::NameParams& p) {
    return invoke(*this, api::protocol::image_inspect, p);
}
api::DoctorResult RpcClient::doctor() {
    return invoke(*this, api::protocol::doctor);
}

api::ScreenshotResult RpcClient::desktop_screenshot(
    const api::IdParams& p, const std::function<void(std::string_view)>& on_data) {
    if (!has_method("desktop.screenshot")) throw lacks("has no desktops");
    Impl::Pending sinks;
    sinks.data = &on_data;
    std::int64_t id = impl_->start("desktop.screenshot", api::to_json(p), std::move(sinks));
    return decoded<api::ScreenshotResult>(impl_->finish(id), "desktop.screenshot");
}
api::Empty RpcClient::desktop_click(const api::PointerParams& p) {
    return invoke(*this, api::protocol::desktop_click, p);
}
api::Empty RpcClient::desktop_move(const api::PointerParams& p) {
    return invoke(*this, api::protocol::desktop_move, p);
}
api::Empty RpcClient::desktop_type(const api::TypeParams& p) {
    return invoke(*this, api::protocol::desktop_type, p);
}
api::Empty RpcClient::desktop_key(const api::KeyParams& p) {
    return invoke(*this, api::protocol::desktop_key, p);
}

}  // namespace sandweave::rpc
