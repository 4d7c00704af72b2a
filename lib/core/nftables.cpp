#include "lib/core/nftables.hpp"

#include <nftables/libnftables.h>

#include <memory>
#include <mutex>

#include "lib/core/error.hpp"

namespace sandweave {

using nlohmann::json;

namespace {

// One context per call: libnftables' context keeps its cache between calls,
// which another process's changes make stale. A context costs ~1 ms.
struct Ctx {
    nft_ctx* ctx;
    Ctx() : ctx(nft_ctx_new(NFT_CTX_DEFAULT)) {
        if (!ctx) throw Error(ErrorCode::runtime, "nftables: cannot make a context");
        nft_ctx_output_set_flags(ctx, NFT_CTX_OUTPUT_JSON);
        nft_ctx_buffer_output(ctx);
        nft_ctx_buffer_error(ctx);
    }
    ~Ctx() { nft_ctx_free(ctx); }
    Ctx(const Ctx&) = delete;
    Ctx& operator=(const Ctx&) = delete;
};

std::string first_line(const char* s) {
    std::string t = s ? s : "";
    if (auto nl = t.find('\n'); nl != std::string::npos) t.resize(nl);
    return t.empty() ? "failed (no message)" : t;
}

}  // namespace

json nft_run(const json& commands) {
    Ctx c;
    const std::string text = json{{"nftables", commands}}.dump();
    if (nft_run_cmd_from_buffer(c.ctx, text.c_str()) != 0)
        throw Error(ErrorCode::runtime, "nftables: " + first_line(nft_ctx_get_error_buffer(c.ctx)));
    const char* out = nft_ctx_get_output_buffer(c.ctx);
    if (!out || !*out) return nullptr;
    return json::parse(out, nullptr, false);
}

bool nft_try(const json& commands) {
    try {
        nft_run(commands);
        return true;
    } catch (const Error&) {
        return false;
    }
}

}  // namespace sandweave
