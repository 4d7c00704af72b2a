#include "lib/audit/decoder.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "lib/audit/schema.hpp"

namespace sandweave::audit {
namespace {

bool read_varint(const unsigned char*& p, const unsigned char* end, std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (p >= end) return false;
        unsigned char c = *p++;
        v |= static_cast<std::uint64_t>(c & 0x7f) << shift;
        if ((c & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
}

}  // namespace

RecordFormatter::RecordFormatter() {
    type_schema_.assign(kSyscallLastKnown + 1, -1);
    for (std::uint16_t t = 1; t <= kSyscallLastKnown; ++t) {
        const MessageTypeInfo* info = message_type_info(t);
        const schema::MessageSpec* d = schema::find_message(info->message);
        if (d == nullptr)
            throw std::logic_error(std::string("audit schema lacks ") + info->message);
        type_schema_[t] = build(d);
        if (t < kSyscallRaw) continue;
        // Syscall records: zero values that tell what happened are written.
        int schema = type_schema_[t];
        Field& sysno = mark_always(schema, "sysno");
        sysno.names_sysno = t == kSyscallRaw;
        for (const Field& f : schemas_[static_cast<std::size_t>(schema)].fields) {
            if (f.key != "\"exit\":" || f.kind != Kind::message) continue;
            mark_always(f.message, "result");
            mark_always(f.message, "errorno");
        }
        if (t == kSyscallRaw)
            for (const char* a : {"arg1", "arg2", "arg3", "arg4", "arg5", "arg6"})
                mark_always(schema, a).hex = true;
    }
    for (auto& o : occ_) o.reserve(64);
    const schema::MessageSpec* context = schema::find_message("sandweave.audit.wire.TaskContext");
    if (auto it = built_.find(context); context != nullptr && it != built_.end()) {
        const Schema& cs = schemas_[static_cast<std::size_t>(it->second)];
        // The memo relies on time_ns being the schema's first field.
        if (!cs.fields.empty() && cs.fields[0].number == 1 && cs.fields[0].kind == Kind::i64 &&
            cs.fields[0].key == "\"time_ns\":" && !cs.fields[0].always)
            context_schema_ = &cs;
    }
}

bool RecordFormatter::split_context(std::string_view data, std::int64_t& time_ns,
                                    std::string_view& rest) {
    // Field 1, varint: tag byte 0x08.
    if (data.empty() || data[0] != '\x08') return false;
    const auto* p = reinterpret_cast<const unsigned char*>(data.data()) + 1;
    const auto* end = reinterpret_cast<const unsigned char*>(data.data()) + data.size();
    std::uint64_t v;
    if (!read_varint(p, end, v)) return false;
    time_ns = static_cast<std::int64_t>(v);
    rest = std::string_view(reinterpret_cast<const char*>(p), static_cast<std::size_t>(end - p));
    return true;
}

RecordFormatter::Field& RecordFormatter::mark_always(int schema, std::string_view field_name) {
    std::string key = "\"" + std::string(field_name) + "\":";
    for (Field& f : schemas_[static_cast<std::size_t>(schema)].fields) {
        if (f.key != key) continue;
        if (f.repeated || f.kind == Kind::message || f.kind == Kind::string ||
            f.kind == Kind::bytes)
            throw std::logic_error("audit schema: " + key + " is not a singular scalar");
        f.always = true;
        return f;
    }
    throw std::logic_error("audit schema lacks field " + key);
}

int RecordFormatter::build(const schema::MessageSpec* message) {
    // Nested types are shared (TaskContext appears everywhere): build once.
    if (auto it = built_.find(message); it != built_.end()) return it->second;
    int index = static_cast<int>(schemas_.size());
    schemas_.emplace_back();
    built_[message] = index;
    Schema s;
    std::uint32_t max_number = 0;
    for (const schema::FieldSpec& f : schema::fields_of(*message)) {
        Field field{f.number, Kind::i32, f.repeated, -1,
                    "\"" + std::string(schema::name(f.name)) + "\":"};
        switch (f.type) {
            case schema::FieldType::i32:
                field.kind = Kind::i32;
                break;
            case schema::FieldType::i64:
                field.kind = Kind::i64;
                break;
            case schema::FieldType::u32:
                field.kind = Kind::u32;
                break;
            case schema::FieldType::u64:
                field.kind = Kind::u64;
                break;
            case schema::FieldType::boolean:
                field.kind = Kind::boolean;
                break;
            case schema::FieldType::string:
                field.kind = Kind::string;
                break;
            case schema::FieldType::bytes:
                field.kind = Kind::bytes;
                break;
            case schema::FieldType::message:
                field.kind = Kind::message;
                field.message = build(&schema::messages()[static_cast<std::size_t>(f.message)]);
                break;
        }
        max_number = std::max(max_number, field.number);
        s.fields.push_back(std::move(field));
    }
    std::sort(s.fields.begin(), s.fields.end(),
              [](const Field& a, const Field& b) { return a.number < b.number; });
    s.by_number.assign(max_number + 1, -1);
    for (std::size_t i = 0; i < s.fields.size(); ++i)
        s.by_number[s.fields[i].number] = static_cast<int>(i);
    schemas_[static_cast<std::size_t>(index)] = std::move(s);
    return index;
}

bool RecordFormatter::parse(const Schema& s, std::string_view data, int depth) {
    auto& occ = occ_[depth];
    auto& unknown = unknown_[depth];
    occ.clear();
    unknown.clear();
    const auto* base = reinterpret_cast<const unsigned char*>(data.data());
    const unsigned char* p = base;
    const unsigned char* end = base + data.size();
    while (p < end) {
        const unsigned char* start = p;
        std::uint64_t tag;
        if (!read_varint(p, end, tag)) return false;
        std::uint64_t number = tag >> 3;
        unsigned wt = static_cast<unsigned>(tag & 7);
        if (number == 0 || number > 0x1fffffff) return false;
        std::uint64_t value = 0;
        std::uint32_t off = 0, len = 0;
        switch (wt) {
            case 0:
                if (!read_varint(p, end, value)) return false;
                break;
            case 1:
                if (end - p < 8) return false;
                p += 8;
                break;
            case 5:
                if (end - p < 4) return false;
                p += 4;
                break;
            case 2: {
                std::uint64_t l;
                if (!read_varint(p, end, l)) return false;
                if (l > static_cast<std::uint64_t>(end - p)) return false;
                off = static_cast<std::uint32_t>(p - base);
                len = static_cast<std::uint32_t>(l);
                p += l;
                break;
            }
            default:
                return false;  // groups (3, 4) and 6, 7 never appear in this schema
        }
        int idx = number < s.by_number.size() ? s.by_number[number] : -1;
        if (idx >= 0) {
            Kind k = s.fields[static_cast<std::size_t>(idx)].kind;
            bool wants_len = k == Kind::string || k == Kind::bytes || k == Kind::message;
            if ((wt == 2) == wants_len && (wt == 0 || wt == 2)) {
                occ.push_back({static_cast<std::uint32_t>(idx), off, len, value});
                continue;
            }
        }
        // Unknown field (a newer runtime) or a wire-type mismatch: kept raw.
        unknown.append(reinterpret_cast<const char*>(start), static_cast<std::size_t>(p - start));
    }
    return true;
}

void RecordFormatter::sysno_name(JsonOut& out, std::uint64_t sysno) {
    auto n = syscall_name(sysno);
    if (!n) return;
    out.raw(",\"syscall\":\"");
    out.raw(*n);  // names from libc's headers: [a-z0-9_], nothing to escape
    out.ch('"');
}

// The JSON of a context whose bytes after time_ns are those of the memo.
void RecordFormatter::emit_memo(const Schema& s, std::int64_t time_ns, JsonOut& out,
                                bool& escaped) {
    out.raw(s.fields[0].key);
    out.exact_i64(time_ns);
    out.raw(memo_json_);
    escaped = escaped || memo_escaped_;
}

void RecordFormatter::Emitting::sep() {
    if (!first) out.ch(',');
    first = false;
}

bool RecordFormatter::emit_value(Emitting& e, const Field& f, const Occ& o) {
    JsonOut& out = e.out;
    switch (f.kind) {
        case Kind::i32:
            out.i64(static_cast<std::int32_t>(o.value));
            break;
        case Kind::i64:
            if (f.hex)
                out.hex64(o.value);
            else
                out.exact_i64(static_cast<std::int64_t>(o.value));
            break;
        case Kind::u32:
            out.u64(static_cast<std::uint32_t>(o.value));
            break;
        case Kind::u64:
            if (f.hex)
                out.hex64(o.value);
            else
                out.exact_u64(o.value);
            if (f.names_sysno) sysno_name(out, o.value);
            break;
        case Kind::boolean:
            out.raw(o.value ? "true" : "false");
            break;
        case Kind::string:
            if (!out.str(e.data.substr(o.off, o.len))) e.escaped = true;
            break;
        case Kind::bytes:
            out.base64(e.data.substr(o.off, o.len));
            break;
        case Kind::message:
            if (e.depth + 1 >= kMaxDepth) return false;
            out.ch('{');
            if (!emit(schemas_[static_cast<std::size_t>(f.message)], e.data.substr(o.off, o.len),
                      e.depth + 1, out, e.escaped, false))
                return false;
            out.ch('}');
            break;
    }
    return true;
}

// A field the message does not have: written as its zero when it always is.
void RecordFormatter::emit_absent(Emitting& e, const Field& f) {
    if (!f.always) return;
    e.sep();
    e.out.raw(f.key);
    e.out.raw(f.kind == Kind::boolean ? "false" : f.hex ? "\"0x0\"" : "0");
    if (f.names_sysno) sysno_name(e.out, 0);
}

// Whether this depth's occurrences are in schema order with every singular
// field at most once, as every protobuf encoder writes them (runsc's among
// them).
bool RecordFormatter::in_schema_order(const Schema& s, int depth) const {
    const auto& occ = occ_[depth];
    for (std::size_t i = 1; i < occ.size(); ++i)
        if (!(occ[i].field > occ[i - 1].field ||
              (occ[i].field == occ[i - 1].field && s.fields[occ[i].field].repeated)))
            return false;
    return true;
}

// The fast path for occurrences in schema order: one merge over fields and
// occurrences. The nested emit reuses deeper scratch vectors, so this
// depth's occurrences stay valid.
bool RecordFormatter::emit_in_order(const Schema& s, Emitting& e) {
    const auto& occ = occ_[e.depth];
    std::size_t j = 0;
    for (std::size_t fi = 0; fi < s.fields.size(); ++fi) {
        const Field& f = s.fields[fi];
        if (j == occ.size() || occ[j].field != fi) {
            emit_absent(e, f);
            continue;
        }
        e.sep();
        e.out.raw(f.key);
        if (f.repeated) e.out.ch('[');
        for (bool more = false; j < occ.size() && occ[j].field == fi; more = true) {
            if (more) e.out.ch(',');
            Occ o = occ[j++];
            if (!emit_value(e, f, o)) return false;
        }
        if (f.repeated) e.out.ch(']');
    }
    return true;
}

// Any order, the same output: the last occurrence wins for a singular field
// (as in protobuf), a repeated field keeps every occurrence in order.
bool RecordFormatter::emit_any_order(const Schema& s, Emitting& e) {
    const auto& occ = occ_[e.depth];
    const std::size_t nocc = occ.size();
    for (std::size_t fi = 0; fi < s.fields.size(); ++fi) {
        const Field& f = s.fields[fi];
        if (f.repeated) {
            bool any = false;
            for (std::size_t i = 0; i < nocc; ++i) {
                if (occ[i].field != fi) continue;
                if (!any) {
                    e.sep();
                    e.out.raw(f.key);
                    e.out.ch('[');
                    any = true;
                } else {
                    e.out.ch(',');
                }
                Occ o = occ[i];
                if (!emit_value(e, f, o)) return false;
            }
            if (any) e.out.ch(']');
        } else {
            std::size_t last = nocc;
            for (std::size_t i = 0; i < nocc; ++i)
                if (occ[i].field == fi) last = i;
            if (last == nocc) {
                emit_absent(e, f);
                continue;
            }
            e.sep();
            e.out.raw(f.key);
            Occ o = occ[last];
            if (!emit_value(e, f, o)) return false;
        }
    }
    return true;
}

// Keeps what the ordered walk wrote for a context (then time_ns came first
// and once, and everything after it depends on context_rest alone).
void RecordFormatter::remember_context(const Schema& s, std::int64_t time_ns,
                                       std::string_view context_rest, std::string_view written,
                                       bool escaped) {
    memo_scratch_.clear();
    memo_scratch_.raw(s.fields[0].key);
    memo_scratch_.exact_i64(time_ns);
    memo_valid_ = written.substr(0, memo_scratch_.size()) == memo_scratch_.buf();
    if (memo_valid_) {
        memo_rest_.assign(context_rest);
        memo_json_.assign(written.substr(memo_scratch_.size()));
        memo_escaped_ = escaped;
    }
}

bool RecordFormatter::emit(const Schema& s, std::string_view data, int depth, JsonOut& out,
                           bool& escaped, bool top_level) {
    // A context whose bytes after time_ns are those of the memo: the memo's
    // JSON is what the walk below would write for them.
    std::int64_t time_ns = 0;
    std::string_view context_rest;
    const bool context =
        !top_level && &s == context_schema_ && split_context(data, time_ns, context_rest);
    if (context && memo_valid_ && context_rest == memo_rest_) {
        emit_memo(s, time_ns, out, escaped);
        return true;
    }
    const std::size_t start = out.size();
    const bool escaped_in = escaped;
    bool mine = false;
    // The top level was parsed by the caller (it needed sysno first).
    if (!top_level && !parse(s, data, depth)) {
        escaped = false;
        return false;
    }
    Emitting e{data, depth, out, mine, !top_level};
    const bool ordered = in_schema_order(s, depth);
    const bool ok = ordered ? emit_in_order(s, e) : emit_any_order(s, e);
    escaped = mine;
    if (!ok) return false;
    if (!unknown_[depth].empty()) {
        e.sep();
        out.raw("\"unknown_fields\":");
        out.base64(unknown_[depth]);
    }
    escaped = escaped_in || mine;
    if (context && ordered)
        remember_context(s, time_ns, context_rest, out.buf().substr(start), mine);
    return true;
}

const std::string& RecordFormatter::point_name(std::uint16_t type, std::uint64_t sysno,
                                               bool is_exit) {
    const MessageTypeInfo* info = message_type_info(type);
    std::uint64_t key = (static_cast<std::uint64_t>(type) << 48) ^ (sysno << 1) ^ (is_exit ? 1 : 0);
    if (sysno < (1ull << 40)) {
        if (auto it = point_cache_.find(key); it != point_cache_.end()) return it->second;
    }
    std::string name;
    const char* phase = is_exit ? "/exit" : "/enter";
    if (info->fixed_point != nullptr) {
        name = info->fixed_point;
    } else if (type == kSyscallRaw) {
        name = "syscall/sysno/" + std::to_string(sysno) + phase;
    } else if (auto n = syscall_name(sysno)) {
        name = "syscall/" + std::string(*n) + phase;
    } else {
        name = "syscall/" + std::string(info->family) + phase;
    }
    // A hostile stream could send endless distinct sysnos: cache a bounded set.
    if (sysno < (1ull << 40) && point_cache_.size() < 4096)
        return point_cache_.emplace(key, std::move(name)).first->second;
    point_tmp_ = std::move(name);
    return point_tmp_;
}

void RecordFormatter::raw_record(JsonOut& out, std::uint64_t seq, std::uint64_t dropped,
                                 const char* point, int type, const char* error,
                                 std::string_view raw) {
    out.raw("{\"seq\":");
    out.u64(seq);
    out.raw(",\"point\":\"");
    out.raw(point);
    out.raw("\",\"dropped\":");
    out.u64(dropped);
    if (type >= 0) {
        out.raw(",\"type\":");
        out.u64(static_cast<std::uint64_t>(type));
    }
    if (error != nullptr) {
        out.raw(",\"error\":");
        out.str(error);
    }
    out.raw(",\"raw\":");
    out.base64(raw);
    out.raw("}\n");
}

RecordFormatter::Result RecordFormatter::message(JsonOut& out, std::uint64_t seq,
                                                 std::uint64_t dropped, std::string_view message) {
    WireHeader h;
    std::string_view body;
    HeaderError e = parse_header(message, h, body);
    if (e != HeaderError::none) {
        int type = message.size() >= 4
                       ? static_cast<int>(static_cast<unsigned char>(message[2]) |
                                          static_cast<unsigned char>(message[3]) << 8)
                       : -1;
        raw_record(out, seq, dropped, "writer/malformed_message", type, header_error_name(e),
                   message);
        return {Outcome::malformed, false, false};
    }
    return payload(out, seq, dropped, h.message_type, body);
}

RecordFormatter::Result RecordFormatter::payload(JsonOut& out, std::uint64_t seq,
                                                 std::uint64_t dropped, std::uint16_t type,
                                                 std::string_view body) {
    Result r;
    if (type >= type_schema_.size() || type_schema_[type] < 0) {
        raw_record(out, seq, dropped, "writer/unknown_message", type, nullptr, body);
        r.outcome = Outcome::unknown_type;
        return r;
    }
    const Schema& s = schemas_[static_cast<std::size_t>(type_schema_[type])];
    const std::size_t mark = out.size();
    if (!parse(s, body, 0)) {
        raw_record(out, seq, dropped, "writer/malformed_message", type,
                   "payload is not a valid protobuf message", body);
        r.outcome = Outcome::malformed;
        return r;
    }
    // The point name needs sysno and whether `exit` is set (exit vs enter).
    std::uint64_t sysno = 0;
    bool is_exit = false;
    std::uint32_t sysno_field = type == kSyscallRaw ? 4 : 3;
    for (const Occ& o : occ_[0]) {
        std::uint32_t number = s.fields[o.field].number;
        if (type >= kSyscallRaw) {
            if (number == sysno_field) sysno = o.value;
            if (number == 2) is_exit = true;
        }
    }
    const std::string& point = point_name(type, sysno, is_exit);
    out.raw("{\"seq\":");
    out.u64(seq);
    out.raw(",\"point\":\"");
    out.raw(point);
    out.raw("\",\"dropped\":");
    out.u64(dropped);
    bool escaped = false;
    if (!emit(s, body, 0, out, escaped, true)) {
        out.truncate(mark);
        raw_record(out, seq, dropped, "writer/malformed_message", type,
                   "payload is not a valid protobuf message", body);
        r.outcome = Outcome::malformed;
        return r;
    }
    out.raw("}\n");
    r.escaped = escaped;
    r.container_start = type == kContainerStart;
    return r;
}

RecordFormatter::Result RecordFormatter::malformed(JsonOut& out, std::uint64_t seq,
                                                   std::uint64_t dropped, int type,
                                                   const char* error, std::string_view raw) {
    raw_record(out, seq, dropped, "writer/malformed_message", type, error, raw);
    return {Outcome::malformed, false, false};
}

void RecordFormatter::release_scratch() {
    for (auto& o : occ_)
        if (o.capacity() > 4096) {
            std::vector<Occ>().swap(o);
            o.reserve(64);
        }
}

std::string RecordFormatter::point_of(std::uint16_t type, std::string_view body) {
    JsonOut tmp;
    Result r = payload(tmp, 0, 0, type, body);
    if (r.outcome != Outcome::event) return "";
    auto pos = tmp.buf().find("\"point\":\"");
    auto endq = tmp.buf().find('"', pos + 9);
    return std::string(tmp.buf().substr(pos + 9, endq - pos - 9));
}

void format_gap(JsonOut& out, std::uint64_t seq, std::uint64_t dropped, std::uint64_t lost,
                std::string_view source) {
    out.raw("{\"seq\":");
    out.u64(seq);
    out.raw(",\"point\":\"gap\",\"dropped\":");
    out.u64(dropped);
    out.raw(",\"lost\":");
    out.u64(lost);
    out.raw(",\"source\":\"");
    out.raw(source);
    out.raw("\"}\n");
}

}  // namespace sandweave::audit
