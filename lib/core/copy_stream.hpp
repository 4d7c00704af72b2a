#pragma once
// `sandweave cp` on this host: local files and tar archives to and from the
// copy stream (wire/copy.h; docs/agent.md "Copying files"). The file work is
// wire/copy.c, the same code the guest agent runs, so both ends apply one
// set of rules: nothing is written through a symlink, a copy is built under a
// private name and renamed into place only once complete, and a member that
// would land outside its destination is refused.
//
// Everything read here may come from a stranger (a tar on stdin) or from the
// guest (a stream copied out): every entry is validated before use, and a
// violation is an Error naming the entry. Each function works on descriptors
// and blocks; lib/api/copy.cpp runs them beside the transfer.

#include <cstdint>
#include <functional>
#include <string>

namespace sandweave::copy {

// Content bytes copied so far; may be empty.
using OnBytes = std::function<void(std::uint64_t)>;

// The name a copied path's root gets in its destination: its last component
// ("." for "/"); "dir/." and "dir/" name "dir".
std::string root_name(const std::string& path);
// Whether `path` asks for a directory's contents (ends in "/." ): docker cp's rule.
bool wants_contents(const std::string& path);

// A local path (not followed when it is a symlink) as a stream on `out`.
void send_local(const std::string& path, int out, const OnBytes& on_bytes = {});
// A stream from `in` written at local `dest` by docker cp's rules (into it as
// `name` when it is a directory; its contents with `contents`).
void receive_local(int in, const std::string& dest, const std::string& name, bool contents,
                   const OnBytes& on_bytes = {});

// A tar archive (any format and compression libarchive reads) from `in` as a
// stream on `out` whose root directory holds the members: for extraction into
// a destination directory. Hard links, devices and fifos are refused.
void tar_to_stream(int in, int out, const OnBytes& on_bytes = {});
// A stream from `in` as a tar archive (pax) on `out`, its root named `name`.
void stream_to_tar(int in, int out, const std::string& name, const OnBytes& on_bytes = {});

}  // namespace sandweave::copy
