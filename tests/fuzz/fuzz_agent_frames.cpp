// The host's decoder of what a guest agent sends (lib/core/agent_wire): the
// stream split at arbitrary points, the HELLO resync, and every payload
// decoder. Nothing the guest sends may crash, hang or over-allocate.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "lib/core/agent_wire.hpp"

using namespace sandweave::agent;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    std::string_view all(reinterpret_cast<const char*>(data), size);
    // The first byte picks where the stream is cut and whether to resync first.
    std::size_t cut = size > 1 ? data[0] % size : 0;
    bool resync = data[0] & 0x80;
    all.remove_prefix(1);
    FrameReader r(1u << 16);
    try {
        r.feed(all.substr(0, cut));
        if (resync && !r.sync_to_hello("0123456789abcdef")) return 0;
        r.feed(all.substr(std::min(cut, all.size())));
        for (int i = 0; i < 1024; i++) {
            auto f = r.next();
            if (!f) break;
            try {
                switch (f->type) {
                    case SW_HELLO:
                        (void)decode_hello(f->payload);
                        break;
                    case SW_EXEC:
                        (void)decode_exec(f->payload);
                        break;
                    case SW_EXIT:
                        (void)decode_exit(f->payload);
                        break;
                    default:
                        (void)decode_u32(f->payload);
                        break;
                }
            } catch (const ProtocolError&) {
            }
        }
    } catch (const ProtocolError&) {
    }
    return 0;
}
