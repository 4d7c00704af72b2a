#include "lib/store/state.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <ctime>

#include "lib/core/error.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* id_prefix = "sw-";

}  // namespace

std::string to_string(SandboxState s) {
    switch (s) {
        case SandboxState::creating:
            return "creating";
        case SandboxState::running:
            return "running";
        case SandboxState::stopped:
            return "stopped";
        case SandboxState::failed:
            return "failed";
    }
    return "unknown";
}

SandboxState sandbox_state_from_string(const std::string& s) {
    if (s == "running") return SandboxState::running;
    if (s == "stopped") return SandboxState::stopped;
    if (s == "failed") return SandboxState::failed;
    return SandboxState::creating;
}

std::string now_rfc3339() {
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return buf;
}

json to_json(const SandboxRecord& r) {
    json j{
        {"id", r.id},
        {"name", r.name},
        {"state", to_string(r.state)},
        {"created_at", r.created_at},
        {"spec", to_json(r.spec)},
        {"runsc", r.runsc},
        {"runtime_version", r.runtime_version},
        {"runsc_flags", r.runsc_flags},
    };
    if (r.stopped_at) j["stopped_at"] = *r.stopped_at;
    if (r.error) j["error"] = *r.error;
    if (r.from_snapshot) j["from_snapshot"] = *r.from_snapshot;
    if (!r.pool.empty()) {
        json p{{"name", r.pool}, {"state", r.pool_state}};
        if (r.acquired_at) p["acquired_at"] = *r.acquired_at;
        if (r.acquired_audit_seq) p["acquired_audit_seq"] = *r.acquired_audit_seq;
        j["pool"] = p;
    }
    return j;
}

SandboxRecord record_from_json(const json& j) {
    SandboxRecord r;
    r.id = j.at("id").get<std::string>();
    r.name = j.value("name", std::string());
    r.state = sandbox_state_from_string(j.value("state", std::string()));
    r.created_at = j.value("created_at", std::string());
    r.spec = spec_from_json(j.at("spec"));
    r.runsc = j.value("runsc", std::string());
    r.runtime_version = j.value("runtime_version", std::string());
    r.runsc_flags = j.value("runsc_flags", std::vector<std::string>{});
    if (j.contains("stopped_at")) r.stopped_at = j["stopped_at"].get<std::string>();
    if (j.contains("error")) r.error = j["error"].get<std::string>();
    if (j.contains("from_snapshot")) r.from_snapshot = j["from_snapshot"].get<std::string>();
    if (j.contains("pool")) {
        const json& p = j["pool"];
        r.pool = p.value("name", std::string());
        r.pool_state = p.value("state", std::string());
        if (p.contains("acquired_at")) r.acquired_at = p["acquired_at"].get<std::string>();
        if (p.contains("acquired_audit_seq"))
            r.acquired_audit_seq = p["acquired_audit_seq"].get<std::uint64_t>();
    }
    return r;
}

fs::path StateStore::default_root() {
    if (const char* env = std::getenv("SANDWEAVE_STATE_DIR"); env && *env) return env;
    if (::geteuid() == 0) return "/var/lib/sandweave";
    if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg)
        return fs::path(xdg) / "sandweave";
    if (const char* home = std::getenv("HOME"); home && *home)
        return fs::path(home) / ".local/state/sandweave";
    return "/var/lib/sandweave";
}

StateStore::StateStore(fs::path root) : root_(std::move(root)) {
    with_context("state directory " + root_.string(), [&] {
        make_dirs(root_, 0711);
        for (const char* sub : {"sandboxes", "names", "runsc", "images", "templates"})
            make_dirs(root_ / sub, 0700);
        if (::access(root_.c_str(), W_OK | X_OK) != 0 ||
            ::access((root_ / "sandboxes").c_str(), W_OK | X_OK) != 0)
            throw_errno("not writable");
    });
}

fs::path StateStore::sandbox_dir(const std::string& id) const {
    return root_ / "sandboxes" / id;
}

std::string StateStore::reserve(const std::string& name) {
    if (!name.empty() && !valid_object_name(name))
        throw Error(ErrorCode::usage, "invalid name '" + name +
                                          "': use 1-64 letters, digits, '-', '_' or '.', starting "
                                          "with a letter or digit");
    for (int attempt = 0; attempt < 16; ++attempt) {
        std::string id = id_prefix + random_hex(12);
        fs::path dir = sandbox_dir(id);
        if (::mkdir(dir.c_str(), 0700) != 0) {
            if (errno == EEXIST) continue;
            throw_errno("create " + dir.string());
        }
        if (!name.empty()) {
            fs::path link = root_ / "names" / name;
            if (::symlink(id.c_str(), link.c_str()) != 0) {
                int err = errno;
                ::rmdir(dir.c_str());
                if (err == EEXIST)
                    throw Error(ErrorCode::usage, "name '" + name + "' is already in use");
                throw_errno("reserve name " + name, err);
            }
        }
        return id;
    }
    throw Error(ErrorCode::general, "could not allocate a sandbox id");
}

void StateStore::release_name(const std::string& name, const std::string& id) {
    if (name.empty()) return;
    fs::path link = root_ / "names" / name;
    std::error_code ec;
    if (fs::read_symlink(link, ec) == fs::path(id)) fs::remove(link, ec);
}

std::string StateStore::resolve_id(const std::string& ref) const {
    std::error_code ec;
    if (ref.empty()) throw Error(ErrorCode::usage, "empty sandbox id");
    bool safe = ref.find('/') == std::string::npos && ref != "." && ref != "..";
    if (safe && fs::exists(sandbox_dir(ref) / "sandbox.json", ec)) return ref;
    if (safe) {
        auto target = fs::read_symlink(root_ / "names" / ref, ec);
        if (!ec && fs::exists(sandbox_dir(target.string()) / "sandbox.json", ec))
            return target.string();
    }
    if (safe && ref.size() >= 4) {
        std::vector<std::string> matches;
        for (const auto& e : fs::directory_iterator(root_ / "sandboxes", ec)) {
            std::string id = e.path().filename().string();
            if ((id.rfind(ref, 0) == 0 || id.rfind(id_prefix + ref, 0) == 0) &&
                fs::exists(e.path() / "sandbox.json"))
                matches.push_back(id);
        }
        if (matches.size() == 1) return matches[0];
        if (matches.size() > 1)
            throw Error(ErrorCode::usage, "sandbox id '" + ref + "' is ambiguous (" +
                                              std::to_string(matches.size()) + " matches)");
    }
    throw Error(ErrorCode::not_found, "no such sandbox: " + ref);
}

std::optional<SandboxRecord> StateStore::try_load(const std::string& id) const {
    fs::path file = sandbox_dir(id) / "sandbox.json";
    std::error_code ec;
    if (!fs::exists(file, ec)) return std::nullopt;
    return load(id);
}

SandboxRecord StateStore::load(const std::string& id) const {
    fs::path file = sandbox_dir(id) / "sandbox.json";
    std::string text = read_file(file, 4u << 20);
    try {
        return record_from_json(json::parse(text));
    } catch (const json::exception& e) {
        throw Error(ErrorCode::general, "corrupt state " + file.string() + ": " + e.what());
    }
}

void StateStore::save(const SandboxRecord& r) const {
    write_file_atomic(sandbox_dir(r.id) / "sandbox.json", to_json(r).dump(2) + "\n", 0600);
}

std::vector<SandboxRecord> StateStore::list() const {
    std::vector<SandboxRecord> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_ / "sandboxes", ec)) {
        std::string id = e.path().filename().string();
        try {
            if (auto r = try_load(id)) out.push_back(std::move(*r));
        } catch (const Error&) {
            // Removed under us, or being written for the first time: skip.
        }
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
        return a.created_at != b.created_at ? a.created_at < b.created_at : a.id < b.id;
    });
    return out;
}

FileLock StateStore::lock(const std::string& id) const {
    return FileLock(sandbox_dir(id) / "lock");
}

}  // namespace sandweave
