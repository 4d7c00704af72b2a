// libssh, opened on first use (lib/core/lazy_library.hpp). A local command
// never needs it, yet linking it made every `sandweave` invocation load
// libssh, libcrypto and the Kerberos libraries and resolve their symbols:
// about 1.5 ms of each command's start (bench/lifecycle.sh). A function
// ssh.cpp starts to use needs its line here.

#include <libssh/libssh.h>

#include "lib/core/lazy_library.hpp"

namespace {
// libssh's ABI has kept this soname since 0.5 (2011).
constexpr sandweave::LazyLibrary libssh{"libssh.so.4", "ssh:// connections", "libssh-4",
                                        sandweave::ErrorCode::connection};
}  // namespace

#define SANDWEAVE_LIBSSH(ret, name, params, args) \
    SANDWEAVE_LAZY_FORWARD(libssh, ret, name, params, args)

extern "C" {
SANDWEAVE_LIBSSH(ssh_session, ssh_new, (void), ())
SANDWEAVE_LIBSSH(void, ssh_free, (ssh_session s), (s))
SANDWEAVE_LIBSSH(int, ssh_options_set, (ssh_session s, enum ssh_options_e t, const void* v),
                 (s, t, v))
SANDWEAVE_LIBSSH(int, ssh_options_parse_config, (ssh_session s, const char* f), (s, f))
SANDWEAVE_LIBSSH(const char*, ssh_get_error, (void* e), (e))
SANDWEAVE_LIBSSH(int, ssh_connect, (ssh_session s), (s))
SANDWEAVE_LIBSSH(void, ssh_disconnect, (ssh_session s), (s))
SANDWEAVE_LIBSSH(socket_t, ssh_get_fd, (ssh_session s), (s))
SANDWEAVE_LIBSSH(int, ssh_get_server_publickey, (ssh_session s, ssh_key* k), (s, k))
SANDWEAVE_LIBSSH(int, ssh_get_publickey_hash,
                 (const ssh_key k, enum ssh_publickey_hash_type t, unsigned char** h, size_t* l),
                 (k, t, h, l))
SANDWEAVE_LIBSSH(char*, ssh_get_fingerprint_hash,
                 (enum ssh_publickey_hash_type t, unsigned char* h, size_t l), (t, h, l))
SANDWEAVE_LIBSSH(void, ssh_clean_pubkey_hash, (unsigned char** h), (h))
SANDWEAVE_LIBSSH(void, ssh_string_free_char, (char* s), (s))
SANDWEAVE_LIBSSH(void, ssh_key_free, (ssh_key k), (k))
SANDWEAVE_LIBSSH(enum ssh_known_hosts_e, ssh_session_is_known_server, (ssh_session s), (s))
SANDWEAVE_LIBSSH(int, ssh_session_update_known_hosts, (ssh_session s), (s))
SANDWEAVE_LIBSSH(int, ssh_pki_import_privkey_file,
                 (const char* f, const char* p, ssh_auth_callback cb, void* d, ssh_key* k),
                 (f, p, cb, d, k))
SANDWEAVE_LIBSSH(int, ssh_userauth_publickey, (ssh_session s, const char* u, const ssh_key k),
                 (s, u, k))
SANDWEAVE_LIBSSH(int, ssh_userauth_publickey_auto, (ssh_session s, const char* u, const char* p),
                 (s, u, p))
SANDWEAVE_LIBSSH(ssh_channel, ssh_channel_new, (ssh_session s), (s))
SANDWEAVE_LIBSSH(void, ssh_channel_free, (ssh_channel c), (c))
SANDWEAVE_LIBSSH(int, ssh_channel_open_session, (ssh_channel c), (c))
SANDWEAVE_LIBSSH(int, ssh_channel_request_exec, (ssh_channel c, const char* cmd), (c, cmd))
SANDWEAVE_LIBSSH(int, ssh_channel_write, (ssh_channel c, const void* d, uint32_t n), (c, d, n))
SANDWEAVE_LIBSSH(int, ssh_channel_send_eof, (ssh_channel c), (c))
SANDWEAVE_LIBSSH(int, ssh_channel_read_timeout,
                 (ssh_channel c, void* d, uint32_t n, int is_stderr, int timeout_ms),
                 (c, d, n, is_stderr, timeout_ms))
SANDWEAVE_LIBSSH(int, ssh_channel_read_nonblocking,
                 (ssh_channel c, void* d, uint32_t n, int is_stderr), (c, d, n, is_stderr))
SANDWEAVE_LIBSSH(int, ssh_channel_is_eof, (ssh_channel c), (c))
SANDWEAVE_LIBSSH(int, ssh_channel_is_closed, (ssh_channel c), (c))
SANDWEAVE_LIBSSH(int, ssh_channel_get_exit_status, (ssh_channel c), (c))
SANDWEAVE_LIBSSH(int, ssh_channel_close, (ssh_channel c), (c))
}
