#pragma once
// `sandweave e2b`: an E2B-compatible HTTP API over any Api (docs/e2b.md).
//
// One cpp-httplib server serves both of E2B's planes on one address: the
// control plane (POST /v2/sandboxes, GET /v2/sandboxes, ...; X-API-KEY) and
// envd's data plane (Connect RPC with JSON for process.Process and
// filesystem.Filesystem, /files, /health), which the E2B SDK sends to the same
// URL for every sandbox and routes by the E2b-Sandbox-Id header. Every
// operation goes through the Api it is given, so it serves a local state
// directory as it serves ssh:// and weave:// workers.
//
// Identities: each API key (kept hashed in the keys file) is one identity;
// a sandbox is labelled with its owner and is invisible (404) to any other.
// Each sandbox has its own envd access token, an HMAC of its id under the
// keys file's secret, so one sandbox's token never opens another.

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>

#include "lib/api/api.hpp"

namespace sandweave::e2b {

struct ServeOptions {
    std::string host = "127.0.0.1";
    int port = 3000;
    std::filesystem::path keys;  // the keys file (see add_key)
    std::size_t threads = 64;    // connections served at once
    // A keep-alive connection waiting for its next request is closed after
    // idle_timeout; any read or write waits at most io_timeout, and past it
    // a request body must average 1 KiB/s (lib/e2b/connections.hpp).
    std::chrono::milliseconds idle_timeout{15000};
    std::chrono::milliseconds io_timeout{30000};
    std::size_t max_body = 1u << 20;                // an API or RPC request body
    std::size_t max_upload = std::size_t{1} << 32;  // a /files upload
    // Called once the socket listens, with the port (useful with port 0).
    std::function<void(int port)> on_listening;
};

// Serves until stop_fd becomes readable. Throws Error when it cannot listen
// or the keys file is unusable.
void serve(api::Api& api, const ServeOptions& o, int stop_fd);

// Adds identity `name` to the keys file (created 0600 with a fresh secret
// when missing) and returns its new API key, which is stored only hashed.
// Throws Error(usage) when the name is taken or not a valid name.
std::string add_key(const std::filesystem::path& keys, const std::string& name);
// The identities in the keys file.
std::vector<std::string> list_keys(const std::filesystem::path& keys);
// Removes an identity (its sandboxes stay, reachable by nobody through e2b).
void remove_key(const std::filesystem::path& keys, const std::string& name);

// The default keys file: $XDG_CONFIG_HOME/sandweave/e2b_keys.json (or
// ~/.config/...).
std::filesystem::path default_keys_path();

}  // namespace sandweave::e2b
