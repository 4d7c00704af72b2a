#pragma once
// Who a controller's client is (docs/weave.md, "Identities and tenants").
//
// Every connection presents one credential in `hello`:
//  - a token: one of the per-user tokens in the controller's directory
//    (`sandweave controller token add NAME`, kept as SHA-256 digests in
//    `tokens`, 0600), or the single token file of the first start, which is
//    the admin identity;
//  - a munge credential (`munge -n` on a cluster host), checked with
//    `unmunge`: munged checks its MAC, its time to live and that it was not
//    decoded before (replay), and the identity is the Unix user of its uid.
// An identity names the Unix user its sandboxes' Slurm jobs run as; that
// user owns them (tenancy is by Unix user), and an admin identity sees
// everyone's.
//
// The controller's API is one object shared by every connection; the
// identity of the request being served is the calling thread's (CallerScope,
// set by the connection's CallerApi for the length of each call). A thread
// of the controller's own (the watcher, pool refills) acts as the controller,
// which sees everything.

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lib/api/api.hpp"

namespace sandweave::controller {

struct Identity {
    std::string name;       // a token's name, or the munge user's name
    std::string unix_user;  // whose Slurm jobs its sandboxes are
    bool admin = false;     // sees and acts on everyone's objects
    std::string how;        // "token", "munge" or "controller"

    // Whether this identity may see an object owned by Unix user `owner`.
    bool sees(const std::string& owner) const { return admin || owner == unix_user; }
};

// The identity of the call this thread serves; the controller itself when none.
const Identity& caller();

// Makes `who` the caller on this thread until destroyed.
class CallerScope {
  public:
    explicit CallerScope(const Identity& who);
    ~CallerScope();
    CallerScope(const CallerScope&) = delete;
    CallerScope& operator=(const CallerScope&) = delete;

  private:
    const Identity* before_;
};

// The user this process runs as (the owner of jobs submitted without --uid).
std::string own_unix_user();

// Root editing the tokens of a controller that runs as another user (the
// owner of its directory) does it as that user: what it writes stays
// readable by the controller, and an admin token's default user is the
// controller's. Nothing for any other caller or a directory of root's.
void act_as_owner_of(const std::filesystem::path& controller_dir);

// The per-user tokens in `<controller dir>/tokens`: one line per token,
// `NAME SHA256 UNIX_USER admin|user`, the file 0600 and replaced atomically
// under `tokens.lock`.
struct TokenEntry {
    std::string name;
    std::string sha256;  // of the token, lowercase hex
    std::string unix_user;
    bool admin = false;
};

class TokenStore {
  public:
    explicit TokenStore(std::filesystem::path controller_dir);
    // A new token for NAME (printed once by the caller; only its digest is
    // kept). `unix_user` must exist on this host; empty: NAME for a user
    // token, this process's user for an admin one. Throws usage when NAME
    // exists or is not a valid name.
    std::string add(const std::string& name, bool admin, std::string unix_user);
    std::vector<TokenEntry> list() const;
    // Throws not_found when there is no such token.
    void remove(const std::string& name);
    // The entry whose digest matches `token` (constant-time compares).
    std::optional<TokenEntry> match(const std::string& token) const;

  private:
    std::filesystem::path file_, lock_;
};

// How a controller tells its clients apart.
struct Authenticator {
    std::filesystem::path controller_dir;  // `tokens` lives here
    std::string admin_token_sha256;        // the single token file's digest
    std::string munge_socket;              // empty: munged's default socket
};

// The identity `hello`'s params prove (`token` or `munge`), or throws
// Error(usage) with the one line the client is refused with.
Identity authenticate(const Authenticator& a, const nlohmann::json& hello_params);

// The uid a munge credential carries, checked by `unmunge` (argv; the
// credential on its stdin): throws Error(usage) with munge's reason when it
// is invalid, expired, replayed or from an unknown key.
unsigned long unmunge_uid(const std::string& credential, const std::string& socket);

// The connection's view of the controller's API: every call runs as `who`.
std::unique_ptr<api::Api> as_caller(api::Api& controller, Identity who);

}  // namespace sandweave::controller
