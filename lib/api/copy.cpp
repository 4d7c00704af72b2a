// sandweave cp: the worker's side (LocalApi::cp_in / cp_out, through the
// guest agent) and the client's (copy(): local files or a tar to and from the
// copy stream, beside the transfer through any Api).

#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "lib/api/local.hpp"
#include "lib/core/copy_stream.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/progress.hpp"
#include "lib/sandbox/copy.hpp"

namespace sandweave::api {

// ---- the worker -------------------------------------------------------------

Empty LocalApi::cp_out(const CpOutParams& p, const CpIo& io) {
    CopyOutRequest r;
    r.id = p.id;
    r.path = p.path;
    if (p.user) r.user = parse_user_param(*p.user);
    copy_out_of_sandbox(ctx_, r, io.out, io.control, io.forward_own_signals);
    return {};
}

Empty LocalApi::cp_in(const CpInParams& p, const CpIo& io) {
    CopyInRequest r;
    r.id = p.id;
    r.path = p.path;
    r.name = p.name;
    r.contents = p.contents;
    if (p.user) r.user = parse_user_param(*p.user);
    if (io.in_fd < 0) throw Error(ErrorCode::usage, "cp_in: no stream to copy");
    copy_into_sandbox(ctx_, r, io.in_fd, io.control, io.forward_own_signals);
    return {};
}

// ---- the client -------------------------------------------------------------

CopyEndpoint parse_copy_endpoint(const std::string& text) {
    CopyEndpoint e;
    auto colon = text.find(':');
    auto slash = text.find('/');
    if (colon != std::string::npos && colon > 0 && (slash == std::string::npos || colon < slash)) {
        e.sandbox = text.substr(0, colon);
        e.path = text.substr(colon + 1);
        if (e.path.empty())
            throw Error(ErrorCode::usage, "'" + text + "': no path in the sandbox (" + *e.sandbox +
                                              ":/path, or relative to its working "
                                              "directory)");
        return e;
    }
    if (text.empty()) throw Error(ErrorCode::usage, "an empty path");
    e.path = text;
    return e;
}

namespace {

// A helper thread takes no signal: they stay with the thread that forwards
// them, and a write to a closed pipe is an EPIPE, not the process's end.
void block_signals() {
    sigset_t all;
    sigfillset(&all);
    ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

std::string shown(const CopyEndpoint& e) {
    return e.sandbox ? *e.sandbox + ":" + e.path : e.path;
}

// The side of the copy that runs here, beside the transfer: whichever failed
// first is the one line the user sees (the other side's failure follows).
class LocalSide {
  public:
    // Runs fn on the thread; `stream_end` (the write end fn writes the stream
    // to) is closed once fn's outcome is recorded, so the other side never
    // sees the stream end before a failure here counts as the first.
    template <class Fn>
    void start(Fn fn, Fd stream_end = Fd()) {
        thread_ = std::thread([this, fn = std::move(fn), end = std::move(stream_end)]() mutable {
            block_signals();
            try {
                fn();
            } catch (const Error& e) {
                error_ = e;
            } catch (const std::exception& e) {
                error_ = Error(ErrorCode::general, e.what());
            }
            failed_ = error_.has_value();
            if (failed_ && on_fail_) on_fail_();
            end.reset();
        });
    }
    void on_fail(std::function<void()> fn) { on_fail_ = std::move(fn); }
    // The moment the transfer returned (before the pipe closes): had we failed?
    void transfer_ended() { local_first_ = failed_.load(); }
    // Joins, then throws whichever failure came first (`transfer`: the
    // transfer's own).
    void finish(std::exception_ptr transfer) {
        bool local_first = local_first_;
        thread_.join();
        if (error_ && (local_first || !transfer)) throw *error_;
        if (transfer) std::rethrow_exception(transfer);
    }

  private:
    std::thread thread_;
    std::optional<Error> error_;
    std::atomic<bool> failed_{false};
    bool local_first_ = false;
    std::function<void()> on_fail_;
};

void copy_in(Api& api, const CopyParams& p) {
    bool tar = p.src.path == "-";
    CpInParams c;
    c.id = *p.dst.sandbox;
    c.path = p.dst.path;
    c.user = p.user;
    std::uint64_t total = 0;
    if (tar) {
        c.contents = true;
    } else {
        struct stat st {};
        if (::lstat(p.src.path.c_str(), &st) != 0) throw_errno(p.src.path);
        if (S_ISREG(st.st_mode)) total = static_cast<std::uint64_t>(st.st_size);
        c.name = copy::root_name(p.src.path);
        c.contents = copy::wants_contents(p.src.path);
    }
    Progress progress("copying " + shown(p.src) + " to " + shown(p.dst), ProgressUnit::bytes,
                      total);
    Pipe pipe = make_pipe();
    LocalSide local;
    const int w = pipe.write.get();
    local.start(
        [&, w] {
            auto on_bytes = [&](std::uint64_t n) { progress.set(n); };
            if (tar)
                copy::tar_to_stream(p.tar_in, w, on_bytes);
            else
                copy::send_local(p.src.path, w, on_bytes);
        },
        std::move(pipe.write));
    CpIo io;
    io.in_fd = pipe.read.get();
    io.forward_own_signals = true;
    std::exception_ptr transfer;
    try {
        api.cp_in(c, io);
    } catch (...) {
        transfer = std::current_exception();
    }
    local.transfer_ended();
    pipe.read.reset();  // a producer still writing gets EPIPE
    local.finish(transfer);
}

void copy_out(Api& api, const CopyParams& p) {
    bool tar = p.dst.path == "-";
    if (!tar) {
        // What docker cp checks before it starts: the destination's directory.
        struct stat st {};
        if (::stat(p.dst.path.c_str(), &st) != 0) {
            if (errno != ENOENT) throw_errno(p.dst.path);
            if (p.dst.path.back() == '/')
                throw Error(ErrorCode::general, p.dst.path + ": no such directory");
            auto parent = std::filesystem::path(p.dst.path).parent_path();
            if (!parent.empty() && ::stat(parent.c_str(), &st) != 0)
                throw Error(ErrorCode::general,
                            p.dst.path + ": its parent directory does not exist");
        }
    }
    CpOutParams c;
    c.id = *p.src.sandbox;
    c.path = p.src.path;
    c.user = p.user;
    Progress progress("copying " + shown(p.src) + " to " + shown(p.dst), ProgressUnit::bytes);
    Pipe pipe = make_pipe();
    RunControl control;
    LocalSide local;
    local.on_fail([&] { control.cancel(); });  // the guest's copier stops
    local.start([&] {
        auto on_bytes = [&](std::uint64_t n) { progress.set(n); };
        struct Drain {  // whatever still comes after a failure is read and dropped
            int fd;
            ~Drain() {
                char buf[65536];
                while (::read(fd, buf, sizeof buf) > 0) {
                }
            }
        } drain{pipe.read.get()};
        std::string name = copy::root_name(p.src.path);
        if (tar)
            copy::stream_to_tar(pipe.read.get(), p.tar_out, name, on_bytes);
        else
            copy::receive_local(pipe.read.get(), p.dst.path, name, copy::wants_contents(p.src.path),
                                on_bytes);
    });
    CpIo io;
    io.out = OutputSink{pipe.write.get(), {}};
    io.control = &control;
    io.forward_own_signals = true;
    std::exception_ptr transfer;
    try {
        api.cp_out(c, io);
    } catch (...) {
        transfer = std::current_exception();
    }
    local.transfer_ended();
    pipe.write.reset();  // the end, for the receiver
    local.finish(transfer);
}

}  // namespace

void copy(Api& api, const CopyParams& p) {
    if (p.src.sandbox && p.dst.sandbox)
        throw Error(ErrorCode::usage, "cannot copy from one sandbox path to another (" +
                                          shown(p.src) + " to " + shown(p.dst) + ")");
    if (!p.src.sandbox && !p.dst.sandbox)
        throw Error(ErrorCode::usage,
                    "one side of a copy must be in a sandbox, written ID:/path (got " +
                        shown(p.src) + " and " + shown(p.dst) + ")");
    if (p.dst.sandbox)
        copy_in(api, p);
    else
        copy_out(api, p);
}

}  // namespace sandweave::api
