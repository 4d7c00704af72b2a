#pragma once
// Small filesystem helpers with the guarantees the state store and the audit
// export rely on: atomic replacement (temp file + fsync + rename + fsync of the
// directory), bounded reads, private directories, and advisory locks.

#include <sys/types.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

#include "lib/core/fd.hpp"

namespace sandweave {

namespace fs = std::filesystem;

// How long a write must last. `durable` survives a crash of the host (the file
// and its directory are fsynced). `live` survives the crash of any process but
// may revert to the previous content if the host itself goes down: for files
// that only describe something that cannot outlive the host (a running
// sandbox's state, its runsc bundle), where two fsyncs would cost several ms
// of a command's latency for nothing. After a host crash a `live` file may
// also be empty (its data never reached the disk), which its reader must
// treat as absent (a sandbox record: StateStore::try_load).
enum class Durability { durable, live };

// Replaces `path` with `data` atomically: readers see the old or the new file,
// never a mix, and after return the new content is as durable as asked. Mode
// applies to the new file. Throws Error naming the path on failure (and leaves
// no temp file). A `live` write while an answer is pending (AfterAnswer) frees
// the replaced file's blocks after the answer, not in the rename.
void write_file_atomic(const fs::path& path, std::string_view data, mode_t mode = 0600,
                       Durability durability = Durability::durable);

// A temporary file beside `path`, for replacing it by rename:
// ".NAME.tmp-XXXXXXXX" (8 random hex digits) in the same directory, created
// with O_EXCL and `mode`, and flock()ed for as long as `fd` is open. The lock
// is what tells remove_stale_temps a live writer's file from one whose writer
// was killed: the kernel drops it when the holder dies.
struct TempFile {
    fs::path path;
    Fd fd;
};
TempFile create_temp_beside(const fs::path& path, mode_t mode = 0600);

// Removes what killed writers of `path` left beside it: files named as
// create_temp_beside names them, regular, owned by our euid, and not locked by
// a live writer. Anything else (another name, a symlink, someone else's file)
// stays. Best effort: returns how many were removed, never throws.
std::size_t remove_stale_temps(const fs::path& path);

// Reads a whole file, refusing files larger than max_bytes.
std::string read_file(const fs::path& path, std::size_t max_bytes = 16u << 20);
// Reads a file of any size in chunks of about 1 MiB, handing each to
// `on_chunk` until the end or until it returns false.
void read_chunks(const fs::path& path, const std::function<bool(std::string_view)>& on_chunk);

// mkdir -p with mode for every directory created (existing ones keep theirs).
void make_dirs(const fs::path& path, mode_t mode = 0700);

// fsync a directory so a rename inside it is durable.
void fsync_dir(const fs::path& dir);

// rm -rf that does not follow symlinks and tolerates a missing path.
void remove_tree(const fs::path& path);

// An flock(2) on a lock file, released by the destructor (or by process exit, so
// a crashed holder never wedges the next caller).
class FileLock {
  public:
    enum class Mode { shared, exclusive };
    FileLock(const fs::path& lock_file, Mode mode = Mode::exclusive);
    FileLock(FileLock&& other) noexcept = default;
    FileLock& operator=(FileLock&&) = delete;

    // Non-blocking attempt; returns an unlocked (invalid) lock when busy.
    static FileLock try_lock(const fs::path& lock_file, Mode mode = Mode::exclusive);
    bool locked() const { return fd_.valid(); }

  private:
    FileLock() = default;
    Fd fd_;
};

// The address of the Unix socket at `path` for bind or connect. A path too
// long for sun_path (108 bytes: a long state directory) is reached through a
// descriptor of its directory, /proc/self/fd/N/NAME, kept open in `dir`
// until the call is made. False with errno set when it cannot be.
struct UnixAddress {
    sockaddr_un addr{};
    socklen_t len = 0;
    Fd dir;
};
bool unix_address(const fs::path& path, UnixAddress& a);

// Bytes in the regular files under `p` (symlinks not followed); 0 if missing.
std::uint64_t tree_bytes(const fs::path& p);

// A name users may give an object (sandbox, pool): 1-64 letters, digits, '-',
// '_' or '.', starting with a letter or digit. Safe as a path component.
bool valid_object_name(const std::string& name);

// A random lowercase hex string of n characters (from getrandom).
std::string random_hex(std::size_t n);

}  // namespace sandweave
