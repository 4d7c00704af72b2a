#include "lib/store/state.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "lib/core/error.hpp"
#include "lib/core/fault.hpp"
#include "lib/core/json_input.hpp"

namespace sandweave {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* id_prefix = "sw-";
constexpr std::size_t id_hex_digits = 12;
constexpr std::size_t min_prefix = 4;

// A reference that can only name an entry of the kind's directory: not empty,
// no '/', and not one of the hidden entries (".", "..", builds, graveyards).
bool plain_name(const std::string& ref) {
    return !ref.empty() && ref.find('/') == std::string::npos && ref[0] != '.';
}

Error no_such(const char* noun, const std::string& ref) {
    return Error(ErrorCode::not_found, std::string("no such ") + noun + ": " + ref);
}

}  // namespace

const ObjectKind sandbox_kind{
    "sandbox",
    "sandboxes",
    "sandbox.json",
    id_prefix,
    NameStyle::symlinks,
    false,
    plain_name,
    [](const std::string& ref) {
        return ref.empty() ? Error(ErrorCode::usage, "empty sandbox id") : no_such("sandbox", ref);
    },
    [](const std::string& ref, std::size_t n) {
        return Error(ErrorCode::usage,
                     "sandbox id '" + ref + "' is ambiguous (" + std::to_string(n) + " matches)");
    },
};

bool is_sandbox_id(std::string_view name) {
    std::string_view prefix = id_prefix;
    if (name.size() != prefix.size() + id_hex_digits || name.substr(0, prefix.size()) != prefix)
        return false;
    return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

const ObjectKind snapshot_kind{
    "snapshot",
    "snapshots",
    "snapshot.json",
    "snap-",
    NameStyle::in_record,
    true,
    plain_name,
    [](const std::string& ref) {
        return Error(ErrorCode::usage, "invalid snapshot id '" + ref + "'");
    },
    [](const std::string& ref, std::size_t) {
        return Error(ErrorCode::usage, "snapshot '" + ref + "' is ambiguous");
    },
};

const ObjectKind pool_kind{
    "pool",
    "pools",
    "pool.json",
    "",
    NameStyle::ids,
    false,
    valid_object_name,
    [](const std::string& ref) {
        return Error(ErrorCode::usage,
                     "invalid pool name '" + ref + "': use letters, digits, '-', '_' or '.'");
    },
    [](const std::string& ref, std::size_t) { return no_such("pool", ref); },
};

const ObjectKind image_kind{
    "image",
    "images",
    "image.json",
    "",
    NameStyle::ids,
    false,
    plain_name,
    [](const std::string& ref) { return no_such("image", ref); },
    [](const std::string& ref, std::size_t) { return no_such("image", ref); },
};

ObjectDir::ObjectDir(const ObjectKind& kind, fs::path dir, fs::path names_dir)
    : kind_(kind), dir_(std::move(dir)), names_dir_(std::move(names_dir)) {}

fs::path ObjectDir::object_dir(const std::string& id) const {
    if (!kind_.valid_ref(id)) throw kind_.invalid_ref(id);
    return dir_ / id;
}

bool ObjectDir::exists(const std::string& id) const {
    if (!kind_.valid_ref(id)) return false;
    std::error_code ec;
    return kind_.exists_with_dir ? fs::is_directory(dir_ / id, ec)
                                 : fs::exists(dir_ / id / kind_.record, ec);
}

std::vector<std::string> ObjectDir::ids() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
        std::string id = e.path().filename().string();
        if (exists(id)) out.push_back(id);
    }
    return out;
}

std::optional<std::string> ObjectDir::name_target(const std::string& name) const {
    std::error_code ec;
    switch (kind_.names) {
        case NameStyle::ids:
            return std::nullopt;  // the exact-id step already looked
        case NameStyle::symlinks: {
            auto target = fs::read_symlink(names_dir_ / name, ec);
            if (!ec && exists(target.string())) return target.string();
            return std::nullopt;
        }
        case NameStyle::in_record: {
            std::vector<std::string> matches;
            for (const auto& id : ids()) {
                try {
                    auto j = parse_untrusted_json(read_file(dir_ / id / kind_.record, 4u << 20));
                    if (j.is_object() && j.value("name", std::string()) == name)
                        matches.push_back(id);
                } catch (const std::exception&) {
                    // A corrupt record names nothing; it is still found by id.
                }
            }
            if (matches.size() > 1) throw kind_.ambiguous(name, matches.size());
            if (matches.size() == 1) return matches[0];
            return std::nullopt;
        }
    }
    return std::nullopt;
}

std::string ObjectDir::resolve(const std::string& ref) const {
    if (!kind_.valid_ref(ref)) throw kind_.invalid_ref(ref);
    if (exists(ref)) return ref;
    if (auto id = name_target(ref)) return *id;
    const std::string prefix = kind_.id_prefix;
    if (!prefix.empty() && ref.size() >= min_prefix) {
        std::vector<std::string> matches;
        for (const auto& id : ids())
            if (id.rfind(ref, 0) == 0 || id.rfind(prefix + ref, 0) == 0) matches.push_back(id);
        if (matches.size() == 1) return matches[0];
        if (matches.size() > 1) throw kind_.ambiguous(ref, matches.size());
    }
    throw no_such(kind_.noun, ref);
}

namespace {

// <dir>/.rm-<id>-<random>: hidden, and never the name of an earlier graveyard
// (pool and image names are reused).
fs::path graveyard_for(const fs::path& dir, const std::string& id) {
    return dir / (".rm-" + id + "-" + random_hex(8));
}

void rename_away(const ObjectKind& kind, const fs::path& from, const fs::path& grave,
                 const std::string& id) {
    if (::rename(from.c_str(), grave.c_str()) != 0) {
        if (errno == ENOENT) throw no_such(kind.noun, id);
        throw_errno("remove " + from.string() + ": rename to " + grave.string());
    }
    fsync_dir(from.parent_path());
}

}  // namespace

fs::path ObjectDir::bury(const std::string& id) const {
    fs::path from = object_dir(id);
    fs::path grave = graveyard_for(dir_, id);
    rename_away(kind_, from, grave, id);
    return grave;
}

void ObjectDir::remove(const std::string& id, const std::function<void()>& after_rename) const {
    fs::path from = object_dir(id);
    fs::path grave = graveyard_for(dir_, id);
    // Held until the files are gone, so a sweep of abandoned entries (snapshots
    // have one) leaves a graveyard that is still being removed alone.
    struct Unlink {
        fs::path file;
        ~Unlink() {
            std::error_code ec;
            fs::remove(file, ec);
        }
    } unlink_lock{grave.string() + ".lock"};
    FileLock removing(unlink_lock.file);  // released before the file is unlinked
    rename_away(kind_, from, grave, id);
    if (after_rename) after_rename();
    remove_tree(grave);
}

int ObjectDir::sweep_graveyards(const std::function<bool(const fs::path&)>& keep) const {
    int swept = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir_, ec)) {
        std::string n = e.path().filename().string();
        if (n.rfind(".rm-", 0) == 0 && n.ends_with(".lock") && !e.is_directory()) {
            // A remover killed between taking its lock and renaming (or after
            // removing the files, before the unlink) leaves the lock alone.
            std::error_code ec2;
            if (fs::exists(dir_ / n.substr(0, n.size() - 5), ec2) || ec2) continue;
            auto lock = FileLock::try_lock(e.path());
            if (lock.locked()) fs::remove(e.path(), ec2);
            continue;
        }
        if (n.rfind(".rm-", 0) != 0 || n.ends_with(".lock") || !e.is_directory()) continue;
        // A remover holds <graveyard>.lock until its files are gone.
        auto lock = FileLock::try_lock(dir_ / (n + ".lock"));
        if (!lock.locked()) continue;
        if (!keep || !keep(e.path())) {
            remove_tree(e.path());
            ++swept;
        }
        std::error_code ec2;
        fs::remove(dir_ / (n + ".lock"), ec2);
    }
    return swept;
}

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
        case SandboxState::pending:
            return "pending";
        case SandboxState::lost:
            return "lost";
    }
    return "unknown";
}

SandboxState sandbox_state_from_string(const std::string& s) {
    if (s == "running") return SandboxState::running;
    if (s == "stopped") return SandboxState::stopped;
    if (s == "failed") return SandboxState::failed;
    if (s == "pending") return SandboxState::pending;
    if (s == "lost") return SandboxState::lost;
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
    if (r.expires_at_ms) j["expires_at_ms"] = *r.expires_at_ms;
    if (r.ended_by) j["ended_by"] = *r.ended_by;
    if (r.limits_at_stop) j["limits_at_stop"] = *r.limits_at_stop;
    if (r.network) j["network"] = *r.network;
    j["agent"] = r.agent;
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
    if (j.contains("expires_at_ms")) r.expires_at_ms = j["expires_at_ms"].get<std::int64_t>();
    if (j.contains("ended_by")) r.ended_by = j["ended_by"].get<std::string>();
    if (j.contains("limits_at_stop") && j["limits_at_stop"].is_object())
        r.limits_at_stop = j["limits_at_stop"];
    if (j.contains("network") && j["network"].is_object()) r.network = j["network"];
    r.agent = j.value("agent", false);
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
        for (const char* sub :
             {"sandboxes", "names", "runsc", "images", "snapshots", "pools", "templates"})
            make_dirs(root_ / sub, 0700);
        if (::access(root_.c_str(), W_OK | X_OK) != 0 ||
            ::access((root_ / "sandboxes").c_str(), W_OK | X_OK) != 0)
            throw_errno("not writable");
    });
}

ObjectDir StateStore::objects(const ObjectKind& kind) const {
    return ObjectDir(kind, root_ / kind.dir, root_ / "names");
}

fs::path StateStore::sandbox_dir(const std::string& id) const {
    return root_ / "sandboxes" / id;
}

namespace {

// A name is stale when its sandbox directory is gone: reserve makes the
// directory before the name, and removal renames the directory away before
// freeing the name, so a live reservation never looks like this. Under
// names/.lock, so two callers never both decide on one name.
bool remove_if_stale(const fs::path& names, const fs::path& sandboxes, const std::string& name) {
    FileLock lock(names / ".lock");
    std::error_code ec;
    fs::path target = fs::read_symlink(names / name, ec);
    if (ec || target.empty() || target.has_parent_path()) return false;
    if (fs::exists(sandboxes / target, ec) || ec) return false;
    return fs::remove(names / name, ec);
}

}  // namespace

int StateStore::sweep_stale_names() const {
    int n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_ / "names", ec)) {
        std::string name = e.path().filename().string();
        if (name.empty() || name[0] == '.') continue;
        if (remove_if_stale(root_ / "names", root_ / "sandboxes", name)) ++n;
    }
    return n;
}

namespace {

// Held shared by reserve from mkdir until the new directory's lock is taken,
// and exclusively by abandoned_reservations: a record-less directory seen
// under the exclusive hold has its lock held if, and only if, its creator lives.
fs::path reserve_window_lock(const fs::path& root) {
    return root / "names" / ".reserve.lock";
}

}  // namespace

StateStore::Reservation StateStore::reserve(const std::string& name) {
    if (!name.empty() && !valid_object_name(name))
        throw Error(ErrorCode::usage, "invalid name '" + name +
                                          "': use 1-64 letters, digits, '-', '_' or '.', starting "
                                          "with a letter or digit");
    for (int attempt = 0; attempt < 16; ++attempt) {
        std::string id = id_prefix + random_hex(id_hex_digits);
        fs::path dir = sandbox_dir(id);
        FileLock window(reserve_window_lock(root_), FileLock::Mode::shared);
        if (::mkdir(dir.c_str(), 0700) != 0) {
            if (errno == EEXIST) continue;
            throw_errno("create " + dir.string());
        }
        FileLock held = [&] {
            try {
                return FileLock(dir / "lock");
            } catch (...) {
                ::rmdir(dir.c_str());
                throw;
            }
        }();
        if (!name.empty()) {
            fs::path link = root_ / "names" / name;
            int rc = ::symlink(id.c_str(), link.c_str());
            if (rc != 0 && errno == EEXIST &&
                remove_if_stale(root_ / "names", root_ / "sandboxes", name))
                rc = ::symlink(id.c_str(), link.c_str());
            if (rc != 0) {
                int err = errno;
                ::unlink((dir / "lock").c_str());
                ::rmdir(dir.c_str());
                if (err == EEXIST)
                    throw Error(ErrorCode::usage, "name '" + name + "' is already in use");
                throw_errno("reserve name " + name, err);
            }
        }
        SANDWEAVE_FAULT_POINT("reserve.dir-made");
        return Reservation{id, std::move(held)};
    }
    throw Error(ErrorCode::general, "could not allocate a sandbox id");
}

namespace {

// A record is written whole and renamed into place (write_file_atomic), so a
// running process never sees it empty. An empty one is what a host crash
// leaves of a record whose data had not reached the disk (Durability::live):
// it reads as no record at all.
bool has_record(const fs::path& dir) {
    std::error_code ec;
    auto size = fs::file_size(dir / sandbox_kind.record, ec);
    return !ec && size > 0;
}

}  // namespace

std::vector<StateStore::Abandoned> StateStore::abandoned_reservations() const {
    std::vector<Abandoned> out;
    FileLock window(reserve_window_lock(root_));
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(root_ / "sandboxes", ec)) {
        std::string id = e.path().filename().string();
        if (!plain_name(id) || !e.is_directory(ec)) continue;
        if (has_record(e.path())) continue;
        auto lock = FileLock::try_lock(e.path() / "lock");
        // Saved meanwhile by its (live) creator between our two looks: not abandoned.
        if (lock.locked() && !has_record(e.path())) out.push_back(Abandoned{id, std::move(lock)});
    }
    return out;
}

void StateStore::release_name(const std::string& name, const std::string& id) {
    if (name.empty()) return;
    fs::path link = root_ / "names" / name;
    std::error_code ec;
    if (fs::read_symlink(link, ec) == fs::path(id)) fs::remove(link, ec);
}

std::string StateStore::resolve_id(const std::string& ref) const {
    return objects(sandbox_kind).resolve(ref);
}

std::optional<SandboxRecord> StateStore::try_load(const std::string& id) const {
    if (!has_record(sandbox_dir(id))) return std::nullopt;
    return load(id);
}

SandboxRecord StateStore::load(const std::string& id) const {
    fs::path file = sandbox_dir(id) / "sandbox.json";
    std::string text = read_file(file, 4u << 20);
    try {
        return record_from_json(parse_untrusted_json(text));
    } catch (const json::exception& e) {
        throw Error(ErrorCode::general, "corrupt state " + file.string() + ": " + e.what());
    }
}

void StateStore::save(const SandboxRecord& r, Durability durability) const {
    write_file_atomic(sandbox_dir(r.id) / "sandbox.json", to_json(r).dump(2) + "\n", 0600,
                      durability);
}

std::vector<SandboxRecord> StateStore::list() const {
    std::vector<SandboxRecord> out;
    for (const auto& id : objects(sandbox_kind).ids()) {
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
