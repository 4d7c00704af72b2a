// Who a controller's client is (lib/controller/identity.hpp).
#include "lib/controller/identity.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "lib/controller/slurm.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/process.hpp"
#include "lib/core/sha256.hpp"

namespace sandweave::controller {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

thread_local const Identity* current = nullptr;

const Identity& the_controller() {
    static const Identity c{"controller", own_unix_user(), true, "controller"};
    return c;
}

bool same_digest(const std::string& a, const std::string& b) {
    return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::optional<std::string> user_of_uid(uid_t uid) {
    passwd pw{}, *res = nullptr;
    std::string buf(16384, '\0');
    if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &res) != 0 || !res) return std::nullopt;
    return std::string(res->pw_name);
}

std::optional<uid_t> uid_of(const std::string& name) {
    passwd pw{}, *res = nullptr;
    std::string buf(16384, '\0');
    if (::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &res) != 0 || !res)
        return std::nullopt;
    return res->pw_uid;
}

bool user_exists(const std::string& name) {
    return uid_of(name).has_value();
}

std::string parse_line_error(const fs::path& file, int n) {
    return file.string() + " line " + std::to_string(n) + ": not NAME SHA256 USER admin|user";
}

std::vector<TokenEntry> read_entries(const fs::path& file) {
    std::vector<TokenEntry> out;
    struct stat st {};
    if (::stat(file.c_str(), &st) != 0) {
        if (errno == ENOENT) return out;
        throw_errno("stat " + file.string());
    }
    if (st.st_mode & 077)
        throw Error(ErrorCode::usage, "the token file " + file.string() + " must be mode 0600");
    std::istringstream lines(read_file(file, 4u << 20));
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
        ++n;
        if (line.empty() || line[0] == '#') continue;
        std::istringstream words(line);
        TokenEntry e;
        std::string role;
        if (!(words >> e.name >> e.sha256 >> e.unix_user >> role) ||
            (role != "admin" && role != "user") || e.sha256.size() != 64)
            throw Error(ErrorCode::usage, parse_line_error(file, n));
        e.admin = role == "admin";
        out.push_back(std::move(e));
    }
    return out;
}

void write_entries(const fs::path& file, const std::vector<TokenEntry>& entries) {
    std::string text = "# sandweave controller tokens: NAME SHA256(token) UNIX_USER admin|user\n";
    for (const auto& e : entries)
        text +=
            e.name + " " + e.sha256 + " " + e.unix_user + " " + (e.admin ? "admin" : "user") + "\n";
    write_file_atomic(file, text, 0600);
}

}  // namespace

const Identity& caller() {
    return current ? *current : the_controller();
}

CallerScope::CallerScope(const Identity& who) : before_(current) {
    current = &who;
}
CallerScope::~CallerScope() {
    current = before_;
}

std::string own_unix_user() {
    auto name = user_of_uid(::geteuid());
    return name ? *name : std::to_string(::geteuid());
}

void act_as_owner_of(const fs::path& controller_dir) {
    struct stat st {};
    if (::geteuid() != 0 || ::stat(controller_dir.c_str(), &st) != 0 || st.st_uid == 0) return;
    gid_t group = st.st_gid;
    if (::setgroups(1, &group) != 0 || ::setresgid(group, group, group) != 0 ||
        ::setresuid(st.st_uid, st.st_uid, st.st_uid) != 0)
        throw_errno("act as " + controller_dir.string() + "'s owner (uid " +
                    std::to_string(st.st_uid) + ")");
}

// ---- tokens ---------------------------------------------------------------------

TokenStore::TokenStore(fs::path dir) : file_(dir / "tokens"), lock_(dir / "tokens.lock") {}

std::string TokenStore::add(const std::string& name, bool admin, std::string unix_user) {
    if (!valid_object_name(name))
        throw Error(ErrorCode::usage,
                    "token '" + name + "': a name is 1-64 letters, digits, '-', '_' or '.'");
    if (unix_user.empty()) unix_user = admin ? own_unix_user() : name;
    if (!user_exists(unix_user))
        throw Error(ErrorCode::usage, "token '" + name + "': no Unix user '" + unix_user +
                                          "' on this host (its sandboxes' Slurm jobs run as "
                                          "that user; give one with --user)");
    if (!admin && uid_of(unix_user) == 0u)
        throw Error(ErrorCode::usage, "token '" + name +
                                          "': a user token cannot be root's (root is an admin: "
                                          "--admin)");
    make_dirs(file_.parent_path(), 0700);
    FileLock lock(lock_);
    auto entries = read_entries(file_);
    for (const auto& e : entries)
        if (e.name == name)
            throw Error(
                ErrorCode::usage,
                "token '" + name + "' already exists (remove it first: token rm " + name + ")");
    std::string token = random_hex(64);
    entries.push_back(TokenEntry{name, sha256_hex(token), unix_user, admin});
    write_entries(file_, entries);
    return token;
}

std::vector<TokenEntry> TokenStore::list() const {
    return read_entries(file_);
}

void TokenStore::remove(const std::string& name) {
    FileLock lock(lock_);
    auto entries = read_entries(file_);
    auto it = std::find_if(entries.begin(), entries.end(),
                           [&](const TokenEntry& e) { return e.name == name; });
    if (it == entries.end()) throw Error(ErrorCode::not_found, "no token '" + name + "'");
    entries.erase(it);
    write_entries(file_, entries);
}

std::optional<TokenEntry> TokenStore::match(const std::string& token) const {
    const std::string digest = sha256_hex(token);
    std::optional<TokenEntry> found;
    // Every entry is compared, so the time taken does not say which matched.
    for (auto& e : read_entries(file_))
        if (same_digest(digest, e.sha256) && !found) found = std::move(e);
    return found;
}

// ---- munge ----------------------------------------------------------------------

unsigned long unmunge_uid(const std::string& credential, const std::string& socket) {
    if (credential.size() > 4096 || credential.find_first_of("\n\r") != std::string::npos)
        throw Error(ErrorCode::usage, "the munge credential is malformed");
    Command c;
    // STATUS reads "Success (0)" or munge's reason ("Replayed credential
    // (17)"); UID reads "alice (1001)".
    c.argv = {"unmunge", "--keys=STATUS,UID", "--metadata=/dev/stdout", "--output=/dev/null"};
    if (!socket.empty()) c.argv.push_back("--socket=" + socket);
    c.timeout = std::chrono::seconds(10);
    // The credential on stdin: it fits in the pipe, so it is written before
    // unmunge starts.
    Pipe in = make_pipe();
    if (!write_all(in.write.get(), credential + "\n")) throw_errno("writing the munge credential");
    in.write.reset();
    c.in = Command::Stdio::inherit;
    c.pass_fds = {{in.read.get(), 0}};
    CommandResult r = LocalRunner().run(c);
    std::map<std::string, std::string> meta;
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
        auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        auto start = line.find_first_not_of(" \t", colon + 1);
        meta[line.substr(0, colon)] = start == std::string::npos ? "" : line.substr(start);
    }
    // "text (N)" -> text, N
    auto split = [](const std::string& v) -> std::pair<std::string, std::string> {
        auto open = v.rfind(" (");
        if (open == std::string::npos || v.back() != ')') return {v, ""};
        return {v.substr(0, open), v.substr(open + 2, v.size() - open - 3)};
    };
    auto [status, status_code] = split(meta["STATUS"]);
    if (!r.ok() || status_code != "0") {
        std::string why = status;
        if (why.empty()) {
            why = slurm::last_line(r.err);
            if (auto at = why.rfind("Error: "); at != std::string::npos) why = why.substr(at + 7);
        }
        if (why.empty()) why = r.describe();
        throw Error(ErrorCode::usage, "the munge credential was refused: " + why);
    }
    const std::string uid = split(meta["UID"]).second;
    if (uid.empty() || uid.size() > 10 || uid.find_first_not_of("0123456789") != std::string::npos)
        throw Error(ErrorCode::usage, "the munge credential was refused: unmunge named no uid");
    return std::stoul(uid);
}

// ---- hello ----------------------------------------------------------------------

Identity authenticate(const Authenticator& a, const json& params) {
    auto tok = params.find("token");
    auto cred = params.find("munge");
    bool has_token = tok != params.end() && tok->is_string() && !tok->get<std::string>().empty();
    bool has_munge = cred != params.end() && cred->is_string() && !cred->get<std::string>().empty();
    if (has_token) {
        const std::string token = tok->get<std::string>();
        if (same_digest(sha256_hex(token), a.admin_token_sha256))
            return Identity{"admin", own_unix_user(), true, "token"};
        if (auto e = TokenStore(a.controller_dir).match(token)) {
            auto uid = uid_of(e->unix_user);
            if (!uid)
                throw Error(ErrorCode::usage, "token '" + e->name + "': its Unix user '" +
                                                  e->unix_user + "' no longer exists here");
            if (*uid == 0 && !e->admin)
                throw Error(ErrorCode::usage,
                            "token '" + e->name + "': a user token cannot be root's");
            return Identity{e->name, e->unix_user, e->admin, "token"};
        }
        throw Error(ErrorCode::usage, "the controller did not accept the token");
    }
    if (has_munge) {
        unsigned long uid = unmunge_uid(cred->get<std::string>(), a.munge_socket);
        auto name = user_of_uid(static_cast<uid_t>(uid));
        if (!name)
            throw Error(ErrorCode::usage, "the munge credential's uid " + std::to_string(uid) +
                                              " is no user on the controller's host");
        // Root on a host with the munge key can mint any user's credential:
        // it is the cluster's administrator already.
        return Identity{*name, *name, uid == 0, "munge"};
    }
    throw Error(ErrorCode::usage,
                "the controller requires a token (SANDWEAVE_WEAVE_TOKEN_FILE or "
                "~/.config/sandweave/weave_token, mode 0600) or, on a cluster host, a munge "
                "credential (--weave-munge)");
}

}  // namespace sandweave::controller
