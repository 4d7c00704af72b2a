// libFuzzer target: one sentry message (header included) through the record
// formatter. Properties: never crashes, always exactly one line, always valid
// JSON with seq/point/dropped. Seeds: tests/data/audit/corpus (recorded from a
// real runsc session by `sandweave-audit-replay --record`).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "lib/audit/decoder.hpp"
#include "lib/audit/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static sandweave::audit::RecordFormatter fmt;
    static sandweave::audit::JsonOut out;
    out.clear();
    std::string_view msg(reinterpret_cast<const char*>(data), size);
    fmt.message(out, 1, 0, msg);
    const std::string& line = out.buf();
    if (line.empty() || line.back() != '\n' || line.find('\n') != line.size() - 1) std::abort();
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("seq") || !j.contains("point") || !j.contains("dropped"))
        std::abort();
    // The handshake parser sees raw bytes too.
    (void)sandweave::audit::decode_handshake(msg);
    return 0;
}
