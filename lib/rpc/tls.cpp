#include "lib/rpc/tls.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "lib/core/error.hpp"
#include "lib/core/process.hpp"

namespace sandweave::rpc {

namespace fs = std::filesystem;

std::string WeaveTarget::url() const {
    return "weave://" + host + ":" + std::to_string(port);
}

WeaveTarget parse_weave_url(const std::string& url) {
    const std::string scheme = "weave://";
    auto bad = [&](const std::string& why) {
        return Error(ErrorCode::usage, "--host '" + url + "': " + why);
    };
    if (url.rfind(scheme, 0) != 0) throw bad("expected weave://HOST[:PORT]");
    std::string rest = url.substr(scheme.size());
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    WeaveTarget t;
    auto colon = rest.rfind(':');
    if (colon != std::string::npos && rest.find(']') == std::string::npos) {
        std::string port = rest.substr(colon + 1);
        rest.resize(colon);
        if (port.empty() || port.size() > 5 ||
            !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
            throw bad("the port must be a number");
        t.port = std::stoi(port);
        if (t.port < 1 || t.port > 65535) throw bad("the port must be between 1 and 65535");
    }
    if (rest.empty() || rest.find_first_of("/@ ") != std::string::npos)
        throw bad("expected weave://HOST[:PORT]");
    t.host = rest;
    return t;
}

std::string openssl_error() {
    unsigned long e = ERR_get_error();
    if (!e) return "unknown TLS error";
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    return buf;
}

std::string cert_fingerprint(X509* cert) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!X509_digest(cert, EVP_sha256(), md, &n)) return "";
    static const char hex[] = "0123456789abcdef";
    std::string out = "sha256:";
    for (unsigned i = 0; i < n; ++i) {
        out += hex[md[i] >> 4];
        out += hex[md[i] & 15];
    }
    return out;
}

std::optional<std::string> normalize_fingerprint(const std::string& text) {
    std::string s = text;
    auto eq = s.rfind('=');  // "sha256 Fingerprint=AB:CD..." from openssl x509
    if (eq != std::string::npos) s = s.substr(eq + 1);
    std::string lower;
    for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.rfind("sha256:", 0) == 0) lower = lower.substr(7);
    std::string hex;
    for (char c : lower) {
        if (c == ':') continue;
        if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
        hex += c;
    }
    if (hex.size() != 64) return std::nullopt;
    return "sha256:" + hex;
}

namespace {

fs::path config_dir() {
    if (const char* x = std::getenv("XDG_CONFIG_HOME"); x && *x) return fs::path(x) / "sandweave";
    const char* home = std::getenv("HOME");
    if (!home || !*home) {
        const passwd* pw = ::getpwuid(::getuid());
        home = pw ? pw->pw_dir : "/";
    }
    return fs::path(home) / ".config" / "sandweave";
}

// The token: at most 4 KiB, surrounding whitespace dropped; the file must be
// readable by its owner only, as ssh insists for a private key.
std::string read_token(const fs::path& file, const std::string& peer, bool explicit_file) {
    Fd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
        if (errno == ENOENT && !explicit_file) return "";
        throw Error(ErrorCode::connection, peer + ": cannot read the token file " + file.string() +
                                               ": " + std::strerror(errno));
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
        throw Error(ErrorCode::connection,
                    peer + ": the token file " + file.string() + " is not a regular file");
    if (st.st_mode & 077)
        throw Error(ErrorCode::connection,
                    peer + ": the token file " + file.string() +
                        " may be read by others; chmod 600 it (a token is a password)");
    std::string tok(4097, '\0');
    ssize_t n = ::read(fd.get(), tok.data(), tok.size());
    if (n < 0 || n > 4096)
        throw Error(ErrorCode::connection,
                    peer + ": the token file " + file.string() + " is unreadable or over 4 KiB");
    tok.resize(static_cast<std::size_t>(n));
    auto first = tok.find_first_not_of(" \t\r\n");
    auto last = tok.find_last_not_of(" \t\r\n");
    return first == std::string::npos ? "" : tok.substr(first, last - first + 1);
}

Fd connect_tcp(const WeaveTarget& t, std::chrono::seconds timeout) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    std::string port = std::to_string(t.port);
    if (int rc = ::getaddrinfo(t.host.c_str(), port.c_str(), &hints, &res); rc != 0)
        throw Error(ErrorCode::connection,
                    t.url() + ": cannot resolve " + t.host + ": " + ::gai_strerror(rc));
    std::string last = "no address";
    for (addrinfo* a = res; a; a = a->ai_next) {
        Fd s(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
        if (!s.valid()) continue;
        if (::connect(s.get(), a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            last = std::strerror(errno);
            continue;
        }
        pollfd p{s.get(), POLLOUT, 0};
        int rc = ::poll(&p, 1, static_cast<int>(timeout.count() * 1000));
        int err = 0;
        socklen_t len = sizeof err;
        if (rc <= 0) {
            last = "timed out";
            continue;
        }
        ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            last = std::strerror(err);
            continue;
        }
        // Requests are small lines: send each at once (no Nagle delay).
        int one = 1;
        ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        int flags = ::fcntl(s.get(), F_GETFL);
        ::fcntl(s.get(), F_SETFL, flags & ~O_NONBLOCK);
        ::freeaddrinfo(res);
        return s;
    }
    ::freeaddrinfo(res);
    throw Error(ErrorCode::connection, t.url() + ": cannot connect: " + last +
                                           " (is `sandweave controller` running there?)");
}

// The pinned fingerprint for `key` ("host:port") in a known-hosts file, with its line.
std::optional<std::pair<std::string, int>> known_fingerprint(const fs::path& file,
                                                             const std::string& key) {
    std::ifstream in(file);
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
        std::istringstream words(line);
        std::string k, fp;
        if (!(words >> k >> fp) || k[0] == '#' || k != key) continue;
        if (auto norm = normalize_fingerprint(fp)) return std::make_pair(*norm, n);
    }
    return std::nullopt;
}

bool on_path(const std::string& program) {
    const char* path = std::getenv("PATH");
    std::istringstream dirs(path ? path : "/usr/bin:/bin");
    std::string d;
    while (std::getline(dirs, d, ':'))
        if (!d.empty() && ::access((fs::path(d) / program).c_str(), X_OK) == 0) return true;
    return false;
}

// A `munge -n` credential (no payload) when asked for, or when no token is
// configured and this is a cluster host (munge and munged's socket are
// here); empty otherwise.
std::string munge_credential(const WeaveOptions& o, const std::string& peer) {
    std::string socket = o.munge_socket.value_or("");
    if (socket.empty())
        if (const char* env = std::getenv("SANDWEAVE_WEAVE_MUNGE_SOCKET"); env && *env)
            socket = env;
    if (!o.munge) {
        std::error_code ec;
        if (!on_path("munge") ||
            !fs::exists(socket.empty() ? std::string(default_munge_socket) : socket, ec))
            return "";
    }
    Command c;
    c.argv = {"munge", "--no-input"};
    if (!socket.empty()) c.argv.push_back("--socket=" + socket);
    c.timeout = std::chrono::seconds(10);
    CommandResult r = LocalRunner().run(c);
    std::string cred = r.out;
    while (!cred.empty() && (cred.back() == '\n' || cred.back() == ' ')) cred.pop_back();
    if (!r.ok() || cred.empty() || cred.size() > 4096)
        throw Error(ErrorCode::connection,
                    peer + ": no token is configured and `munge -n` failed: " + r.describe());
    return cred;
}

}  // namespace

struct TlsConnection::Impl {
    SSL_CTX* ctx = nullptr;
    SSL* ssl = nullptr;
    Fd sock, ours, theirs;
    std::string token, munge;
    std::thread pump;
    ~Impl() {
        ours.reset();  // the pump sees EOF and ends the session
        if (pump.joinable()) pump.join();
        if (ssl) SSL_free(ssl);
        if (ctx) SSL_CTX_free(ctx);
    }
};

TlsConnection::TlsConnection(const WeaveTarget& t, const WeaveOptions& o)
    : impl_(std::make_unique<Impl>()) {
    const std::string peer = t.url();
    // The token first: a missing or unsafe file needs no network to report.
    if (o.munge)
        ;  // a munge credential instead, made below
    else if (o.token_file)
        impl_->token = read_token(*o.token_file, peer, true);
    else if (const char* env = std::getenv("SANDWEAVE_WEAVE_TOKEN_FILE"); env && *env)
        impl_->token = read_token(env, peer, true);
    else
        impl_->token = read_token(config_dir() / "weave_token", peer, false);

    ::signal(SIGPIPE, SIG_IGN);
    impl_->sock = connect_tcp(t, o.connect_timeout);
    timeval tv{static_cast<time_t>(o.connect_timeout.count()), 0};
    ::setsockopt(impl_->sock.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    impl_->ctx = SSL_CTX_new(TLS_client_method());
    if (!impl_->ctx) throw Error(ErrorCode::connection, peer + ": TLS: " + openssl_error());
    SSL_CTX_set_min_proto_version(impl_->ctx, TLS1_2_VERSION);
    // Verification is the pinned fingerprint below, not a CA chain.
    SSL_CTX_set_verify(impl_->ctx, SSL_VERIFY_NONE, nullptr);
    impl_->ssl = SSL_new(impl_->ctx);
    if (!impl_->ssl) throw Error(ErrorCode::connection, peer + ": TLS: " + openssl_error());
    SSL_set_fd(impl_->ssl, impl_->sock.get());
    SSL_ctrl(impl_->ssl, SSL_CTRL_SET_TLSEXT_HOSTNAME, TLSEXT_NAMETYPE_host_name,
             const_cast<char*>(t.host.c_str()));
    if (SSL_connect(impl_->ssl) != 1)
        throw Error(ErrorCode::connection, peer + ": TLS handshake failed: " + openssl_error() +
                                               " (is it a sandweave controller?)");
    X509* cert = SSL_get1_peer_certificate(impl_->ssl);
    if (!cert) throw Error(ErrorCode::connection, peer + ": the controller sent no certificate");
    std::string fp = cert_fingerprint(cert);
    X509_free(cert);

    const std::string key = t.host + ":" + std::to_string(t.port);
    std::optional<std::string> pinned = o.fingerprint;
    if (!pinned)
        if (const char* env = std::getenv("SANDWEAVE_WEAVE_FINGERPRINT"); env && *env) pinned = env;
    if (pinned) {
        auto want = normalize_fingerprint(*pinned);
        if (!want)
            throw Error(ErrorCode::usage,
                        "--weave-fingerprint '" + *pinned + "': expected sha256:<64 hex digits>");
        if (*want != fp)
            throw Error(ErrorCode::connection,
                        peer + ": THE CONTROLLER'S CERTIFICATE IS NOT THE PINNED ONE: it is " + fp +
                            ", pinned " + *want +
                            "; someone may be intercepting the connection (refusing)");
    } else {
        fs::path known =
            o.known_hosts ? fs::path(*o.known_hosts) : config_dir() / "weave_known_hosts";
        if (auto k = known_fingerprint(known, key)) {
            if (k->first != fp)
                throw Error(ErrorCode::connection,
                            peer + ": THE CONTROLLER'S CERTIFICATE HAS CHANGED: it is " + fp +
                                ", " + known.string() + ":" + std::to_string(k->second) + " has " +
                                k->first +
                                "; someone may be intercepting the connection, or the "
                                "certificate was replaced (then remove that line) (refusing)");
        } else if (o.accept_new) {
            std::error_code ec;
            fs::create_directories(known.parent_path(), ec);
            std::ofstream out(known, std::ios::app);
            out << key << ' ' << fp << '\n';
            if (!out)
                throw Error(ErrorCode::connection, peer + ": cannot add to " + known.string());
        } else {
            throw Error(ErrorCode::connection,
                        peer + ": unknown controller certificate " + fp +
                            "; if that is the controller's (it prints it at start), pin it with "
                            "--weave-fingerprint " +
                            fp + " or accept it with --accept-new-host-key");
        }
    }
    // Made only for a controller whose certificate checked out: the
    // credential proves who we are to whoever decodes it within its TTL.
    if (impl_->token.empty()) impl_->munge = munge_credential(o, peer);
    timeval none{0, 0};
    ::setsockopt(impl_->sock.get(), SOL_SOCKET, SO_RCVTIMEO, &none, sizeof none);
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw_errno("socketpair");
    impl_->ours.reset(sv[0]);
    impl_->theirs.reset(sv[1]);
    impl_->pump = std::thread([this] {
        sigset_t all;
        sigfillset(&all);
        ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
        tls_pump(impl_->ssl, impl_->sock.get(), impl_->theirs.get());
        impl_->theirs.reset();
    });
}

TlsConnection::~TlsConnection() = default;

Fd TlsConnection::take_stream() {
    return std::move(impl_->ours);
}

const std::string& TlsConnection::token() const {
    return impl_->token;
}

const std::string& TlsConnection::munge() const {
    return impl_->munge;
}

void tls_pump(SSL* ssl, int sock, int local) {
    for (int fd : {sock, local}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    constexpr std::size_t cap = 256u << 10;
    std::string to_local, to_tls;
    std::size_t retry_len = 0;  // an SSL_write to repeat with the same length
    bool tls_eof = false, local_eof = false;
    char buf[16384];
    for (;;) {
        bool want_write = false;
        // TLS -> local
        while (!tls_eof && to_local.size() < cap) {
            int n = SSL_read(ssl, buf, sizeof buf);
            if (n > 0) {
                to_local.append(buf, static_cast<std::size_t>(n));
                continue;
            }
            int e = SSL_get_error(ssl, n);
            if (e == SSL_ERROR_WANT_READ) break;
            if (e == SSL_ERROR_WANT_WRITE) {
                want_write = true;
                break;
            }
            tls_eof = true;
        }
        while (!to_local.empty()) {
            ssize_t w = ::write(local, to_local.data(), to_local.size());
            if (w > 0) {
                to_local.erase(0, static_cast<std::size_t>(w));
                continue;
            }
            if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
            ERR_clear_error();
            return;  // our side is gone
        }
        if (tls_eof && to_local.empty()) {
            ::shutdown(local, SHUT_RDWR);
            return;
        }
        // local -> TLS
        while (!local_eof && to_tls.size() < cap) {
            ssize_t r = ::read(local, buf, sizeof buf);
            if (r > 0) {
                to_tls.append(buf, static_cast<std::size_t>(r));
                continue;
            }
            if (r < 0 && (errno == EAGAIN || errno == EINTR)) break;
            local_eof = true;
        }
        while (!to_tls.empty()) {
            std::size_t len = retry_len ? retry_len : std::min<std::size_t>(to_tls.size(), 16384);
            int n = SSL_write(ssl, to_tls.data(), static_cast<int>(len));
            if (n > 0) {
                retry_len = 0;
                to_tls.erase(0, static_cast<std::size_t>(n));
                continue;
            }
            int e = SSL_get_error(ssl, n);
            retry_len = len;
            if (e == SSL_ERROR_WANT_WRITE) {
                want_write = true;
                break;
            }
            if (e == SSL_ERROR_WANT_READ) break;
            ERR_clear_error();
            ::shutdown(local, SHUT_RDWR);
            return;  // the peer is gone
        }
        if (local_eof && to_tls.empty()) {
            SSL_shutdown(ssl);
            ERR_clear_error();
            return;
        }
        pollfd p[2] = {
            {sock, static_cast<short>((tls_eof ? 0 : POLLIN) | (want_write ? POLLOUT : 0)), 0},
            {local,
             static_cast<short>((!local_eof && to_tls.size() < cap ? POLLIN : 0) |
                                (to_local.empty() ? 0 : POLLOUT)),
             0}};
        bool more = !tls_eof && to_local.size() < cap && SSL_pending(ssl) > 0;
        if (::poll(p, 2, more ? 0 : -1) < 0 && errno != EINTR) return;
    }
}

}  // namespace sandweave::rpc
