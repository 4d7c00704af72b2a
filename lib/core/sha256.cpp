#include "lib/core/sha256.hpp"

namespace sandweave {

std::string Sha256::hex_digest() {
    static constexpr char hex[] = "0123456789abcdef";
    Digest d = digest();
    std::string out(2 * d.size(), '0');
    for (std::size_t i = 0; i < d.size(); ++i) {
        out[2 * i] = hex[d[i] >> 4];
        out[2 * i + 1] = hex[d[i] & 15];
    }
    return out;
}

std::string sha256_hex(std::string_view data) {
    Sha256 h;
    h.update(data);
    return h.hex_digest();
}

}  // namespace sandweave
