#pragma once
// SHA-256, from nettle (linked statically): the audit chain, a log's digest,
// checksums of files and screenshots.
//
// Not OpenSSL's EVP: linked statically (SANDWEAVE_STATIC_DEPS), libcrypto
// brings ~330 KiB of pointer tables (its providers, object and error tables)
// that the loader relocates in every process, so they are private memory of
// each long-lived helper, the audit writer and the shim among them
// (docs/design.md, "Host memory per sandbox"). nettle's SHA-256 is a few
// KiB, with the same SHA-NI code path where the CPU has it.

#include <nettle/sha2.h>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace sandweave {

class Sha256 {
  public:
    using Digest = std::array<unsigned char, SHA256_DIGEST_SIZE>;

    Sha256() { sha256_init(&ctx_); }
    void update(const void* data, std::size_t n) {
        sha256_update(&ctx_, n, static_cast<const std::uint8_t*>(data));
    }
    void update(std::string_view s) { update(s.data(), s.size()); }
    // The digest of everything given since construction or the last digest();
    // starts over.
    Digest digest() {
        Digest d;
        sha256_digest(&ctx_, d.size(), d.data());
        return d;
    }
    // The same, as 64 lowercase hex digits.
    std::string hex_digest();

  private:
    sha256_ctx ctx_;
};

// SHA-256 of `data` as 64 lowercase hex digits.
std::string sha256_hex(std::string_view data);

}  // namespace sandweave
