#pragma once
// The weave:// connection: TLS (OpenSSL) to a `sandweave controller`,
// bridged to a local socket so RpcClient speaks the protocol over it as over
// any other stream (as ssh.hpp does for ssh://).
//
// The controller's certificate is checked as OpenSSH checks host keys: its
// SHA-256 fingerprint is pinned, given explicitly (--weave-fingerprint,
// SANDWEAVE_WEAVE_FINGERPRINT) or found in ~/.config/sandweave/
// weave_known_hosts ("HOST:PORT sha256:HEX" lines). An unknown certificate is
// refused with its fingerprint and how to accept it, a changed one loudly.
// The client's token (SANDWEAVE_WEAVE_TOKEN_FILE, else
// ~/.config/sandweave/weave_token; a file only its owner may read) travels in
// the hello request (docs/protocol.md); on a cluster host without a token, a
// munge credential does (the controller checks it with unmunge).
//
// One pump thread per connection owns the TLS session and moves bytes between
// it and the local socket; tls_pump is that loop, shared with the controller.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "lib/core/fd.hpp"

struct ssl_st;
struct x509_st;

namespace sandweave::rpc {

inline constexpr int weave_default_port = 7443;
inline constexpr const char* default_munge_socket = "/run/munge/munge.socket.2";

struct WeaveTarget {
    std::string host;
    int port = weave_default_port;
    std::string url() const;  // weave://host:port
};

// "weave://host[:port]"; throws Error(usage) for anything else.
WeaveTarget parse_weave_url(const std::string& url);

struct WeaveOptions {
    std::optional<std::string> fingerprint;  // pinned: sha256:HEX (colons and case ignored)
    std::optional<std::string> known_hosts;  // instead of ~/.config/sandweave/weave_known_hosts
    std::optional<std::string> token_file;   // instead of the environment's or the default
    bool accept_new = false;                 // add an unknown certificate (never a changed one)
    // Present a munge credential (`munge -n`) instead of a token. Without
    // it, one is presented when no token is configured and munged's socket
    // (munge_socket, SANDWEAVE_WEAVE_MUNGE_SOCKET, else munged's default) exists.
    bool munge = false;
    std::optional<std::string> munge_socket;
    std::chrono::seconds connect_timeout{10};
};

class TlsConnection {
  public:
    // Connects, checks the certificate and reads the token. Throws
    // Error(connection) with one line saying what failed.
    TlsConnection(const WeaveTarget& target, const WeaveOptions& opts);
    ~TlsConnection();
    TlsConnection(const TlsConnection&) = delete;
    TlsConnection& operator=(const TlsConnection&) = delete;

    // Our end of the bridged stream, handed out once.
    Fd take_stream();
    // The token to present in hello; empty when there is none.
    const std::string& token() const;
    // The munge credential to present instead; empty when there is none.
    const std::string& munge() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// "sha256:" and the lowercase hex SHA-256 of the certificate's DER encoding
// (`openssl x509 -noout -fingerprint -sha256` shows the same digits).
std::string cert_fingerprint(x509_st* cert);
// A fingerprint as a user may write it, in that form; nullopt if it is not one.
std::optional<std::string> normalize_fingerprint(const std::string& text);

// The last OpenSSL error as text (for messages).
std::string openssl_error();

// Moves bytes both ways between an established TLS session on `sock` and the
// local stream `local` until either side closes; both descriptors are made
// non-blocking. Returns after sending close_notify (or when the peer is gone).
void tls_pump(ssl_st* ssl, int sock, int local);

}  // namespace sandweave::rpc
