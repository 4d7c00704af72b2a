#pragma once
// The audit wire schema (proto/trace_points.proto) as plain tables: every
// message with its fields' numbers, names, types and labels. The tables are
// generated at build time by tools/audit-schema-gen, which walks protobuf's
// generated descriptors of the .proto, so the .proto stays the single source
// of truth while the writer never builds protobuf's descriptor pool (about
// 0.7 MiB of heap in every idle writer) and the sandweave binary does not link
// libprotobuf at all. tests/unit/test_audit_schema.cpp checks the tables
// against the descriptors.
//
// The tables hold no pointers (names are offsets into one string block), so
// they stay in the binary's read-only pages, shared by every process, instead
// of being relocated into private ones at load time.

#include <cstdint>
#include <span>
#include <string_view>

namespace sandweave::audit::schema {

// The field types the schema may use; the generator fails the build on any
// other (enums, floats, fixed-width and zigzag integers, groups).
enum class FieldType : std::uint8_t { i32, i64, u32, u64, boolean, string, bytes, message };

struct FieldSpec {
    std::uint32_t name;  // offset into the name block
    std::uint32_t number;
    FieldType type;
    bool repeated;
    std::int32_t message;  // index into messages() for FieldType::message, else -1
};

struct MessageSpec {
    std::uint32_t name;         // full name ("sandweave.audit.wire.TaskContext")
    std::uint32_t first_field;  // index into fields()
    std::uint32_t field_count;  // fields in declaration order
};

// Every message of the file, nested ones after their parent (pre-order).
std::span<const MessageSpec> messages();
std::span<const FieldSpec> fields();
// The name at an offset of the name block.
std::string_view name(std::uint32_t offset);

// The message of that full name, or null.
inline const MessageSpec* find_message(std::string_view full_name) {
    for (const MessageSpec& m : messages())
        if (name(m.name) == full_name) return &m;
    return nullptr;
}

inline std::span<const FieldSpec> fields_of(const MessageSpec& m) {
    return fields().subspan(m.first_field, m.field_count);
}

}  // namespace sandweave::audit::schema
