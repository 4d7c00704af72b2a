// envd's process.Process: commands this server starts and holds, so that a
// command outlives the HTTP stream of the client that started it, and
// Connect, SendInput, SendSignal, CloseStdin and Update find it by pid.
#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "lib/core/error.hpp"
#include "lib/core/log.hpp"
#include "lib/e2b/internal.hpp"
#include "lib/e2b/wire.hpp"
#include "lib/rpc/jsonrpc.hpp"

namespace sandweave::e2b {

using nlohmann::json;

namespace {

// Output a slow stream may hold before the command waits for it.
constexpr std::size_t max_queued = 4u << 20;
constexpr std::size_t max_args = 4096;

// The SDK runs `/bin/bash -l -c CMD`; an image without bash (busybox) runs
// it with /bin/sh, which takes the same -l -c. The shim is fixed text: the
// command stays an argument. It costs the guest one more exec, so it is
// used only where a direct try cannot be repeated (see login_shell_argv).
const char* bash_shim = "if [ -x /bin/bash ]; then exec /bin/bash \"$@\"; fi; exec /bin/sh \"$@\"";

// argv of the command: cmd then args.
std::vector<std::string> argv_of(const json& config) {
    if (!config.is_object() || !config.contains("cmd") || !config["cmd"].is_string() ||
        config["cmd"].get<std::string>().empty())
        fail(400, "process.cmd: expected a command", "invalid_argument");
    std::vector<std::string> argv = {config["cmd"].get<std::string>()};
    if (config.contains("args")) {
        if (!config["args"].is_array() || config["args"].size() > max_args)
            fail(400, "process.args: expected a list of strings", "invalid_argument");
        for (const auto& a : config["args"]) {
            if (!a.is_string()) fail(400, "process.args: expected strings", "invalid_argument");
            argv.push_back(a.get<std::string>());
        }
    }
    return argv;
}

bool is_login_shell(const std::vector<std::string>& argv) {
    return argv[0] == "/bin/bash";
}

// A NOT_STARTED exit: the program is not in the sandbox, nothing ran.
bool not_found(const api::RunResult& r) {
    return r.exit_code == 127 && r.message &&
           r.message->rfind("command not found in sandbox", 0) == 0;
}

std::uint32_t pid_of(const json& selector) {
    if (!selector.is_object() || !selector.contains("pid") || !selector["pid"].is_number_unsigned())
        fail(400, "process.pid: expected a pid (tags are not supported)", "invalid_argument");
    auto pid = selector["pid"].get<std::uint64_t>();
    if (pid > UINT32_MAX) fail(400, "process.pid: out of range", "invalid_argument");
    return static_cast<std::uint32_t>(pid);
}

int signal_of(const json& s) {
    if (s.is_number_integer()) return s.get<int>();
    if (s.is_string()) {
        std::string n = s.get<std::string>();
        if (n == "SIGNAL_SIGKILL") return SIGKILL;
        if (n == "SIGNAL_SIGTERM") return SIGTERM;
    }
    fail(400, "signal: expected SIGNAL_SIGKILL or SIGNAL_SIGTERM", "invalid_argument");
}

// A command's working directory, tried as its user before Start answers:
// envd refuses a cwd it cannot use as the call's error (invalid_argument),
// where the runtime would only give an exit status after the start event.
// A relative cwd is the user's home's, as envd has it; the script prints the
// path it tries first. The path is an argument, never part of the script.
const char* cwd_check =
    "p=\"$1\"; case \"$p\" in /*) ;; *) p=\"${HOME:-/}/$p\" ;; esac; printf %s \"$p\"; "
    "[ -e \"$p\" ] || exit 3; [ -d \"$p\" ] || exit 4; cd -- \"$p\" 2>/dev/null || exit 5";

json event(json e) {
    return json{{"event", std::move(e)}};
}

void publish(Process& p, json ev) {
    std::size_t n = ev.dump().size();
    std::unique_lock<std::mutex> lock(p.mu);
    p.cv.wait(lock, [&] {
        for (const auto& s : p.subscribers)
            if (!s->closed && s->bytes > max_queued) return false;
        return true;
    });
    for (auto& s : p.subscribers) {
        if (s->closed) continue;
        s->events.push_back(ev);
        s->bytes += n;
    }
    p.cv.notify_all();
}

// A new stream of `p`'s events from now on, `first` at its head. Registered
// before the command starts (Start), so no output is missed.
std::shared_ptr<Process::Subscriber> subscribe(Process& p, json first) {
    auto sub = std::make_shared<Process::Subscriber>();
    sub->events.push_back(std::move(first));
    std::lock_guard<std::mutex> lock(p.mu);
    if (p.ended)
        sub->events.push_back(p.end_event);
    else
        p.subscribers.push_back(sub);
    return sub;
}

// The command's end: the last event of every stream, under the same lock
// that a later subscribe() reads `ended` with.
void publish_end(Process& p, json ev) {
    std::lock_guard<std::mutex> lock(p.mu);
    p.ended = true;
    p.end_event = ev;
    p.stdin_write.reset();
    for (auto& s : p.subscribers)
        if (!s->closed) s->events.push_back(ev);
    p.cv.notify_all();
}

// Streams a subscriber's events as the response, ending with the command's
// end event and Connect's end-of-stream frame.
void stream_events(httplib::Response& res, std::shared_ptr<Process> p,
                   std::shared_ptr<Process::Subscriber> sub) {
    res.status = 200;
    res.set_chunked_content_provider(
        "application/connect+json",
        [p, sub](std::size_t, httplib::DataSink& sink) {
            std::deque<json> batch;
            bool end = false;
            {
                std::unique_lock<std::mutex> lock(p->mu);
                p->cv.wait_for(lock, std::chrono::seconds(20),
                               [&] { return !sub->events.empty(); });
                batch.swap(sub->events);
                sub->bytes = 0;
                p->cv.notify_all();
            }
            if (batch.empty()) batch.push_back(event({{"keepalive", json::object()}}));
            // One write (one chunk, one segment) for the batch and, at the
            // end, the end-of-stream frame.
            std::string out;
            for (const auto& e : batch) {
                out += envelope(e);
                if (e.contains("event") && e["event"].contains("end")) end = true;
            }
            if (end) out += end_stream();
            if (!sink.write(out.data(), out.size())) return false;
            if (end) sink.done();
            return true;
        },
        [p, sub](bool) {
            std::lock_guard<std::mutex> lock(p->mu);
            sub->closed = true;
            auto& v = p->subscribers;
            v.erase(std::remove(v.begin(), v.end(), sub), v.end());
            p->cv.notify_all();
        });
}

}  // namespace

std::shared_ptr<Process> Server::find_process(const std::string& sandbox, const json& selector) {
    std::uint32_t pid = pid_of(selector);
    std::lock_guard<std::mutex> lock(proc_mu_);
    auto it = procs_.find(pid);
    if (it == procs_.end() || it->second->sandbox != sandbox)
        fail(404, "process with pid " + std::to_string(pid) + " not found", "not_found");
    return it->second;
}

void Server::forget_processes(const std::string& sandbox) {
    forget_seen(sandbox);
    std::vector<std::shared_ptr<Process>> gone;
    {
        std::lock_guard<std::mutex> lock(proc_mu_);
        for (auto it = procs_.begin(); it != procs_.end();) {
            if (it->second->sandbox == sandbox) {
                gone.push_back(it->second);
                it = procs_.erase(it);
            } else {
                ++it;
            }
        }
    }
    for (auto& p : gone) p->control.cancel();
}

void Server::start_process(const SandboxView& sb, const httplib::Request& req,
                           httplib::Response& res, const json& in) {
    const std::string id = sb.record.id;
    json config = in.value("process", json::object());
    auto argv = argv_of(config);
    api::RunParams rp;
    rp.id = id;
    rp.argv = argv;
    rp.entrypoint = std::vector<std::string>{};
    auto who = envd_user(req);
    if (who) rp.user = uid_of_user(*who);
    if (config.contains("cwd") && config["cwd"].is_string() &&
        !config["cwd"].get<std::string>().empty())
        rp.cwd = config["cwd"].get<std::string>();
    rp.env = sandbox_env(sb);
    if (config.contains("envs")) {
        if (!config["envs"].is_object())
            fail(400, "process.envs: expected an object", "invalid_argument");
        for (const auto& [k, v] : config["envs"].items()) {
            if (!v.is_string() || k.empty() || k.find('=') != std::string::npos)
                fail(400, "process.envs: '" + k + "' is not NAME=string", "invalid_argument");
            rp.env.push_back(k + "=" + v.get<std::string>());
        }
    }
    bool with_stdin = in.value("stdin", false);
    auto p = std::make_shared<Process>();
    if (in.contains("pty") && in["pty"].is_object()) {
        rp.tty = true;
        p->pty = true;
        with_stdin = true;
        auto size = in["pty"].value("size", json::object());
        rp.rows = size.value("rows", 24);
        rp.cols = size.value("cols", 80);
    }
    // Connect's deadline (the SDK's timeoutMs) ends the command, as envd does.
    if (auto ms = connect_timeout_ms(req)) rp.timeout_ms = *ms;
    if (rp.cwd) {
        GuestResult r = guest(api, id, {"/bin/sh", "-c", cwd_check, "sh", *rp.cwd}, rp.user, 8192);
        // The guest's answer is untrusted: taken only as an absolute path.
        bool resolved = !r.out.empty() && r.out[0] == '/' && r.out.size() <= 4096 &&
                        r.out.find_first_of(std::string("\0\n", 2)) == std::string::npos;
        const std::string dir = resolved ? r.out : *rp.cwd;
        if (r.exit_code == 3) fail(400, "cwd '" + dir + "' does not exist", "invalid_argument");
        if (r.exit_code == 4) fail(400, "cwd '" + dir + "' is not a directory", "invalid_argument");
        if (r.exit_code == 5)
            fail(400,
                 "cwd '" + dir + "' cannot be entered by " +
                     (who ? "user '" + *who + "'" : std::string("the sandbox's default user")),
                 "invalid_argument");
        rp.cwd = dir;
    }
    rp.stdin = with_stdin;
    // /bin/bash is tried as it is, and /bin/sh after it when the image has
    // no bash (remembered per sandbox). A command with stdin takes the shim
    // instead: a failed try could have read input meant for the retry.
    bool retry_with_sh = false;
    if (is_login_shell(argv)) {
        if (lacks_bash(id))
            rp.argv[0] = "/bin/sh";
        else if (with_stdin) {
            rp.argv.front() = "sh";  // the shim's $0; the rest is its "$@"
            rp.argv.insert(rp.argv.begin(), {"/bin/sh", "-c", bash_shim});
        } else {
            retry_with_sh = true;
        }
    }
    Fd stdin_read;
    if (with_stdin) {
        Pipe pipe = make_pipe();
        stdin_read = std::move(pipe.read);
        p->stdin_write = std::move(pipe.write);
    }
    p->sandbox = id;
    p->config = config;
    if (in.contains("tag") && in["tag"].is_string()) p->tag = in["tag"].get<std::string>();
    {
        std::lock_guard<std::mutex> lock(proc_mu_);
        if (procs_.size() >= 4096) fail(429, "too many processes", "resource_exhausted");
        p->pid = next_pid_++;
        procs_[p->pid] = p;
    }
    auto out_name = p->pty ? "pty" : "stdout";
    auto sub = subscribe(*p, event({{"start", {{"pid", p->pid}}}}));
    auto shared_in = std::make_shared<Fd>(std::move(stdin_read));
    {
        std::lock_guard<std::mutex> lock(runners_mu);
        ++runners;
    }
    std::thread([this, p, rp, shared_in, out_name, retry_with_sh] {
        api::RunIo io;
        io.stdin_fd = shared_in->valid() ? shared_in->get() : -1;
        io.out = OutputSink{-1, [p, out_name](std::string_view d) {
                                publish(*p, event({{"data", {{out_name, rpc::base64_encode(d)}}}}));
                            }};
        io.err = OutputSink{-1, [p](std::string_view d) {
                                publish(*p, event({{"data", {{"stderr", rpc::base64_encode(d)}}}}));
                            }};
        io.forward_own_signals = false;
        io.control = &p->control;
        json end;
        try {
            api::RunResult r = api.run(rp, io);
            if (retry_with_sh && not_found(r)) {
                note_no_bash(rp.id);
                api::RunParams sh = rp;
                sh.argv[0] = "/bin/sh";
                r = api.run(sh, io);
            }
            end = {{"exitCode", r.exit_code},
                   {"exited", !r.timed_out},
                   {"status",
                    r.timed_out ? "signal: killed" : "exit status " + std::to_string(r.exit_code)}};
            // As envd's end event has it: a non-zero exit's error is its
            // status (the SDK's CommandExitError message).
            if (r.timed_out)
                end["error"] = "the command's deadline passed (timeoutMs)";
            else if (r.exit_code != 0)
                end["error"] = end["status"];
        } catch (const Error& e) {
            end = {{"exitCode", -1}, {"exited", false}, {"status", "error"}, {"error", e.what()}};
        }
        shared_in->reset();
        publish_end(*p, event({{"end", end}}));
        {
            std::lock_guard<std::mutex> lock(proc_mu_);
            procs_.erase(p->pid);
        }
        std::lock_guard<std::mutex> lock(runners_mu);
        --runners;
        runners_cv.notify_all();
    }).detach();
    stream_events(res, p, sub);
}

void Server::process_rpc(const std::string& method, const httplib::Request& req,
                         httplib::Response& res, const std::string& body) {
    if (method == "Start" || method == "Connect") {
        // A body that is not one Connect message is refused as a bad
        // request; from here on an error is the stream's end-of-stream frame.
        json in = request_message(req, body, opts.max_body);
        guarded(res, Plane::stream, [&] {
            SandboxView sb = envd_sandbox(req);
            if (method == "Start") return start_process(sb, req, res, in);
            auto p = find_process(sb.record.id, in.value("process", json::object()));
            stream_events(res, p, subscribe(*p, event({{"start", {{"pid", p->pid}}}})));
        });
        return;
    }
    SandboxView sb = envd_sandbox(req);
    const std::string id = sb.record.id;
    json in = request_message(req, body, opts.max_body);
    auto unary = [&](const json& out) {
        res.status = 200;
        res.set_content(out.dump(), "application/json");
    };

    if (method == "List") {
        json list = json::array();
        std::lock_guard<std::mutex> lock(proc_mu_);
        for (const auto& [pid, p] : procs_) {
            if (p->sandbox != id) continue;
            json info = {{"pid", pid}, {"config", p->config}};
            if (p->tag) info["tag"] = *p->tag;
            list.push_back(info);
        }
        return unary({{"processes", list}});
    }
    if (method == "SendInput") {
        auto p = find_process(id, in.value("process", json::object()));
        json input = in.value("input", json::object());
        std::string b64 =
            input.contains("stdin") ? input.value("stdin", "") : input.value("pty", "");
        auto data = rpc::base64_decode(b64);
        if (!data) fail(400, "input: not base64", "invalid_argument");
        int fd;
        {
            std::lock_guard<std::mutex> lock(p->mu);
            if (!p->stdin_write.valid())
                fail(400, "the process's stdin is closed (or it was started without stdin: true)",
                     "failed_precondition");
            fd = ::dup(p->stdin_write.get());
        }
        Fd dup(fd);
        std::string_view rest = *data;
        while (!rest.empty()) {
            ssize_t n = ::write(dup.get(), rest.data(), rest.size());
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) fail(400, "the process's stdin is closed", "failed_precondition");
            rest.remove_prefix(static_cast<std::size_t>(n));
        }
        return unary(json::object());
    }
    if (method == "CloseStdin") {
        auto p = find_process(id, in.value("process", json::object()));
        std::lock_guard<std::mutex> lock(p->mu);
        p->stdin_write.reset();
        return unary(json::object());
    }
    if (method == "SendSignal") {
        auto p = find_process(id, in.value("process", json::object()));
        int sig = signal_of(in.value("signal", json(15)));
        p->control.signal(sig);
        if (sig == SIGKILL) p->control.cancel();  // also what the command left running
        return unary(json::object());
    }
    if (method == "Update") {
        auto p = find_process(id, in.value("process", json::object()));
        if (in.contains("pty") && in["pty"].is_object()) {
            if (!p->pty) fail(400, "the process has no pty", "failed_precondition");
            auto size = in["pty"].value("size", json::object());
            int rows = size.value("rows", 0), cols = size.value("cols", 0);
            if (rows < 1 || cols < 1 || rows > 65535 || cols > 65535)
                fail(400, "pty.size: rows and cols from 1 to 65535", "invalid_argument");
            p->control.resize(static_cast<std::uint16_t>(rows), static_cast<std::uint16_t>(cols));
        }
        return unary(json::object());
    }
    fail(404, "process." + method + " is not implemented", "unimplemented");
}

}  // namespace sandweave::e2b
