// The controller's TLS listener: credentials made at first start, the
// client's identity proved in hello (lib/controller/identity.hpp), then the
// protocol (lib/rpc/server.hpp) over the session, as that identity.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "lib/controller/controller.hpp"
#include "lib/controller/identity.hpp"
#include "lib/core/error.hpp"
#include "lib/core/fd.hpp"
#include "lib/core/fsutil.hpp"
#include "lib/core/json_input.hpp"
#include "lib/core/log.hpp"
#include "lib/core/sha256.hpp"
#include "lib/rpc/jsonrpc.hpp"
#include "lib/rpc/server.hpp"
#include "lib/rpc/tls.hpp"

namespace sandweave::controller {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string tls_error(const std::string& what) {
    return what + ": " + rpc::openssl_error();
}

// A new EC P-256 key and a self-signed certificate for it (ten years: the
// client pins the certificate itself, so its dates are not what protects it).
void make_credentials(const fs::path& cert_path, const fs::path& key_path) {
    EVP_PKEY* key = EVP_EC_gen("P-256");
    if (!key) throw Error(ErrorCode::general, tls_error("generating the controller's key"));
    X509* x = X509_new();
    ASN1_INTEGER_set(X509_get_serialNumber(x), static_cast<long>(::time(nullptr)));
    X509_gmtime_adj(X509_getm_notBefore(x), -3600);
    X509_gmtime_adj(X509_getm_notAfter(x), 10L * 365 * 24 * 3600);
    X509_set_pubkey(x, key);
    X509_NAME* name = X509_get_subject_name(x);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("sandweave controller"), -1,
                               -1, 0);
    X509_set_issuer_name(x, name);
    bool ok = X509_sign(x, key, EVP_sha256()) > 0;
    std::string key_pem, cert_pem;
    if (ok) {
        BIO* kb = BIO_new(BIO_s_mem());
        BIO* cb = BIO_new(BIO_s_mem());
        ok = PEM_write_bio_PrivateKey(kb, key, nullptr, nullptr, 0, nullptr, nullptr) &&
             PEM_write_bio_X509(cb, x);
        char* data = nullptr;
        long n = BIO_get_mem_data(kb, &data);
        key_pem.assign(data, static_cast<std::size_t>(n));
        n = BIO_get_mem_data(cb, &data);
        cert_pem.assign(data, static_cast<std::size_t>(n));
        BIO_free(kb);
        BIO_free(cb);
    }
    X509_free(x);
    EVP_PKEY_free(key);
    if (!ok) throw Error(ErrorCode::general, tls_error("making the controller's certificate"));
    write_file_atomic(key_path, key_pem, 0600);
    write_file_atomic(cert_path, cert_pem, 0600);
}

struct Listener {
    Fd fd;
    std::string address;
};

Listener listen_on(const std::string& where) {
    auto colon = where.rfind(':');
    if (colon == std::string::npos || colon == 0)
        throw Error(ErrorCode::usage, "--listen '" + where + "': expected HOST:PORT");
    std::string host = where.substr(0, colon), port = where.substr(colon + 1);
    if (host.size() > 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    addrinfo* res = nullptr;
    if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0)
        throw Error(ErrorCode::usage, "--listen '" + where + "': " + ::gai_strerror(rc));
    std::string last;
    for (addrinfo* a = res; a; a = a->ai_next) {
        Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
        int one = 1;
        ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (s.valid() && ::bind(s.get(), a->ai_addr, a->ai_addrlen) == 0 &&
            ::listen(s.get(), 128) == 0) {
            ::freeaddrinfo(res);
            return {std::move(s), where};
        }
        last = std::strerror(errno);
    }
    ::freeaddrinfo(res);
    throw Error(ErrorCode::general, "cannot listen on " + where + ": " + last);
}

struct Shared {
    api::Api& api;
    SSL_CTX* ctx;
    Authenticator auth;
    rpc::ServeOptions serve;
    std::size_t max_connections;
    std::atomic<std::size_t> live{0};      // connections being served
    std::atomic<std::size_t> refusing{0};  // connections past the limit being told so
};

// A connection past the limit is told why, by as few threads as that takes:
// past this many at once, it is closed without a word.
constexpr std::size_t max_refusing = 32;

// The first line, read before anything is served: at most 64 KiB.
std::optional<std::string> first_line(SSL* ssl, std::string& rest) {
    std::string buf;
    char chunk[4096];
    while (buf.size() < (64u << 10)) {
        int n = SSL_read(ssl, chunk, sizeof chunk);
        if (n <= 0) return std::nullopt;
        buf.append(chunk, static_cast<std::size_t>(n));
        if (auto nl = buf.find('\n'); nl != std::string::npos) {
            rest = buf.substr(nl + 1);
            return buf.substr(0, nl);
        }
    }
    return std::nullopt;
}

void refuse(SSL* ssl, const json& id, const std::string& why) {
    std::string line = rpc::encode_error(id, rpc::code::peer_not_allowed, why) + "\n";
    SSL_write(ssl, line.data(), static_cast<int>(line.size()));
    SSL_shutdown(ssl);
}

struct SslFree {
    void operator()(SSL* s) const { SSL_free(s); }
};
using Ssl = std::unique_ptr<SSL, SslFree>;

// The server side of a TLS session on `sock`, whose reads (and writes, with
// `both_ways`) time out after `timeout`; null when the handshake fails.
Ssl tls_session(Shared& sh, int sock, timeval timeout, bool both_ways) {
    Ssl ssl(SSL_new(sh.ctx));
    if (!ssl) return nullptr;
    ::setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    if (both_ways) ::setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
    SSL_set_fd(ssl.get(), sock);
    if (SSL_accept(ssl.get()) != 1) return nullptr;
    return ssl;
}

// The client's first request (null when it is not JSON) and its id; nullopt
// when no line came. What follows the line is left in `rest`.
std::optional<std::pair<json, json>> first_request(SSL* ssl, std::string& rest) {
    auto line = first_line(ssl, rest);
    if (!line) return std::nullopt;
    json req, id;
    try {
        req = parse_untrusted_json(*line);
        if (req.is_object() && req.contains("id")) id = req["id"];
    } catch (const std::exception&) {
    }
    return std::make_pair(std::move(req), std::move(id));
}

// Tells a client past the connection limit why it is refused: in its TLS
// session, as the answer to its hello, within two seconds.
void refuse_busy(Shared& sh, Fd sock) {
    Ssl ssl = tls_session(sh, sock.get(), timeval{2, 0}, true);
    if (!ssl) return;
    std::string rest;
    auto first = first_request(ssl.get(), rest);
    std::string line =
        rpc::encode_error(first ? first->second : json(), rpc::code::server_busy,
                          "controller busy: it serves at most " +
                              std::to_string(sh.max_connections) +
                              " connections at once; try again once one has closed") +
        "\n";
    SSL_write(ssl.get(), line.data(), static_cast<int>(line.size()));
    SSL_shutdown(ssl.get());
}

void handle(Shared& sh, Fd sock, std::string peer) {
    // A peer that says nothing does not hold a thread for long.
    Ssl session = tls_session(sh, sock.get(), timeval{10, 0}, false);
    if (!session) {
        log().debug("controller: " + peer + ": TLS handshake failed: " + rpc::openssl_error());
        return;
    }
    SSL* ssl = session.get();
    std::string rest;
    auto first = first_request(ssl, rest);
    if (!first) return;
    auto& [req, id] = *first;
    const json* params = req.is_object() && req.value("method", std::string()) == "hello" &&
                                 req.contains("params") && req["params"].is_object()
                             ? &req["params"]
                             : nullptr;
    if (!params) {
        log().info("controller: " + peer + ": refused (did not start with hello)");
        return refuse(ssl, id, "the controller needs hello with a token first");
    }
    std::optional<Identity> who;
    try {
        who = authenticate(sh.auth, *params);
    } catch (const std::exception& e) {
        log().info("controller: " + peer + ": refused (" + e.what() + ")");
        return refuse(ssl, id, e.what());
    }
    log().debug("controller: " + peer + ": " + who->name + " (" + who->how + ", Unix user " +
                who->unix_user + (who->admin ? ", admin" : "") + ")");
    auto api = as_caller(sh.api, *who);
    req["params"].erase("token");
    req["params"].erase("munge");
    std::string forwarded = req.dump() + "\n" + rest;
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return;
    Fd server_end(sv[0]), pump_end(sv[1]);
    if (!write_all(pump_end.get(), forwarded)) return;
    timeval none{0, 0};
    ::setsockopt(sock.get(), SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    std::thread serving([&] {
        rpc::serve_connection(*api, server_end.get(), server_end.get(), -1, sh.serve);
        ::shutdown(server_end.get(), SHUT_RDWR);
    });
    rpc::tls_pump(ssl, sock.get(), pump_end.get());
    ::shutdown(pump_end.get(), SHUT_RDWR);
    serving.join();
}

}  // namespace

void serve_controller(api::Api& api, const ControllerOptions& o, int stop_fd) {
    make_dirs(o.state_dir, 0700);
    ::chmod(o.state_dir.c_str(), 0700);
    fs::path cert = o.cert.empty() ? o.state_dir / "controller.crt" : o.cert;
    fs::path key = o.key.empty() ? o.state_dir / "controller.key" : o.key;
    fs::path token = o.token_file.empty() ? o.state_dir / "token" : o.token_file;
    if (o.cert.empty() != o.key.empty())
        throw Error(ErrorCode::usage, "controller: give both --cert and --key, or neither");
    if (o.cert.empty() && (!fs::exists(cert) || !fs::exists(key))) {
        make_credentials(cert, key);
        log().info("controller: made a new certificate: " + cert.string());
    }
    if (!fs::exists(token)) write_file_atomic(token, random_hex(64) + "\n", 0600);
    struct stat st {};
    if (::stat(token.c_str(), &st) != 0 || (st.st_mode & 077))
        throw Error(ErrorCode::usage,
                    "controller: the token file " + token.string() + " must be mode 0600");
    std::string tok = read_file(token, 4096);
    while (!tok.empty() && (tok.back() == '\n' || tok.back() == ' ')) tok.pop_back();
    if (tok.empty()) throw Error(ErrorCode::usage, "controller: the token file is empty");

    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) throw Error(ErrorCode::general, tls_error("TLS"));
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    if (SSL_CTX_use_certificate_file(ctx, cert.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1)
        throw Error(ErrorCode::usage, tls_error("controller: the certificate or key " +
                                                cert.string() + " / " + key.string()));
    std::string fp = rpc::cert_fingerprint(SSL_CTX_get0_certificate(ctx));
    write_file_atomic(o.state_dir / "fingerprint", fp + "\n", 0644);

    Listener l = listen_on(o.listen);
    ::signal(SIGPIPE, SIG_IGN);
    // Each connection holds three descriptors: take the hard limit, not the
    // soft one (1024 under systemd) that would bind long before the
    // connection limit does.
    rlimit nofile{};
    if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &nofile);
    }
    auto* sh = new Shared{api,
                          ctx,
                          Authenticator{o.state_dir, sha256_hex(tok), o.munge_socket},
                          {o.server_name, {}},
                          o.max_connections};
    // What is not routed yet is neither listed nor served (docs/weave.md).
    sh->serve.without = {"audit.export"};
    sh->serve.controller = true;
    log().info("controller: listening on " + l.address + " (TLS), certificate " + fp);
    for (;;) {
        pollfd p[2] = {{l.fd.get(), POLLIN, 0}, {stop_fd, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            throw_errno("poll");
        }
        if (p[1].revents) break;
        sockaddr_storage addr{};
        socklen_t len = sizeof addr;
        Fd c(::accept4(l.fd.get(), reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC));
        if (!c.valid()) {
            // Out of descriptors or memory: the peer stays in the backlog, and
            // poll would report it again at once; wait for a connection to end.
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                ::poll(nullptr, 0, 100);
            continue;
        }
        // Small writes (handshake records, one JSON line) go out at once, not
        // after the peer's delayed ACK (40 ms).
        int one = 1;
        ::setsockopt(c.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        char host[NI_MAXHOST] = "?", serv[NI_MAXSERV] = "?";
        ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                      NI_NUMERICHOST | NI_NUMERICSERV);
        std::string peer = std::string(host) + ":" + serv;
        // Counted here, before the thread, so a burst cannot overshoot.
        bool over = sh->live.fetch_add(1) >= sh->max_connections;
        if (over) {
            sh->live.fetch_sub(1);
            if (sh->refusing.fetch_add(1) >= max_refusing) {
                sh->refusing.fetch_sub(1);
                continue;  // closes it
            }
            log().debug("controller: " + peer + ": refused (at the connection limit)");
        }
        try {
            std::thread([sh, fd = std::move(c), peer, over]() mutable {
                sigset_t all;
                sigfillset(&all);
                ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
                if (over) {
                    refuse_busy(*sh, std::move(fd));
                    sh->refusing.fetch_sub(1);
                } else {
                    handle(*sh, std::move(fd), peer);
                    sh->live.fetch_sub(1);
                }
            }).detach();
        } catch (const std::system_error& e) {
            (over ? sh->refusing : sh->live).fetch_sub(1);
            log().warn("controller: " + peer + ": refused: cannot start a thread: " + e.what());
        }
    }
    log().info("controller: stopping");
    // Connections still open end with the process; their workers' serve
    // sees EOF and the sandboxes stay.
}

}  // namespace sandweave::controller
