// libnetfilter_log, opened on first use (lib/core/lazy_library.hpp): only the
// audit writer of a sandbox with an egress policy needs it. A function
// egress_log.cpp starts to use needs its line here.

#include <libnetfilter_log/libnetfilter_log.h>

#include "lib/core/lazy_library.hpp"

namespace {
constexpr sandweave::LazyLibrary libnetfilter_log{
    "libnetfilter_log.so.1", "the audit of a sandbox with a network", "libnetfilter-log1",
    sandweave::ErrorCode::runtime};
}  // namespace

#define SANDWEAVE_LIBNFLOG(ret, name, params, args) \
    SANDWEAVE_LAZY_FORWARD(libnetfilter_log, ret, name, params, args)

extern "C" {
SANDWEAVE_LIBNFLOG(struct nflog_handle*, nflog_open, (void), ())
SANDWEAVE_LIBNFLOG(int, nflog_close, (struct nflog_handle * h), (h))
SANDWEAVE_LIBNFLOG(int, nflog_fd, (struct nflog_handle * h), (h))
SANDWEAVE_LIBNFLOG(struct nflog_g_handle*, nflog_bind_group,
                   (struct nflog_handle * h, uint16_t num), (h, num))
SANDWEAVE_LIBNFLOG(int, nflog_unbind_group, (struct nflog_g_handle * gh), (gh))
SANDWEAVE_LIBNFLOG(int, nflog_set_mode, (struct nflog_g_handle * gh, uint8_t mode, uint32_t range),
                   (gh, mode, range))
SANDWEAVE_LIBNFLOG(int, nflog_set_qthresh, (struct nflog_g_handle * gh, uint32_t qthresh),
                   (gh, qthresh))
SANDWEAVE_LIBNFLOG(int, nflog_set_flags, (struct nflog_g_handle * gh, uint16_t flags), (gh, flags))
SANDWEAVE_LIBNFLOG(int, nflog_callback_register,
                   (struct nflog_g_handle * gh, nflog_callback* cb, void* data), (gh, cb, data))
SANDWEAVE_LIBNFLOG(int, nflog_handle_packet, (struct nflog_handle * h, char* buf, int len),
                   (h, buf, len))
SANDWEAVE_LIBNFLOG(int, nflog_get_payload, (struct nflog_data * nfad, char** data), (nfad, data))
SANDWEAVE_LIBNFLOG(int, nflog_get_timestamp, (struct nflog_data * nfad, struct timeval* tv),
                   (nfad, tv))
SANDWEAVE_LIBNFLOG(int, nflog_get_seq, (struct nflog_data * nfad, uint32_t* seq), (nfad, seq))
}
