// The host's decoder of what a guest agent sends (lib/core/agent_wire): the
// stream split at arbitrary points, the HELLO resync, and every payload
// decoder, and the copy stream a `sandweave cp` out of the guest carries in
// its STDOUT frames (wire/copy.h's reader, as the host runs it). Nothing the
// guest sends may crash, hang or over-allocate.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>

#include "lib/core/agent_wire.hpp"

extern "C" {
#include "wire/copy.h"
}

using namespace sandweave::agent;

namespace {

struct Memory {
    std::string_view rest;
};

ssize_t read_memory(void* ctx, void* buf, std::size_t n) {
    auto* m = static_cast<Memory*>(ctx);
    n = std::min(n, m->rest.size());
    std::memcpy(buf, m->rest.data(), n);
    m->rest.remove_prefix(n);
    return static_cast<ssize_t>(n);
}

// Every entry and every content byte of a copy stream, as a receiver reads them.
void read_copy_stream(std::string_view stream) {
    Memory m{stream};
    auto r = std::make_unique<sw_copy_reader>();
    auto e = std::make_unique<sw_copy_entry>();
    sw_copy_reader_init(r.get(), &read_memory, &m);
    sw_copy_error err{};
    char buf[4096];
    for (int i = 0; i < 4096; i++) {
        if (sw_copy_next(r.get(), e.get(), &err) <= 0) return;
        while (sw_copy_read_data(r.get(), buf, sizeof buf, &err) > 0) {
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    std::string_view all(reinterpret_cast<const char*>(data), size);
    // The first byte picks where the stream is cut and whether to resync first.
    std::size_t cut = size > 1 ? data[0] % size : 0;
    bool resync = data[0] & 0x80;
    all.remove_prefix(1);
    FrameReader r(1u << 16);
    std::string copy_stream;
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
                    case SW_STDOUT:
                        copy_stream += f->payload;
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
    read_copy_stream(copy_stream);
    // The raw input too: a fuzzer finds the copy format's cases faster so.
    read_copy_stream(all);
    return 0;
}
