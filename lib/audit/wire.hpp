#pragma once
// gVisor remote-sink wire format (docs/design.md, "gVisor's trace wire"): the 8-byte little-endian
// header in front of every message after the handshake, the message-type table of runsc 20221219
// (types 1-34), and the syscall-number names used to turn a schematized syscall message into its
// point name (syscall/<name>/exit). Everything here treats its input as hostile: parse functions
// report what is wrong instead of trusting lengths.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sandweave::audit {

inline constexpr std::uint32_t kWireVersion = 1;
inline constexpr std::size_t kHeaderMinSize = 8;
// Largest message the writer reads whole (its receive slots). The runtime
// sends nothing larger: a bigger batch goes as fragments (kFragmentMessage).
// A larger message keeps its first kMaxMessageSize bytes and is recorded as
// writer/truncated_message (counted as truncated).
inline constexpr std::size_t kMaxMessageSize = 1u << 20;
// Largest handshake accepted (the real one is 2 bytes).
inline constexpr std::size_t kMaxHandshakeSize = 1024;

struct WireHeader {
    std::uint16_t header_size = 0;
    std::uint16_t message_type = 0;
    std::uint32_t dropped_count = 0;
};

enum class HeaderError { none, too_short, header_size_too_small, header_size_beyond_message };

// Parses the header of one received message; on success `payload` is the
// bytes from header_size to the end (header_size may exceed 8: skipped).
HeaderError parse_header(std::string_view message, WireHeader& header, std::string_view& payload);
const char* header_error_name(HeaderError);

// Frames a payload the way the runtime's remote sink does (replay, tests).
std::string frame_message(std::uint16_t type, std::string_view payload, std::uint32_t dropped = 0,
                          std::uint16_t header_size = kHeaderMinSize);

// The encoded handshake we reply with, and a checker for the peer's.
std::string encode_handshake(std::uint32_t version = kWireVersion);
// Returns the peer's version, or nullopt if the bytes are not a handshake.
std::optional<std::uint32_t> decode_handshake(std::string_view bytes);

// Message types of runsc 20221219.
enum MessageType : std::uint16_t {
    kContainerStart = 1,
    kSentryClone = 2,
    kSentryExec = 3,
    kSentryExitNotifyParent = 4,
    kSentryTaskExit = 5,
    kSyscallRaw = 6,
    kSyscallFirstSchematized = 7,
    kSyscallLastKnown = 34,
};

// sandweave's own message type (runtime/audit-sink.patch): several points in
// one message, each entry framed as uint32 payload size, uint16 message type,
// uint16 zero (little-endian), then that point's payload. The header's
// dropped_count applies as for any message; a batch the runtime could not
// send counted every point in it as dropped.
inline constexpr std::uint16_t kBatchMessage = 0x7f01;
inline constexpr std::size_t kBatchEntryHeader = 8;
struct BatchEntry {
    std::uint16_t type = 0;
    std::string_view payload;
};
// Takes the next whole entry off the front of `rest`. False at the end, or
// when `rest` does not start with a whole entry: `rest` is then left as it is
// (a non-empty `rest` after the loop is a malformed remainder).
bool next_batch_entry(std::string_view& rest, BatchEntry& entry);
// How many events a received message stands for: a batch's whole entries plus
// one for a malformed remainder (at least 1), any other message 1. Used to
// count what is lost when a message cannot be queued.
std::uint64_t message_event_count(std::string_view message);
// Frames entries the way the runtime's patched sink does (replay, tests).
std::string frame_batch(const std::vector<std::pair<std::uint16_t, std::string>>& entries,
                        std::uint32_t dropped = 0);

// sandweave's fragments (runtime/audit-fragments.patch): a batch whose message
// would exceed kMaxMessageSize is sent as consecutive messages of this type,
// each payload uint32 offset, uint32 total (the size of the whole batch's
// body, little-endian), then the body's bytes from offset on (at most
// 256 KiB from the runtime). The writer puts them together and handles the
// body as one kBatchMessage. An execve point carries all of argv and the
// environment: gVisor copies at most 2 MiB of each (ExecMaxTotalSize,
// counting each string's NUL; 128 KiB a string), which encodes to at most
// 4 MiB each (a string costs its bytes plus a tag and a length, at most
// twice its share of the 2 MiB when it is empty), so a point is at most
// 8 MiB plus its paths and context (a few pages each), and the batch before
// it under 64 KiB. kMaxAssembledBody covers that with room to spare; a
// larger body keeps its first kMaxAssembledBody bytes and its cut point is
// recorded as writer/truncated_message.
inline constexpr std::uint16_t kFragmentMessage = 0x7f02;
inline constexpr std::size_t kFragmentHeader = 8;
inline constexpr std::size_t kMaxAssembledBody = 9u << 20;
struct Fragment {
    std::uint32_t offset = 0;
    std::uint32_t total = 0;
    std::string_view data;
};
// Parses a fragment's payload (after the wire header). False when it is too
// short or its bytes run past `total`.
bool parse_fragment(std::string_view payload, Fragment& fragment);
// Frames `body` as the runtime does when it is larger than one message:
// fragments of at most `max_data` bytes each.
std::vector<std::string> frame_fragments(std::string_view body, std::size_t max_data = 256u << 10,
                                         std::uint32_t dropped = 0);
// The longest prefix of a protobuf message made of whole top-level fields
// (what can be decoded of a message cut short).
std::size_t whole_fields_prefix(std::string_view message);

// Descriptor info for a known type: the protobuf message (our schema) and
// either a fixed point name (lifecycle) or the syscall family used when a
// sysno has no name here.
struct MessageTypeInfo {
    std::uint16_t type;
    const char* message;      // full name in sandweave.audit.wire
    const char* fixed_point;  // non-null for types 1-5
    const char* family;       // syscall family for 6-34
};
const MessageTypeInfo* message_type_info(std::uint16_t type);

// Host-architecture syscall names (the guest runs on the host's ABI).
std::optional<std::string_view> syscall_name(std::uint64_t sysno);
std::optional<std::uint64_t> syscall_number(std::string_view name);

}  // namespace sandweave::audit
