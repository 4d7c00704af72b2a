#pragma once
// The ssh:// connection: a libssh session to a worker that runs
// `sandweave serve --stdio` there, bridged to a local socket so RpcClient
// speaks the protocol over it as over any other stream.
//
// Authentication and host keys behave as OpenSSH users expect: ssh-agent and
// the default identities (~/.ssh/id_*) or an explicit identity file;
// ~/.ssh/config's Host aliases, User, Port and IdentityFile (as far as libssh
// reads them); the host key checked against known_hosts. An unknown key is
// refused with its SHA256 fingerprint and how to accept it; a changed key is
// refused loudly. One session per client process.
//
// libssh sessions are not thread-safe, so one pump thread owns the session:
// it moves bytes between the channel and the socket's other end, and copies
// the worker's stderr (serve's own diagnostics) to ours.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "lib/core/fd.hpp"

namespace sandweave::rpc {

struct SshTarget {
    std::string user;  // empty: from ~/.ssh/config, else the local user
    std::string host;
    int port = 0;  // 0: from ~/.ssh/config, else 22
    std::string url() const;
};

// "ssh://[user@]host[:port]"; throws Error(usage) for anything else.
SshTarget parse_ssh_url(const std::string& url);

struct SshOptions {
    std::string remote_binary = "sandweave";
    std::optional<std::string> identity;     // a private key file
    std::optional<std::string> known_hosts;  // instead of ~/.ssh/known_hosts
    std::optional<std::string> config;       // instead of ~/.ssh/config
    bool accept_new_host_key = false;        // add an unknown key (never a changed one)
    std::chrono::seconds connect_timeout{10};
};

class SshConnection {
  public:
    // Connects, checks the host key, authenticates and starts the remote
    // serve. Throws Error(connection) with one line saying what failed.
    SshConnection(const SshTarget& target, const SshOptions& opts);
    ~SshConnection();
    SshConnection(const SshConnection&) = delete;
    SshConnection& operator=(const SshConnection&) = delete;

    // Our end of the bridged stream (read and write), handed out once.
    Fd take_stream();

    // The remote command's exit status once the channel has closed (127: the
    // worker's shell did not find sandweave).
    std::optional<int> remote_exit_status() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The shell-safe single-quoted form of `word` (for the one command line an
// SSH exec request carries).
std::string shell_quote(const std::string& word);

}  // namespace sandweave::rpc
