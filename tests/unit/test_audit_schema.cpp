// The generated schema tables (lib/audit/schema.hpp) say what protobuf's own
// descriptors of trace_points.proto say: every message, and per message every
// field's name, number, type, label and message type, in declaration order.

#include <doctest/doctest.h>

#include <google/protobuf/descriptor.h>

#include <string>
#include <vector>

#include "lib/audit/schema.hpp"
#include "lib/audit/wire.hpp"
#include "trace_points.pb.h"

namespace pb = google::protobuf;
namespace schema = sandweave::audit::schema;

namespace {

void preorder(const pb::Descriptor* d, std::vector<const pb::Descriptor*>& out) {
    out.push_back(d);
    for (int i = 0; i < d->nested_type_count(); ++i) preorder(d->nested_type(i), out);
}

// The table's type as protobuf names it (FieldDescriptor::type_name()).
const char* table_type(schema::FieldType t) {
    switch (t) {
        case schema::FieldType::i32:
            return "int32";
        case schema::FieldType::i64:
            return "int64";
        case schema::FieldType::u32:
            return "uint32";
        case schema::FieldType::u64:
            return "uint64";
        case schema::FieldType::boolean:
            return "bool";
        case schema::FieldType::string:
            return "string";
        case schema::FieldType::bytes:
            return "bytes";
        case schema::FieldType::message:
            return "message";
    }
    return "?";
}

}  // namespace

TEST_SUITE("audit schema") {
    TEST_CASE("the generated tables match protobuf's descriptors of trace_points.proto") {
        const pb::FileDescriptor* file = sandweave::audit::wire::Hello::descriptor()->file();
        std::vector<const pb::Descriptor*> descriptors;
        for (int i = 0; i < file->message_type_count(); ++i)
            preorder(file->message_type(i), descriptors);
        auto messages = schema::messages();
        REQUIRE(messages.size() == descriptors.size());
        std::size_t total_fields = 0;
        for (std::size_t m = 0; m < messages.size(); ++m) {
            const pb::Descriptor* d = descriptors[m];
            CAPTURE(d->full_name());
            CHECK(schema::name(messages[m].name) == d->full_name());
            CHECK(schema::find_message(d->full_name()) == &messages[m]);
            auto fields = schema::fields_of(messages[m]);
            REQUIRE(fields.size() == static_cast<std::size_t>(d->field_count()));
            total_fields += fields.size();
            for (int i = 0; i < d->field_count(); ++i) {
                const pb::FieldDescriptor* f = d->field(i);
                const schema::FieldSpec& t = fields[static_cast<std::size_t>(i)];
                CAPTURE(f->name());
                CHECK(schema::name(t.name) == f->name());
                CHECK(t.number == static_cast<std::uint32_t>(f->number()));
                CHECK(std::string(table_type(t.type)) == f->type_name());
                CHECK(t.repeated == f->is_repeated());
                if (f->type() == pb::FieldDescriptor::TYPE_MESSAGE) {
                    REQUIRE(t.message >= 0);
                    REQUIRE(static_cast<std::size_t>(t.message) < messages.size());
                    CHECK(schema::name(messages[static_cast<std::size_t>(t.message)].name) ==
                          f->message_type()->full_name());
                } else {
                    CHECK(t.message == -1);
                }
            }
        }
        CHECK(schema::fields().size() == total_fields);
    }

    TEST_CASE("every message type of the wire has its message in the tables") {
        for (std::uint16_t t = 1; t <= sandweave::audit::kSyscallLastKnown; ++t) {
            const auto* info = sandweave::audit::message_type_info(t);
            REQUIRE(info != nullptr);
            CAPTURE(info->message);
            CHECK(schema::find_message(info->message) != nullptr);
        }
        CHECK(schema::find_message("sandweave.audit.wire.NoSuchMessage") == nullptr);
        CHECK(schema::name(0xffffffffu).empty());
    }
}
