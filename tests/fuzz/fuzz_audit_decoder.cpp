// libFuzzer target: one sentry message (header included) through the record
// formatter, the way the writer takes it: a batch (type 0x7f01,
// runtime/audit-sink.patch) entry by entry plus its malformed remainder, any
// other message whole; a fragment's header and the whole-field prefix of a
// point cut short (runtime/audit-fragments.patch). Properties: never crashes,
// exactly one line per record, always valid JSON (bytes that are not UTF-8
// escaped as \udcNN) with seq/point/dropped, and a batch's records are as many
// as message_event_count says. Seeds: tests/data/audit/corpus (recorded from a
// real runsc session by `sandweave-audit-replay --record`; batch-*.bin built
// from those by frame_batch).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "lib/audit/decoder.hpp"
#include "lib/audit/state.hpp"
#include "lib/audit/wire.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static sandweave::audit::RecordFormatter fmt;
    static sandweave::audit::JsonOut out;
    std::string_view msg(reinterpret_cast<const char*>(data), size);
    auto one_record = [&] {
        std::string_view line = out.buf();
        if (line.empty() || line.back() != '\n' || line.find('\n') != line.size() - 1) std::abort();
        // As the writer's own readers take a line: the \udcNN escapes of bytes
        // that are not UTF-8 are lone surrogates, which nlohmann rejects.
        nlohmann::json j;
        try {
            j = sandweave::audit::parse_log_line(line);
        } catch (...) {
            std::abort();
        }
        if (!j.contains("seq") || !j.contains("point") || !j.contains("dropped")) std::abort();
        out.clear();
    };
    namespace a = sandweave::audit;
    a::WireHeader h;
    std::string_view body;
    out.clear();
    if (a::parse_header(msg, h, body) == a::HeaderError::none &&
        h.message_type == a::kBatchMessage) {
        std::uint64_t records = 0;
        a::BatchEntry e;
        while (a::next_batch_entry(body, e)) {
            fmt.payload(out, 1, 0, e.type, e.payload);
            one_record();
            ++records;
        }
        if (!body.empty()) {
            fmt.malformed(out, 1, 0, a::kBatchMessage, "remainder", body);
            one_record();
            ++records;
        }
        if (records != a::message_event_count(msg) && !(records == 0 && body.empty())) std::abort();
    } else {
        fmt.message(out, 1, 0, msg);
        one_record();
    }
    // The handshake parser sees raw bytes too.
    (void)sandweave::audit::decode_handshake(msg);
    // So do the fragment header and the whole-field walk of a point cut short
    // (runtime/audit-fragments.patch): they stay inside the bytes given.
    a::Fragment f;
    if (a::parse_fragment(msg, f) &&
        (f.data.size() + a::kFragmentHeader != msg.size() || f.offset + f.data.size() > f.total))
        std::abort();
    if (a::whole_fields_prefix(msg) > msg.size()) std::abort();
    return 0;
}
