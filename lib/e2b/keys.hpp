#pragma once
// The keys file: {"secret": HEX, "keys": [{"name": N, "sha256": HEX}]},
// 0600. A key is "e2b_" + 40 hex digits; only its sha256 is stored.

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace sandweave::e2b {

class Keys {
  public:
    // Reads the file; throws Error when it is missing or malformed.
    explicit Keys(const std::filesystem::path& path);
    // The identity holding `key`, if any (compared in constant time).
    std::optional<std::string> identity_of(const std::string& key) const;
    // The envd access token of sandbox `id` (HMAC-SHA256 under the secret).
    std::string token_for(const std::string& id) const;
    // Whether `token` is sandbox `id`'s (constant time).
    bool token_matches(const std::string& id, const std::string& token) const;

  private:
    std::string secret_;
    std::vector<std::pair<std::string, std::string>> keys_;  // name, sha256 hex
};

bool equal_constant_time(const std::string& a, const std::string& b);

}  // namespace sandweave::e2b
