#include "lib/runtime/runsc.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/runtime/bundle.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

bool executable(const fs::path& p) {
    return ::access(p.c_str(), X_OK) == 0 && fs::is_regular_file(p);
}

std::optional<fs::path> on_path(const std::string& name) {
    const char* path = std::getenv("PATH");
    std::string s = path ? path : "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    std::size_t start = 0;
    while (start <= s.size()) {
        auto end = s.find(':', start);
        if (end == std::string::npos) end = s.size();
        fs::path cand = fs::path(s.substr(start, end - start)) / name;
        std::error_code ec;
        if (end > start && executable(cand)) return cand;
        start = end + 1;
    }
    return std::nullopt;
}

// The capabilities a guest process gets: Docker's default set for root (plus
// SYS_PTRACE, so guest root can inspect every process, as documented); none for
// any other uid, like a non-root process on Linux.

std::string read_fd_all(int fd) {
    std::string out;
    ::lseek(fd, 0, SEEK_SET);
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0 && out.size() < (1u << 20))
        out.append(buf, static_cast<std::size_t>(n));
    return out;
}

// runsc writes {"msg": ..., "level": "error"} objects to --log-fd; take the last.
std::optional<std::string> last_error_message(const std::string& log) {
    std::optional<std::string> msg;
    std::istringstream in(log);
    while (in >> std::ws && in.peek() != std::char_traits<char>::eof()) {
        json j;
        try {
            in >> j;
        } catch (const json::exception&) {
            break;  // not JSON: keep what was understood so far
        }
        if (j.is_object() && j.contains("msg") && j["msg"].is_string())
            msg = j["msg"].get<std::string>();
    }
    return msg;
}

}  // namespace

fs::path find_runsc(const std::optional<std::string>& flag) {
    auto check = [](const fs::path& p, const std::string& how) {
        if (!executable(p))
            throw Error(ErrorCode::runtime,
                        "runsc " + p.string() + " (from " + how + "): not an executable file");
        return p;
    };
    if (flag && !flag->empty()) return check(*flag, "--runsc");
    if (const char* env = std::getenv("SANDWEAVE_RUNSC"); env && *env)
        return check(env, "SANDWEAVE_RUNSC");
    if (executable(patched_runsc_path)) return patched_runsc_path;
    if (auto p = on_path("runsc")) return *p;
    throw Error(ErrorCode::runtime,
                "runsc not found: build sandweave's runtime (runtime/build-runsc.sh), install "
                "Debian's (apt-get install runsc), or set SANDWEAVE_RUNSC");
}

Runsc::Runsc(CommandRunner& runner, fs::path binary, std::vector<std::string> global_flags)
    : runner_(runner), binary_(std::move(binary)), flags_(std::move(global_flags)) {}

std::vector<std::string> Runsc::flags_for(const fs::path& root, const std::string& platform,
                                          const std::string& network,
                                          const std::optional<fs::path>& pod_init_config) {
    std::vector<std::string> f{"--root=" + root.string(), "--platform=" + platform,
                               "--network=" + network};
    if (pod_init_config) f.push_back("--pod-init-config=" + pod_init_config->string());
    return f;
}

std::vector<std::string> Runsc::argv(std::vector<std::string> args) const {
    std::vector<std::string> out{binary_.string()};
    out.insert(out.end(), flags_.begin(), flags_.end());
    out.insert(out.end(), std::make_move_iterator(args.begin()),
               std::make_move_iterator(args.end()));
    return out;
}

std::string Runsc::version() {
    Command c;
    c.argv = {binary_.string(), "--version"};
    c.timeout = std::chrono::seconds(20);
    auto r = runner_.run(c);
    if (!r.ok()) throw Error(ErrorCode::runtime, binary_.string() + " --version: " + r.describe());
    auto nl = r.out.find('\n');
    return r.out.substr(0, nl);
}

CommandResult Runsc::raw(std::vector<std::string> args) {
    Command c;
    c.argv = argv(std::move(args));
    c.timeout = std::chrono::seconds(120);
    return runner_.run(c);
}

namespace {

Command launch_command(std::vector<std::string> argv, const fs::path& agent_socket,
                       const std::vector<std::string>& shim_companions) {
    Command c;
    c.agent_socket = agent_socket;
    c.shim_companions = shim_companions;
    c.argv = std::move(argv);
    c.argv.insert(c.argv.begin() + 1, "--log-fd=3");
    c.timeout = std::chrono::seconds(60);
    return c;
}

}  // namespace

void Runsc::Launch::go() {
    if (!prepared_) throw Error(ErrorCode::general, "internal: a runsc launch goes once");
    LaunchResult r = prepared_->go();
    prepared_.reset();
    if (r.exit_status != 0) {
        auto msg = last_error_message(r.runtime_error);
        throw Error(ErrorCode::runtime,
                    what_ + ": " +
                        (msg                       ? *msg
                         : r.runtime_error.empty() ? "exit status " + std::to_string(r.exit_status)
                                                   : r.runtime_error));
    }
}

Runsc::Launch Runsc::prepare_run_detached(const std::string& id, const fs::path& bundle,
                                          const fs::path& console_log, const fs::path& agent_socket,
                                          const std::vector<std::string>& shim_companions) {
    Launch l;
    l.what_ = "runsc run";
    l.prepared_ = runner_.prepare_detached(
        launch_command(argv({"run", "--detach", "--bundle", bundle.string(), id}), agent_socket,
                       shim_companions),
        console_log);
    return l;
}

Runsc::Launch Runsc::prepare_restore_detached(const std::string& id, const fs::path& bundle,
                                              const fs::path& image, const fs::path& console_log,
                                              const fs::path& agent_socket,
                                              const std::vector<std::string>& shim_companions) {
    Launch l;
    l.what_ = "runsc restore";
    l.prepared_ = runner_.prepare_detached(
        launch_command(argv({"restore", "--detach", "--image-path", image.string(), "--bundle",
                             bundle.string(), id}),
                       agent_socket, shim_companions),
        console_log);
    return l;
}

void Runsc::run_detached(const std::string& id, const fs::path& bundle, const fs::path& console_log,
                         const fs::path& agent_socket,
                         const std::vector<std::string>& shim_companions) {
    prepare_run_detached(id, bundle, console_log, agent_socket, shim_companions).go();
}

void Runsc::restore_detached(const std::string& id, const fs::path& bundle, const fs::path& image,
                             const fs::path& console_log, const fs::path& agent_socket,
                             const std::vector<std::string>& shim_companions) {
    prepare_restore_detached(id, bundle, image, console_log, agent_socket, shim_companions).go();
}

Runsc::ExecResult Runsc::exec_attached(const std::string& id, const ExecRequest& req,
                                       const fs::path& scratch_dir,
                                       const AttachOptions& attach_in) {
    // The process spec is a private scratch file read once by runsc exec; it
    // needs no durability, so it is written without fsync.
    std::string tag = random_hex(8);
    fs::path process_file = scratch_dir / ("exec-" + tag + ".json");
    fs::path pid_file = scratch_dir / ("exec-" + tag + ".pid");
    json process{
        {"terminal", false},
        {"user", {{"uid", req.user.uid}, {"gid", req.user.gid}}},
        {"args", req.argv},
        {"env", req.env},
        {"cwd", req.cwd},
        {"capabilities", capabilities_for(req.user)},
        {"noNewPrivileges", req.user.uid != 0},
    };
    {
        std::string text = process.dump();
        Fd fd(::open(process_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
        if (!fd.valid()) throw_errno("create " + process_file.string());
        if (!write_all(fd.get(), text)) throw_errno("write " + process_file.string());
    }
    struct Cleanup {
        fs::path a, b;
        ~Cleanup() {
            std::error_code ec;
            fs::remove(a, ec);
            fs::remove(b, ec);
        }
    } cleanup{process_file, pid_file};

    Fd logfd(::memfd_create("runsc-errors", MFD_CLOEXEC));
    if (!logfd.valid()) throw_errno("memfd_create");
    Command c;
    c.argv = argv(
        {"exec", "--process", process_file.string(), "--internal-pid-file", pid_file.string(), id});
    c.argv.insert(c.argv.begin() + 1, "--log-fd=3");
    c.pass_fds = {{logfd.get(), 3}};

    // On timeout or a forwarded signal, signal the guest process itself: runsc
    // exec cannot forward SIGKILL, and killing runsc alone would orphan it.
    auto guest_pid = [&]() -> std::optional<pid_t> {
        try {
            std::string s = read_file(pid_file, 64);
            return static_cast<pid_t>(std::stol(s));
        } catch (const std::exception&) {
            return std::nullopt;
        }
    };
    c.own_process_group = true;
    AttachOptions attach = attach_in;
    // runsc exec forwards signals only for a terminal; deliver them ourselves.
    attach.forward_signal = [&](int sig) {
        for (int i = 0; i < 50; ++i) {
            if (auto p = guest_pid()) {
                try {
                    kill(id, sig, *p);
                } catch (const Error&) {
                    // The process exited meanwhile.
                }
                return;
            }
            ::usleep(20000);
        }
    };
    attach.on_timeout = [&] {
        if (auto p = guest_pid()) {
            try {
                kill(id, SIGKILL, *p);
            } catch (const Error&) {
            }
        }
    };
    auto r = runner_.run_attached(c, attach);
    std::string log = read_fd_all(logfd.get());
    logfd.reset();

    ExecResult out;
    out.timed_out = r.timed_out;
    out.cancelled = r.cancelled;
    out.status = r.shell_status();
    if (r.exit_status == 128 && !r.timed_out && !r.cancelled) {
        if (auto msg = last_error_message(log)) {
            out.runtime_error = *msg;
            bool missing = msg->find("no such file or directory") != std::string::npos;
            bool denied = msg->find("permission denied") != std::string::npos ||
                          msg->find("exec format error") != std::string::npos;
            out.status = missing ? 127 : denied ? 126 : 125;
        }
    }
    return out;
}

namespace {

// runsc's statuses (runsc/container/status.go) by their JSON names.
bool may_be_running(const std::string& status) {
    return status == "created" || status == "running";
}

// Alive and not a zombie: what `runsc state` checks (with a signal 0 to the
// container) before it calls a created or running container so.
bool process_alive(pid_t pid) {
    if (pid <= 0 || ::kill(pid, 0) != 0) return false;
    try {
        std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat", 4096);
        auto close = stat.rfind(')');
        return close == std::string::npos || stat.compare(close, 3, ") Z") != 0;
    } catch (const Error&) {
        return false;
    }
}

// sockaddr_un for the abstract name "\0<name>" with its exact length.
std::pair<sockaddr_un, socklen_t> abstract_address(const std::string& name) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    if (name.size() + 2 > sizeof a.sun_path) throw Error(ErrorCode::usage, "id too long");
    std::memcpy(a.sun_path + 1, name.data(), name.size());
    // Go's runtime binds "\0name" with its terminating NUL counted: so do we.
    return {a, static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size() + 1)};
}

constexpr std::size_t max_control_reply = 16u << 20;
constexpr int control_timeout_ms = 10000;

}  // namespace

std::optional<fs::path> Runsc::root_dir() const {
    for (const auto& f : flags_)
        if (f.rfind("--root=", 0) == 0) return fs::path(f.substr(7));
    return std::nullopt;
}

std::optional<ContainerFiles> Runsc::container_files(const std::string& id) {
    auto root = root_dir();
    if (!root) throw Error(ErrorCode::runtime, "runsc has no --root");
    return read_container_files(*root, id);
}

std::optional<ContainerFiles> read_container_files(const fs::path& root, const std::string& id) {
    // "<sandbox id>_sandbox:<container id>": a sandbox's own container.
    std::string base = id + "_sandbox:" + id;
    ContainerFiles c{root / (base + ".state"), root / (base + ".lock"), {}, 0, false};
    std::string text;
    try {
        text = read_file(c.state_file, 16u << 20);
    } catch (const Error&) {
        std::error_code ec;
        if (!fs::exists(c.state_file, ec) && !ec) return std::nullopt;
        throw;
    }
    json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("sandbox") || !j["sandbox"].is_object())
        throw Error(ErrorCode::runtime, "runsc state file " + c.state_file.string() +
                                            " is unreadable (being written?)");
    try {
        c.state.status = j.value("status", std::string());
        c.state.pid = j["sandbox"].value("pid", 0);
        c.gofer_pid = j.value("goferPid", 0);
    } catch (const json::exception& e) {
        throw Error(ErrorCode::runtime,
                    "runsc state file " + c.state_file.string() + ": " + e.what());
    }
    c.sandbox_alive = process_alive(c.state.pid);
    if (may_be_running(c.state.status) && !c.sandbox_alive) c.state.status = "stopped";
    return c;
}

std::optional<ContainerState> Runsc::state(const std::string& id) {
    try {
        auto c = container_files(id);
        if (!c) return std::nullopt;
        return c->state;
    } catch (const Error&) {
        // runsc itself is the judge of a file it is writing.
    }
    auto r = raw({"state", id});
    if (!r.ok()) return std::nullopt;
    try {
        json j = json::parse(r.out);
        return ContainerState{j.value("status", std::string()), j.value("pid", 0)};
    } catch (const json::exception& e) {
        throw Error(ErrorCode::runtime, "runsc state " + id + ": unreadable output: " + e.what());
    }
}

std::optional<nlohmann::json> Runsc::control_call(const std::string& id,
                                                  const std::string& method) {
    // urpc (gVisor pkg/urpc): a JSON {"method","arg"} over a stream socket,
    // answered by one JSON {"success","err","result"}.
    Fd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!sock) return std::nullopt;
    auto [addr, len] = abstract_address("runsc-sandbox." + id);
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0)
        return std::nullopt;
    std::string request = json{{"method", method}, {"arg", nullptr}}.dump();
    for (std::size_t sent = 0; sent < request.size();) {
        ssize_t n = ::send(sock.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return std::nullopt;
        sent += static_cast<std::size_t>(n);
    }
    std::string reply;
    char buf[65536];
    auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(control_timeout_ms);
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadline - std::chrono::steady_clock::now())
                        .count();
        pollfd p{sock.get(), POLLIN, 0};
        int ready = left > 0 ? ::poll(&p, 1, static_cast<int>(left)) : 0;
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) return std::nullopt;
        ssize_t n = ::recv(sock.get(), buf, sizeof buf, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 || reply.size() + static_cast<std::size_t>(n) > max_control_reply)
            return std::nullopt;
        reply.append(buf, static_cast<std::size_t>(n));
        // The server keeps the connection open: the reply ends where its JSON does.
        auto last = reply.find_last_not_of(" \t\r\n");
        if (last == std::string::npos || reply[last] != '}') continue;
        json j = json::parse(reply, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded()) continue;
        if (!j.is_object() || !j.value("success", false)) return std::nullopt;
        return j.contains("result") ? j["result"] : json();
    }
}

std::optional<nlohmann::json> Runsc::stats(const std::string& id) {
    auto r = raw({"events", "--stats", id});
    if (!r.ok()) return std::nullopt;
    json j = json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
        throw Error(ErrorCode::runtime, "runsc events --stats " + id + ": unreadable output");
    return j;
}

std::map<std::string, ContainerState> Runsc::list() {
    auto r = raw({"list", "--format=json"});
    if (!r.ok()) throw Error(ErrorCode::runtime, "runsc list: " + r.describe());
    std::map<std::string, ContainerState> out;
    try {
        json j = json::parse(r.out.empty() ? "[]" : r.out);
        if (j.is_null()) return out;
        for (const auto& c : j)
            out[c.value("id", std::string())] =
                ContainerState{c.value("status", std::string()), c.value("pid", 0)};
    } catch (const json::exception& e) {
        throw Error(ErrorCode::runtime, std::string("runsc list: unreadable output: ") + e.what());
    }
    return out;
}

void Runsc::kill(const std::string& id, int signal, std::optional<pid_t> guest_pid) {
    std::vector<std::string> args{"kill"};
    if (guest_pid) args.push_back("--pid=" + std::to_string(*guest_pid));
    args.push_back(id);
    args.push_back(std::to_string(signal));
    auto r = raw(args);
    if (!r.ok()) throw Error(ErrorCode::runtime, "runsc kill " + id + ": " + r.describe());
}

void Runsc::remove(const std::string& id, bool force) {
    std::vector<std::string> args{"delete"};
    if (force) args.push_back("--force");
    args.push_back(id);
    auto r = raw(args);
    if (!r.ok()) throw Error(ErrorCode::runtime, "runsc delete " + id + ": " + r.describe());
}

CommandResult Runsc::run_to_exit(const std::string& id, const fs::path& bundle,
                                 const fs::path& output, std::chrono::milliseconds timeout) {
    Command c;
    c.argv = argv({"run", "--bundle", bundle.string(), id});
    c.out = Command::Stdio::file;
    c.out_file = output;
    c.err = Command::Stdio::file;
    c.err_file = output;
    c.timeout = timeout;
    return runner_.run(c);
}

void Runsc::checkpoint(const std::string& id, const fs::path& image_dir) {
    auto r = raw({"checkpoint", "--image-path", image_dir.string(), id});
    if (!r.ok()) throw Error(ErrorCode::runtime, "runsc checkpoint: " + r.describe());
}

void Runsc::pause(const std::string& id) {
    auto r = raw({"pause", id});
    if (!r.ok()) throw Error(ErrorCode::runtime, "runsc pause: " + r.describe());
}

void Runsc::resume(const std::string& id) {
    auto r = raw({"resume", id});
    if (!r.ok()) throw Error(ErrorCode::runtime, "runsc resume: " + r.describe());
}

}  // namespace sandweave
