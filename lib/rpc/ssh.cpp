#include "lib/rpc/ssh.hpp"

#include <libssh/libssh.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>

#include "lib/core/error.hpp"
#include "lib/core/log.hpp"

namespace sandweave::rpc {

namespace {

[[noreturn]] void fail(const std::string& msg) {
    throw Error(ErrorCode::connection, msg);
}

std::string sha256_fingerprint(ssh_key key) {
    unsigned char* hash = nullptr;
    size_t len = 0;
    if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &len) != 0) return "?";
    char* fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, len);
    std::string out = fp ? fp : "?";
    ssh_string_free_char(fp);
    ssh_clean_pubkey_hash(&hash);
    return out;
}

}  // namespace

std::string SshTarget::url() const {
    std::string u = "ssh://";
    if (!user.empty()) u += user + "@";
    u += host;
    if (port) u += ":" + std::to_string(port);
    return u;
}

SshTarget parse_ssh_url(const std::string& url) {
    const std::string scheme = "ssh://";
    auto bad = [&](const std::string& why) {
        throw Error(ErrorCode::usage,
                    "host '" + url + "': " + why + " (expected ssh://[user@]host[:port])");
    };
    if (url.rfind(scheme, 0) != 0) bad("not an ssh:// address");
    std::string rest = url.substr(scheme.size());
    if (!rest.empty() && rest.back() == '/') rest.pop_back();
    SshTarget t;
    if (auto at = rest.rfind('@'); at != std::string::npos) {
        t.user = rest.substr(0, at);
        rest = rest.substr(at + 1);
        if (t.user.empty()) bad("empty user");
    }
    if (auto colon = rest.rfind(':');
        colon != std::string::npos && rest.find(']') == std::string::npos) {
        std::string port = rest.substr(colon + 1);
        rest = rest.substr(0, colon);
        if (port.empty() || port.size() > 5 ||
            port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) < 1 ||
            std::stoi(port) > 65535)
            bad("bad port '" + port + "'");
        t.port = std::stoi(port);
    }
    if (rest.size() > 2 && rest.front() == '[' && rest.back() == ']')
        rest = rest.substr(1, rest.size() - 2);  // [::1]
    if (rest.empty()) bad("no host");
    if (rest.find_first_of("/ \t@") != std::string::npos) bad("bad host name");
    t.host = rest;
    return t;
}

std::string shell_quote(const std::string& word) {
    std::string out = "'";
    for (char c : word) {
        if (c == '\'')
            out += "'\\''";
        else
            out += c;
    }
    return out + "'";
}

struct SshConnection::Impl {
    ssh_session session = nullptr;
    ssh_channel channel = nullptr;
    Fd ours, theirs;  // the socketpair: ours is handed out, theirs is pumped
    std::thread pump;
    std::atomic<bool> stop{false};
    std::atomic<int> exit_status{-1};
    std::string where;

    ~Impl() {
        stop = true;
        if (theirs.valid()) ::shutdown(theirs.get(), SHUT_RDWR);
        if (pump.joinable()) pump.join();
        if (channel) {
            ssh_channel_close(channel);
            ssh_channel_free(channel);
        }
        if (session) {
            ssh_disconnect(session);
            ssh_free(session);
        }
    }

    void check_host_key(const SshOptions& opts) {
        ssh_key key = nullptr;
        if (ssh_get_server_publickey(session, &key) != SSH_OK)
            fail(where + ": the server sent no host key");
        std::string fp = sha256_fingerprint(key);
        ssh_key_free(key);
        std::string kh = opts.known_hosts ? *opts.known_hosts : "~/.ssh/known_hosts";
        switch (ssh_session_is_known_server(session)) {
            case SSH_KNOWN_HOSTS_OK:
                return;
            case SSH_KNOWN_HOSTS_CHANGED:
            case SSH_KNOWN_HOSTS_OTHER:
                fail("@@@ WARNING: THE HOST KEY OF " + where + " HAS CHANGED (now " + fp +
                     "); someone may be intercepting the connection. Refused. If the change is "
                     "expected, remove the old key from " +
                     kh + " (ssh-keygen -R HOST)");
            case SSH_KNOWN_HOSTS_NOT_FOUND:
            case SSH_KNOWN_HOSTS_UNKNOWN:
                if (opts.accept_new_host_key) {
                    if (ssh_session_update_known_hosts(session) != SSH_OK)
                        fail(where + ": could not add its host key to " + kh + ": " +
                             ssh_get_error(session));
                    log().warn("added the host key of " + where + " (" + fp + ") to " + kh);
                    return;
                }
                fail("the host key of " + where + " is unknown (" + fp +
                     "); refused. To accept it, check the fingerprint and rerun with "
                     "--accept-new-host-key, or add it to " +
                     kh + " (ssh-keyscan)");
            default:
                fail(where + ": cannot check its host key: " + ssh_get_error(session));
        }
    }

    void authenticate(const SshOptions& opts) {
        int rc = SSH_AUTH_DENIED;
        if (opts.identity) {
            ssh_key key = nullptr;
            if (ssh_pki_import_privkey_file(opts.identity->c_str(), nullptr, nullptr, nullptr,
                                            &key) != SSH_OK)
                fail(where + ": cannot read the identity file " + *opts.identity);
            rc = ssh_userauth_publickey(session, nullptr, key);
            ssh_key_free(key);
        } else {
            // ssh-agent first, then the identities of ~/.ssh and the config.
            rc = ssh_userauth_publickey_auto(session, nullptr, nullptr);
        }
        if (rc == SSH_AUTH_SUCCESS) return;
        if (rc == SSH_AUTH_ERROR)
            fail(where + ": authentication failed: " + ssh_get_error(session));
        fail(where + ": permission denied (publickey): no key was accepted" +
             std::string(opts.identity ? " (tried " + *opts.identity + ")"
                                       : " (tried ssh-agent and ~/.ssh/id_*)"));
    }

    void run_pump() {
        sigset_t all;
        sigfillset(&all);
        ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
        char buf[65536];
        std::string to_channel;  // read from our socket, not yet written
        bool local_eof = false;
        for (;;) {
            if (stop) break;
            pollfd fds[2] = {{theirs.get(), static_cast<short>(local_eof ? 0 : POLLIN), 0},
                             {ssh_get_fd(session), POLLIN, 0}};
            int rc = ::poll(fds, 2, 200);
            if (rc < 0 && errno != EINTR) break;
            // From the worker: stdout to our socket, stderr to our stderr.
            bool progress = true;
            while (progress) {
                progress = false;
                for (int is_err : {0, 1}) {
                    int n = ssh_channel_read_nonblocking(channel, buf, sizeof buf, is_err);
                    if (n == SSH_ERROR) goto done;
                    if (n <= 0) continue;
                    progress = true;
                    int to = is_err ? 2 : theirs.get();
                    std::string_view data(buf, static_cast<std::size_t>(n));
                    while (!data.empty()) {
                        ssize_t w = ::write(to, data.data(), data.size());
                        if (w < 0 && errno == EINTR) continue;
                        if (w <= 0) {
                            if (!is_err) goto done;
                            break;
                        }
                        data.remove_prefix(static_cast<std::size_t>(w));
                    }
                }
            }
            if (ssh_channel_is_eof(channel) || ssh_channel_is_closed(channel)) break;
            if (!local_eof && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
                ssize_t n = ::read(theirs.get(), buf, sizeof buf);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) {
                    // The client is done: the worker sees EOF and stops its work.
                    local_eof = true;
                    ssh_channel_send_eof(channel);
                    continue;
                }
                std::size_t off = 0;
                while (off < static_cast<std::size_t>(n)) {
                    int w =
                        ssh_channel_write(channel, buf + off,
                                          static_cast<uint32_t>(static_cast<std::size_t>(n) - off));
                    if (w == SSH_ERROR) goto done;
                    off += static_cast<std::size_t>(w);
                }
            }
        }
    done:
        if (channel && ssh_channel_is_closed(channel))
            exit_status = ssh_channel_get_exit_status(channel);
        ::shutdown(theirs.get(), SHUT_RDWR);
    }
};

SshConnection::SshConnection(const SshTarget& target, const SshOptions& opts)
    : impl_(std::make_unique<Impl>()) {
    Impl& m = *impl_;
    m.where = target.url();
    m.session = ssh_new();
    if (!m.session) fail("ssh: out of memory");
    ssh_options_set(m.session, SSH_OPTIONS_HOST, target.host.c_str());
    // ~/.ssh/config (or the given file) first; explicit parts of the URL win.
    bool process_config = false;
    ssh_options_set(m.session, SSH_OPTIONS_PROCESS_CONFIG, &process_config);
    if (ssh_options_parse_config(m.session, opts.config ? opts.config->c_str() : nullptr) < 0)
        fail(m.where + ": cannot read the ssh config " +
             (opts.config ? *opts.config : "~/.ssh/config"));
    if (!target.user.empty()) ssh_options_set(m.session, SSH_OPTIONS_USER, target.user.c_str());
    if (target.port) {
        unsigned int port = static_cast<unsigned int>(target.port);
        ssh_options_set(m.session, SSH_OPTIONS_PORT, &port);
    }
    if (opts.known_hosts)
        ssh_options_set(m.session, SSH_OPTIONS_KNOWNHOSTS, opts.known_hosts->c_str());
    long timeout = static_cast<long>(opts.connect_timeout.count());
    ssh_options_set(m.session, SSH_OPTIONS_TIMEOUT, &timeout);

    if (ssh_connect(m.session) != SSH_OK)
        fail("cannot connect to " + m.where + ": " + ssh_get_error(m.session));
    m.check_host_key(opts);
    m.authenticate(opts);

    m.channel = ssh_channel_new(m.session);
    if (!m.channel || ssh_channel_open_session(m.channel) != SSH_OK)
        fail(m.where + ": cannot open a session channel: " + ssh_get_error(m.session));
    std::string command = shell_quote(opts.remote_binary) + " serve --stdio";
    if (ssh_channel_request_exec(m.channel, command.c_str()) != SSH_OK)
        fail(m.where + ": cannot start `" + command + "`: " + ssh_get_error(m.session));
    // After the handshake, reads must not wait for the connect timeout.
    long no_timeout = 0;
    ssh_options_set(m.session, SSH_OPTIONS_TIMEOUT, &no_timeout);

    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) throw_errno("socketpair");
    m.ours.reset(sv[0]);
    m.theirs.reset(sv[1]);
    m.pump = std::thread([&m] { m.run_pump(); });
}

SshConnection::~SshConnection() = default;

Fd SshConnection::take_stream() {
    return std::move(impl_->ours);
}

std::optional<int> SshConnection::remote_exit_status() const {
    int s = impl_->exit_status;
    return s < 0 ? std::nullopt : std::optional(s);
}

}  // namespace sandweave::rpc
