#include "lib/e2b/keys.hpp"

#include <nettle/hmac.h>

#include <cstdlib>

#include <nlohmann/json.hpp>

#include "lib/core/error.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/sha256.hpp"
#include "lib/e2b/e2b.hpp"

namespace sandweave::e2b {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_keys_file(const fs::path& path) {
    std::string text = with_context("reading the E2B keys file " + path.string(),
                                    [&] { return read_file(path, 1u << 20); });
    json j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("secret") || !j["secret"].is_string() ||
        !j.contains("keys") || !j["keys"].is_array())
        throw Error(ErrorCode::usage, "E2B keys file " + path.string() +
                                          ": not a keys file (expected {\"secret\", \"keys\"})");
    for (const auto& k : j["keys"])
        if (!k.is_object() || !k.value("name", json()).is_string() ||
            !k.value("sha256", json()).is_string())
            throw Error(ErrorCode::usage,
                        "E2B keys file " + path.string() + ": a key without name or sha256");
    return j;
}

void write_keys_file(const fs::path& path, const json& j) {
    if (path.has_parent_path()) make_dirs(path.parent_path(), 0700);
    write_file_atomic(path, j.dump(2) + "\n", 0600);
}

json load_or_new(const fs::path& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return json{{"secret", random_hex(64)}, {"keys", json::array()}};
    return read_keys_file(path);
}

bool valid_identity(const std::string& n) {
    if (n.empty() || n.size() > 64) return false;
    for (char c : n)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'))
            return false;
    return true;
}

}  // namespace

bool equal_constant_time(const std::string& a, const std::string& b) {
    if (a.size() != b.size()) return false;
    unsigned char d = 0;
    for (std::size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
    return d == 0;
}

Keys::Keys(const fs::path& path) {
    json j = read_keys_file(path);
    secret_ = j["secret"].get<std::string>();
    if (secret_.size() < 32)
        throw Error(ErrorCode::usage,
                    "E2B keys file " + path.string() + ": the secret is too short");
    for (const auto& k : j["keys"])
        keys_.emplace_back(k["name"].get<std::string>(), k["sha256"].get<std::string>());
}

std::optional<std::string> Keys::identity_of(const std::string& key) const {
    std::string h = sha256_hex(key);
    std::optional<std::string> who;
    for (const auto& [name, hash] : keys_)
        if (equal_constant_time(h, hash)) who = name;
    return who;
}

std::string Keys::token_for(const std::string& id) const {
    hmac_sha256_ctx ctx;
    hmac_sha256_set_key(&ctx, secret_.size(),
                        reinterpret_cast<const std::uint8_t*>(secret_.data()));
    hmac_sha256_update(&ctx, id.size(), reinterpret_cast<const std::uint8_t*>(id.data()));
    std::uint8_t d[SHA256_DIGEST_SIZE];
    hmac_sha256_digest(&ctx, sizeof d, d);
    static const char* hex = "0123456789abcdef";
    std::string out = "swt_";
    for (std::uint8_t b : d) {
        out += hex[b >> 4];
        out += hex[b & 15];
    }
    return out;
}

bool Keys::token_matches(const std::string& id, const std::string& token) const {
    return equal_constant_time(token_for(id), token);
}

std::string add_key(const fs::path& path, const std::string& name) {
    if (!valid_identity(name))
        throw Error(ErrorCode::usage,
                    "e2b key '" + name + "': expected 1-64 letters, digits, '.', '_' or '-'");
    json j = load_or_new(path);
    for (const auto& k : j["keys"])
        if (k["name"] == name)
            throw Error(ErrorCode::usage, "e2b key '" + name + "' exists in " + path.string());
    std::string key = "e2b_" + random_hex(40);
    j["keys"].push_back({{"name", name}, {"sha256", sha256_hex(key)}});
    write_keys_file(path, j);
    return key;
}

std::vector<std::string> list_keys(const fs::path& path) {
    std::vector<std::string> out;
    for (const auto& k : read_keys_file(path)["keys"]) out.push_back(k["name"].get<std::string>());
    return out;
}

void remove_key(const fs::path& path, const std::string& name) {
    json j = read_keys_file(path);
    json kept = json::array();
    bool found = false;
    for (const auto& k : j["keys"]) {
        if (k["name"] == name)
            found = true;
        else
            kept.push_back(k);
    }
    if (!found)
        throw Error(ErrorCode::not_found, "e2b key '" + name + "' is not in " + path.string());
    j["keys"] = kept;
    write_keys_file(path, j);
}

fs::path default_keys_path() {
    if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x)
        return fs::path(x) / "sandweave" / "e2b_keys.json";
    const char* home = std::getenv("HOME");
    return fs::path(home && *home ? home : "/root") / ".config" / "sandweave" / "e2b_keys.json";
}

}  // namespace sandweave::e2b
