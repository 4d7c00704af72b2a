#pragma once
// Turns one sentry message into one JSONL record, fast and without trusting it.
//
// The schema (field numbers, names, types) comes from our own .proto through
// tables generated from its descriptors at build time (schema.hpp), so the
// .proto stays the single source of truth; the walk over the wire bytes is
// our own: it allocates nothing once warm, bounds nesting by the schema, and
// rolls a half-written record back when the bytes turn out malformed.
// Field order in a record follows the schema; proto3 defaults (0, "", false)
// are absent, as in protobuf's JSON, except where a missing zero would hide
// what happened: syscall records always carry `sysno` (read is 0 on x86-64),
// `exit` (when present) always carries `result` and `errorno`, and raw
// `syscall/sysno/N` records always carry `arg1`..`arg6`.
// Exactness (docs/design.md, "Audit record format"): a JSON number is used only
// where every reader holds it exactly. 64-bit integer fields (int64/uint64)
// are numbers when |v| <= 2^53 and decimal strings otherwise ("18446744073709551615");
// the raw record's arg1..arg6 (pointers, masks) are always lowercase hex
// strings ("0x7ffd1c2e0a10", "0x0"). Raw records name their syscall from the
// host (x86-64) table next to the number: "sysno":262,"syscall":"newfstatat"
// ("syscall" is absent when the number has no name).
//
// Record shapes (one line each, all with seq, point, dropped; the writer
// appends "chain" to every line, see chain.hpp):
//   {"seq":1,"point":"syscall/openat/exit","dropped":0,"context_data":{...},...}
//   {"seq":2,"point":"writer/unknown_message","dropped":0,"type":40,"raw":"<base64>"}
//   {"seq":3,"point":"writer/malformed_message","dropped":0,"type":7,"error":"...","raw":"..."}
//   {"seq":4,"point":"gap","dropped":12,"lost":12,"source":"runtime"}

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "lib/audit/json_out.hpp"
#include "lib/audit/schema.hpp"
#include "lib/audit/wire.hpp"

namespace sandweave::audit {

class RecordFormatter {
  public:
    RecordFormatter();

    enum class Outcome { event, unknown_type, malformed };
    struct Result {
        Outcome outcome = Outcome::event;
        bool escaped = false;  // a string had bytes that are not UTF-8 (escaped \udcNN)
        bool container_start = false;
    };

    // Appends the record for one complete received message (header included).
    Result message(JsonOut& out, std::uint64_t seq, std::uint64_t dropped,
                   std::string_view message);

    // Appends the record for a decoded payload of a known header.
    Result payload(JsonOut& out, std::uint64_t seq, std::uint64_t dropped, std::uint16_t type,
                   std::string_view payload);

    // The record for bytes that are not a whole message (e.g. what is left of
    // a batch after its last whole entry): writer/malformed_message, raw.
    Result malformed(JsonOut& out, std::uint64_t seq, std::uint64_t dropped, int type,
                     const char* error, std::string_view raw);

    // Gives back the scratch a huge record grew (an execve with a million
    // arguments needs an entry per argument, 24 bytes each); for idle times.
    void release_scratch();

    // The point name the record for (type, payload) would carry; "" if unknown.
    std::string point_of(std::uint16_t type, std::string_view payload);

  private:
    enum class Kind : std::uint8_t { i32, i64, u32, u64, boolean, string, bytes, message };
    struct Field {
        std::uint32_t number;
        Kind kind;
        bool repeated;
        int message;               // index into schemas_ for Kind::message
        std::string key;           // "\"name\":"
        bool always = false;       // scalar written as 0/false when absent
        bool hex = false;          // written as a "0x..." string (raw syscall args)
        bool names_sysno = false;  // followed by "syscall":"<name>" (raw records)
    };
    struct Schema {
        std::vector<Field> fields;   // ascending field number
        std::vector<int> by_number;  // field number -> index in fields, -1
    };
    struct Occ {
        std::uint32_t field;
        std::uint32_t off, len;
        std::uint64_t value;
    };
    static constexpr int kMaxDepth = 6;

    int build(const schema::MessageSpec* message);
    Field& mark_always(int schema, std::string_view field_name);
    bool parse(const Schema&, std::string_view data, int depth);
    static void sysno_name(JsonOut& out, std::uint64_t sysno);
    // Appends the members of one message's object (its braces are the caller's).
    bool emit(const Schema&, std::string_view data, int depth, JsonOut& out, bool& escaped,
              bool top_level);
    // emit's steps: one object being written.
    struct Emitting {
        std::string_view data;
        int depth;
        JsonOut& out;
        bool& escaped;  // a string of it had to be escaped
        bool first;     // no member written yet
        void sep();
    };
    void emit_memo(const Schema&, std::int64_t time_ns, JsonOut& out, bool& escaped);
    bool emit_value(Emitting&, const Field&, const Occ&);
    void emit_absent(Emitting&, const Field&);
    bool in_schema_order(const Schema&, int depth) const;
    bool emit_in_order(const Schema&, Emitting&);
    bool emit_any_order(const Schema&, Emitting&);
    void remember_context(const Schema&, std::int64_t time_ns, std::string_view context_rest,
                          std::string_view written, bool escaped);
    const std::string& point_name(std::uint16_t type, std::uint64_t sysno, bool is_exit);
    void raw_record(JsonOut& out, std::uint64_t seq, std::uint64_t dropped, const char* point,
                    int type, const char* error, std::string_view raw);

    std::vector<Schema> schemas_;
    std::map<const schema::MessageSpec*, int> built_;
    std::vector<int> type_schema_;  // message type -> schema index, -1
    std::vector<Occ> occ_[kMaxDepth];
    std::string unknown_[kMaxDepth];
    std::unordered_map<std::uint64_t, std::string> point_cache_;
    std::string point_tmp_;

    // The context memo. Consecutive records of a task carry the same context
    // but for time_ns (its field 1, written first): the JSON of everything
    // after it is kept with the bytes it came from, and reused while those
    // bytes stay the same instead of parsing and formatting them again.
    static bool split_context(std::string_view data, std::int64_t& time_ns, std::string_view& rest);
    const Schema* context_schema_ = nullptr;
    bool memo_valid_ = false, memo_escaped_ = false;
    std::string memo_rest_, memo_json_;
    JsonOut memo_scratch_;
};

// Meta records written by the writer itself.
void format_gap(JsonOut& out, std::uint64_t seq, std::uint64_t dropped, std::uint64_t lost,
                std::string_view source);

}  // namespace sandweave::audit
