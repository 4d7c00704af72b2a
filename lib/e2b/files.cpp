// envd's filesystem.Filesystem and /files, done in the guest by small fixed
// shell scripts run through the Api as the caller's user: the path is always
// an argument, never part of the script, and the guest's own permissions
// decide what the user may touch.
#include <httplib.h>
#include <strings.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <sstream>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/e2b/internal.hpp"
#include "lib/e2b/wire.hpp"

namespace sandweave::e2b {

using nlohmann::json;

namespace {

constexpr const char* stat_format = "%f %s %Y %u %g %U %G %n";

// A relative path is the user's home's, as envd has it.
const char* resolve = "p=\"$1\"; case \"$p\" in /*) ;; *) p=\"${HOME:-/}/$p\" ;; esac; ";

std::string script(const std::string& body) {
    return std::string(resolve) + body;
}

const std::string stat_script = script("[ -e \"$p\" ] || [ -L \"$p\" ] || exit 3; exec stat -c '" +
                                       std::string(stat_format) + "' \"$p\"");
const std::string list_script = script(
    "[ -e \"$p\" ] || exit 3; [ -d \"$p\" ] || exit 4; "
    "exec find \"$p\" -mindepth 1 -maxdepth \"$2\" -exec stat -c '" +
    std::string(stat_format) + "' {} +");
const std::string mkdir_script =
    script("[ -e \"$p\" ] && exit 5; mkdir -p \"$p\" && exec stat -c '" + std::string(stat_format) +
           "' \"$p\"");
const std::string move_script = script(
    "q=\"$2\"; case \"$q\" in /*) ;; *) q=\"${HOME:-/}/$q\" ;; esac; "
    "[ -e \"$p\" ] || [ -L \"$p\" ] || exit 3; mv \"$p\" \"$q\" && exec stat -c '" +
    std::string(stat_format) + "' \"$q\"");
const std::string remove_script =
    script("[ -e \"$p\" ] || [ -L \"$p\" ] || exit 3; exec rm -rf \"$p\"");
const std::string check_read_script =
    script("[ -e \"$p\" ] || exit 3; [ -d \"$p\" ] && exit 4; [ -r \"$p\" ] || exit 5; exit 0");
const std::string read_script = script("exec cat \"$p\"");
// Written beside the target and renamed over it, so a failed or cut upload
// never leaves a short file under the target's name ($2: the temp's suffix).
const std::string write_script = script(
    "t=\"$p.sw-upload-$2\"; d=$(dirname \"$p\"); mkdir -p \"$d\" && cat > \"$t\" && "
    "exec mv -f \"$t\" \"$p\"; rm -f \"$t\"; exit 1");
const std::string discard_script = script("exec rm -f \"$p.sw-upload-$2\"");

std::string permissions(unsigned mode) {
    std::string s;
    unsigned type = mode & 0170000;
    s += type == 0040000 ? 'd' : type == 0120000 ? 'l' : '-';
    const char* rwx = "rwxrwxrwx";
    for (int i = 0; i < 9; ++i) s += (mode & (0400u >> i)) ? rwx[i] : '-';
    return s;
}

std::string rfc3339(std::int64_t secs) {
    std::time_t t = static_cast<std::time_t>(secs);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

// One line of stat_format as envd's EntryInfo.
std::optional<json> entry_of(const std::string& line) {
    std::istringstream in(line);
    std::string mode_hex, size, mtime, uid, gid, user, group;
    if (!(in >> mode_hex >> size >> mtime >> uid >> gid >> user >> group)) return std::nullopt;
    std::string path;
    std::getline(in, path);
    if (path.size() < 2 || path[0] != ' ') return std::nullopt;
    path.erase(0, 1);
    unsigned mode = 0;
    try {
        mode = static_cast<unsigned>(std::stoul(mode_hex, nullptr, 16));
        (void)std::stoll(size);
        (void)std::stoll(mtime);
    } catch (...) {
        return std::nullopt;
    }
    return entry_info(path, mode, size, std::stoll(mtime), user, group);
}

}  // namespace

json entry_info(const std::string& path, unsigned mode, const std::string& size, std::int64_t mtime,
                const std::string& owner, const std::string& group) {
    unsigned type = mode & 0170000;
    std::string name = path.substr(path.find_last_of('/') + 1);
    return json{{"name", name},
                {"type", type == 0040000   ? "FILE_TYPE_DIRECTORY"
                         : type == 0120000 ? "FILE_TYPE_SYMLINK"
                                           : "FILE_TYPE_FILE"},
                {"path", path},
                {"size", size},
                {"mode", mode & 07777},
                {"permissions", permissions(mode)},
                {"owner", owner},
                {"group", group},
                {"modifiedTime", rfc3339(mtime)}};
}

namespace {

[[noreturn]] void guest_failed(const GuestResult& r, const std::string& path,
                               int plane_status_for_missing) {
    if (r.exit_code == 3)
        fail(plane_status_for_missing, "path '" + path + "' does not exist", "not_found");
    if (r.exit_code == 4)
        fail(400, "path '" + path + "' is not what the call expects (a directory/file)",
             "invalid_argument");
    if (r.exit_code == 5) fail(409, "path '" + path + "' already exists", "already_exists");
    std::string why = r.err.substr(0, 500);
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    if (why.find("Permission denied") != std::string::npos)
        fail(403, "'" + path + "': permission denied", "permission_denied");
    fail(500,
         "'" + path +
             "': " + (why.empty() ? "failed (exit " + std::to_string(r.exit_code) + ")" : why),
         "internal");
}

}  // namespace

std::string path_param(const json& in, const char* key) {
    if (!in.contains(key) || !in[key].is_string() || in[key].get<std::string>().empty())
        fail(400, std::string(key) + ": expected a path", "invalid_argument");
    std::string p = in[key].get<std::string>();
    if (p.size() > 4096 || p.find('\0') != std::string::npos)
        fail(400, std::string(key) + ": not a path", "invalid_argument");
    return p;
}

std::vector<std::string> path_script(const std::string& body, std::vector<std::string> args) {
    std::vector<std::string> argv = {"/bin/sh", "-c", script(body), "sh"};
    for (auto& a : args) argv.push_back(std::move(a));
    return argv;
}

namespace {

json connect_json(const std::string& body, std::size_t max) {
    std::string why;
    auto j = decode_json_object(body, max, why);
    if (!j) fail(400, why, "invalid_argument");
    return *j;
}

std::vector<std::string> sh(const std::string& s, std::vector<std::string> args) {
    std::vector<std::string> argv = {"/bin/sh", "-c", s, "sh"};
    for (auto& a : args) argv.push_back(std::move(a));
    return argv;
}

// A command writing its stdin into a sandbox file, fed while a request's
// body arrives.
struct Upload {
    api::Api& api;
    std::string id, path, suffix = random_hex(16);
    std::optional<std::string> user;
    Fd write;
    std::thread thread;
    RunControl control;
    GuestResult result;
    bool broken = false;
    bool finished = false;

    Upload(api::Api& a, const std::string& i, const std::string& p,
           const std::optional<std::string>& u)
        : api(a), id(i), path(p), user(u) {
        Pipe pipe = make_pipe();
        write = std::move(pipe.write);
        auto read = std::make_shared<Fd>(std::move(pipe.read));
        thread = std::thread([this, read] {
            api::RunParams rp;
            rp.id = id;
            rp.argv = sh(write_script, {path, suffix});
            rp.entrypoint = std::vector<std::string>{};
            rp.user = user;
            rp.stdin = true;
            api::RunIo io;
            io.stdin_fd = read->get();
            io.out = OutputSink{-1, [](std::string_view) {}};
            io.err = OutputSink{-1, [this](std::string_view d) {
                                    if (result.err.size() < 4096) result.err.append(d);
                                }};
            io.forward_own_signals = false;
            io.control = &control;
            try {
                result.exit_code = api.run(rp, io).exit_code;
            } catch (const Error& e) {
                result.exit_code = -1;
                result.err = e.what();
            }
            read->reset();
        });
    }
    bool feed(const char* d, std::size_t n) {
        while (n > 0 && !broken) {
            ssize_t w = ::write(write.get(), d, n);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                broken = true;
                break;
            }
            d += w;
            n -= static_cast<std::size_t>(w);
        }
        return true;  // keep reading the body: the answer says what failed
    }
    GuestResult finish() {
        write.reset();
        if (thread.joinable()) thread.join();
        finished = true;
        return result;
    }
    // The upload failed: the command is killed before its stdin ends (so no
    // short file is renamed into place) and its temp file removed.
    void abort() {
        if (finished) return;
        control.cancel();
        finish();
        try {
            guest(api, id, sh(discard_script, {path, suffix}), user);
        } catch (...) {
        }
    }
    ~Upload() { abort(); }
};

}  // namespace

GuestResult guest(api::Api& api, const std::string& id, const std::vector<std::string>& argv,
                  const std::optional<std::string>& user, std::size_t max) {
    api::RunParams rp;
    rp.id = id;
    rp.argv = argv;
    rp.entrypoint = std::vector<std::string>{};
    rp.user = user;
    GuestResult r;
    bool over = false;
    api::RunIo io;
    io.out = OutputSink{-1, [&](std::string_view d) {
                            if (r.out.size() + d.size() > max)
                                over = true;
                            else
                                r.out.append(d);
                        }};
    io.err = OutputSink{-1, [&](std::string_view d) {
                            if (r.err.size() < 4096) r.err.append(d);
                        }};
    io.forward_own_signals = false;
    try {
        r.exit_code = api.run(rp, io).exit_code;
    } catch (const Error& e) {
        fail_from(e, true);
    }
    if (over)
        fail(500, "the guest's answer is over " + std::to_string(max) + " bytes",
             "resource_exhausted");
    return r;
}

void Server::filesystem_rpc(const std::string& method, const httplib::Request& req,
                            httplib::Response& res, const std::string& body) {
    if (method == "WatchDir") {
        // A body that is not one Connect message is refused as a bad
        // request; from here on an error is the stream's end-of-stream frame.
        json in = request_message(req, body, opts.max_body);
        guarded(res, Plane::stream, [&] {
            SandboxView sb = envd_sandbox(req);
            std::optional<std::string> user;
            if (auto u = envd_user(req)) user = uid_of_user(*u);
            watch_dir(sb, user, req, res, in);
        });
        return;
    }
    SandboxView sb = envd_sandbox(req);
    const std::string id = sb.record.id;
    std::optional<std::string> user;
    if (auto u = envd_user(req)) user = uid_of_user(*u);
    if (req.get_header_value("Content-Type").rfind("application/connect+json", 0) == 0)
        fail(501, "filesystem." + method + " (streaming) is not implemented", "unimplemented");
    json in = connect_json(body, opts.max_body);
    auto one_entry = [&](const GuestResult& r, const std::string& path) {
        if (r.exit_code != 0) guest_failed(r, path, 404);
        auto e = entry_of(r.out.substr(0, r.out.find('\n')));
        if (!e) fail(500, "'" + path + "': the guest's stat answer did not parse", "internal");
        return *e;
    };
    auto unary = [&](const json& out) {
        res.status = 200;
        res.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace),
                        "application/json");
    };
    if (method == "Stat") {
        std::string p = path_param(in, "path");
        return unary({{"entry", one_entry(guest(api, id, sh(stat_script, {p}), user), p)}});
    }
    if (method == "ListDir") {
        std::string p = path_param(in, "path");
        std::int64_t depth = 1;
        if (in.contains("depth") && in["depth"].is_number_integer())
            depth = in["depth"].get<std::int64_t>();
        if (depth < 1 || depth > 64) fail(400, "depth: expected 1 to 64", "invalid_argument");
        GuestResult r = guest(api, id, sh(list_script, {p, std::to_string(depth)}), user);
        if (r.exit_code != 0) guest_failed(r, p, 404);
        json entries = json::array();
        std::istringstream lines(r.out);
        for (std::string line; std::getline(lines, line);)
            if (auto e = entry_of(line)) entries.push_back(*e);
        return unary({{"entries", entries}});
    }
    if (method == "MakeDir") {
        std::string p = path_param(in, "path");
        return unary({{"entry", one_entry(guest(api, id, sh(mkdir_script, {p}), user), p)}});
    }
    if (method == "Move") {
        std::string src = path_param(in, "source"), dst = path_param(in, "destination");
        return unary(
            {{"entry", one_entry(guest(api, id, sh(move_script, {src, dst}), user), src)}});
    }
    if (method == "Remove") {
        std::string p = path_param(in, "path");
        GuestResult r = guest(api, id, sh(remove_script, {p}), user);
        if (r.exit_code != 0) guest_failed(r, p, 404);
        return unary(json::object());
    }
    fail(404, "filesystem." + method + " is not implemented", "unimplemented");
}

void Server::install_files(httplib::Server& http) {
    auto user_of = [this](const httplib::Request& req) -> std::optional<std::string> {
        if (req.has_param("username") && !req.get_param_value("username").empty())
            return uid_of_user(req.get_param_value("username"));
        if (auto u = envd_user(req)) return uid_of_user(*u);
        return std::nullopt;
    };
    get(http, "/files", Plane::envd,
        [this, user_of](const httplib::Request& req, httplib::Response& res, const std::string&) {
            SandboxView sb = envd_sandbox(req);
            std::string path = req.get_param_value("path");
            if (path.empty()) fail(400, "path: required");
            auto user = user_of(req);
            GuestResult check = guest(api, sb.record.id, sh(check_read_script, {path}), user);
            if (check.exit_code == 4) fail(400, "path '" + path + "' is a directory");
            if (check.exit_code == 5) fail(401, "path '" + path + "' is not readable by the user");
            if (check.exit_code != 0) guest_failed(check, path, 404);
            std::string id = sb.record.id;
            res.status = 200;
            res.set_chunked_content_provider(
                "application/octet-stream",
                [this, id, path, user](std::size_t, httplib::DataSink& sink) {
                    RunControl control;
                    bool gone = false;
                    api::RunParams rp;
                    rp.id = id;
                    rp.argv = sh(read_script, {path});
                    rp.entrypoint = std::vector<std::string>{};
                    rp.user = user;
                    api::RunIo io;
                    io.out = OutputSink{-1, [&](std::string_view d) {
                                            if (gone) return;
                                            if (!sink.write(d.data(), d.size())) {
                                                gone = true;
                                                control.cancel();
                                            }
                                        }};
                    io.err = OutputSink{-1, [](std::string_view) {}};
                    io.forward_own_signals = false;
                    io.control = &control;
                    int code = -1;
                    try {
                        code = api.run(rp, io).exit_code;
                    } catch (const Error&) {
                        code = -1;
                    }
                    // A read that failed half-way closes the connection: the
                    // client sees a broken download, never a short file.
                    if (gone || code != 0) return false;
                    sink.done();
                    return true;
                });
        });
    http.Post("/files", [this, user_of](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
        guarded(res, Plane::envd, [&] {
            SandboxView sb = envd_sandbox(req);
            auto user = user_of(req);
            // File metadata (envd 0.6.2's X-Metadata-* headers) is refused,
            // never dropped without a word.
            for (const auto& [name, value] : req.headers)
                if (name.size() > 11 && strncasecmp(name.c_str(), "X-Metadata-", 11) == 0)
                    fail(400,
                         "file metadata (" + name + ") is not supported by sandweave's E2B API",
                         "invalid_argument");
            std::string query_path = req.get_param_value("path");
            json written = json::array();
            std::uint64_t total = 0;
            bool too_big = false;
            auto done = [&](Upload& u, const std::string& path) {
                if (u.broken) u.abort();
                GuestResult r = u.finish();
                if (u.broken && r.exit_code == 0) r.exit_code = 1;
                if (r.exit_code != 0) guest_failed(r, path, 404);
                std::string name = path.substr(path.find_last_of('/') + 1);
                written.push_back({{"name", name}, {"type", "file"}, {"path", path}});
            };
            if (req.is_multipart_form_data()) {
                std::unique_ptr<Upload> cur;
                std::string cur_path;
                std::vector<std::pair<std::unique_ptr<Upload>, std::string>> finished;
                bool bad = false;
                reader(
                    [&](const httplib::MultipartFormData& part) {
                        if (cur) {
                            cur->write.reset();  // that part's end: its file is complete
                            finished.emplace_back(std::move(cur), cur_path);
                        }
                        if (part.name != "file") return true;  // ignored field
                        cur_path = !query_path.empty() ? query_path : part.filename;
                        if (cur_path.empty() || cur_path.size() > 4096 || finished.size() > 1000) {
                            bad = true;
                            return false;
                        }
                        cur = std::make_unique<Upload>(api, sb.record.id, cur_path, user);
                        return true;
                    },
                    [&](const char* d, std::size_t n) {
                        total += n;
                        if (total > opts.max_upload) {
                            too_big = true;
                            return false;
                        }
                        return cur ? cur->feed(d, n) : true;
                    });
                if (cur) finished.emplace_back(std::move(cur), cur_path);
                if (too_big) fail(413, "upload over " + std::to_string(opts.max_upload) + " bytes");
                if (bad) fail(400, "a file part without a path");
                for (auto& [u, p] : finished) done(*u, p);
            } else {
                if (query_path.empty()) fail(400, "path: required for an octet-stream upload");
                if (!req.get_header_value("Content-Encoding").empty())
                    fail(400, "Content-Encoding is not supported (send the bytes as they are)");
                Upload u(api, sb.record.id, query_path, user);
                reader([&](const char* d, std::size_t n) {
                    total += n;
                    if (total > opts.max_upload) {
                        too_big = true;
                        return false;
                    }
                    return u.feed(d, n);
                });
                if (too_big) fail(413, "upload over " + std::to_string(opts.max_upload) + " bytes");
                done(u, query_path);
            }
            if (written.empty()) fail(400, "no file in the upload");
            res.status = 200;
            res.set_content(written.dump(), "application/json");
        });
    });
}

}  // namespace sandweave::e2b
