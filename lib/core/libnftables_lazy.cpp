// libnftables, opened on first use (lib/core/lazy_library.hpp): only a sandbox
// with a network needs it, and linking it made every sandweave process load
// it and libnftnl, libmnl, libjansson, libgmp and libxtables behind it. A
// function nftables.cpp starts to use needs its line here.

#include <nftables/libnftables.h>

#include "lib/core/lazy_library.hpp"

namespace {
constexpr sandweave::LazyLibrary libnftables{"libnftables.so.1", "sandbox networks", "libnftables1",
                                             sandweave::ErrorCode::runtime};
}  // namespace

#define SANDWEAVE_LIBNFTABLES(ret, name, params, args) \
    SANDWEAVE_LAZY_FORWARD(libnftables, ret, name, params, args)

extern "C" {
SANDWEAVE_LIBNFTABLES(struct nft_ctx*, nft_ctx_new, (uint32_t flags), (flags))
SANDWEAVE_LIBNFTABLES(void, nft_ctx_free, (struct nft_ctx * ctx), (ctx))
SANDWEAVE_LIBNFTABLES(void, nft_ctx_output_set_flags, (struct nft_ctx * ctx, unsigned int flags),
                      (ctx, flags))
SANDWEAVE_LIBNFTABLES(int, nft_ctx_buffer_output, (struct nft_ctx * ctx), (ctx))
SANDWEAVE_LIBNFTABLES(int, nft_ctx_buffer_error, (struct nft_ctx * ctx), (ctx))
SANDWEAVE_LIBNFTABLES(const char*, nft_ctx_get_output_buffer, (struct nft_ctx * ctx), (ctx))
SANDWEAVE_LIBNFTABLES(const char*, nft_ctx_get_error_buffer, (struct nft_ctx * ctx), (ctx))
SANDWEAVE_LIBNFTABLES(int, nft_run_cmd_from_buffer, (struct nft_ctx * nft, const char* buf),
                      (nft, buf))
}
