// What an E2B client sends sandweave e2b, as the server decodes it
// (lib/e2b/wire.hpp): Connect envelopes, JSON bodies, the Basic user, user
// names, the metadata filter, and the guest watcher's output. The first byte picks the decoder.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "lib/core/error.hpp"
#include "lib/e2b/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    std::string why;
    using namespace sandweave;
    try {
        switch (data[0] % 7) {
            case 0:
                if (auto j = e2b::decode_stream_request(in, 1u << 20, why)) (void)e2b::envelope(*j);
                break;
            case 1:
                (void)e2b::decode_json_object(in, 1u << 20, why);
                break;
            case 2:
                (void)e2b::basic_user(std::string(in));
                break;
            case 3:
                (void)e2b::uid_of_user(std::string(in));
                break;
            case 4:
                (void)e2b::parse_metadata_query(in);
                break;
            case 5:
                (void)e2b::url_decode(in);
                break;
            default: {
                // The guest watcher's output, fed in two pieces.
                e2b::WatchReader r;
                auto half = in.size() / 2;
                if (r.feed(in.substr(0, half), why)) (void)r.feed(in.substr(half), why);
                (void)r.take();
                break;
            }
        }
    } catch (const Error&) {
        // A refusal with a message is the expected answer to bad input.
    }
    return 0;
}
