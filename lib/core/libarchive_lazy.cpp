// libarchive, opened on first use (lib/core/lazy_library.hpp): only `cp` with
// a tar stream needs it, and linking it made every sandweave process load it
// and the dozen compression, XML and ICU libraries behind it. A function
// copy_stream.cpp starts to use needs its line here.

#include <archive.h>
#include <archive_entry.h>

#include "lib/core/lazy_library.hpp"

namespace {
constexpr sandweave::LazyLibrary libarchive{"libarchive.so.13", "tar streams", "libarchive13",
                                            sandweave::ErrorCode::general};
}  // namespace

#define SANDWEAVE_LIBARCHIVE(ret, name, params, args) \
    SANDWEAVE_LAZY_FORWARD(libarchive, ret, name, params, args)

using entry = struct archive_entry;

extern "C" {
// reading
SANDWEAVE_LIBARCHIVE(struct archive*, archive_read_new, (void), ())
SANDWEAVE_LIBARCHIVE(int, archive_read_support_format_all, (struct archive * a), (a))
SANDWEAVE_LIBARCHIVE(int, archive_read_support_filter_all, (struct archive * a), (a))
SANDWEAVE_LIBARCHIVE(int, archive_read_open_fd, (struct archive * a, int fd, size_t block),
                     (a, fd, block))
SANDWEAVE_LIBARCHIVE(int, archive_read_next_header, (struct archive * a, entry** e), (a, e))
SANDWEAVE_LIBARCHIVE(la_ssize_t, archive_read_data, (struct archive * a, void* d, size_t n),
                     (a, d, n))
SANDWEAVE_LIBARCHIVE(int, archive_read_free, (struct archive * a), (a))
// writing
SANDWEAVE_LIBARCHIVE(struct archive*, archive_write_new, (void), ())
SANDWEAVE_LIBARCHIVE(int, archive_write_set_format_pax_restricted, (struct archive * a), (a))
SANDWEAVE_LIBARCHIVE(int, archive_write_set_bytes_in_last_block, (struct archive * a, int n),
                     (a, n))
SANDWEAVE_LIBARCHIVE(int, archive_write_open_fd, (struct archive * a, int fd), (a, fd))
SANDWEAVE_LIBARCHIVE(int, archive_write_header, (struct archive * a, entry* e), (a, e))
SANDWEAVE_LIBARCHIVE(la_ssize_t, archive_write_data, (struct archive * a, const void* d, size_t n),
                     (a, d, n))
SANDWEAVE_LIBARCHIVE(int, archive_write_close, (struct archive * a), (a))
SANDWEAVE_LIBARCHIVE(int, archive_write_free, (struct archive * a), (a))
SANDWEAVE_LIBARCHIVE(const char*, archive_error_string, (struct archive * a), (a))
// entries
SANDWEAVE_LIBARCHIVE(entry*, archive_entry_new, (void), ())
SANDWEAVE_LIBARCHIVE(void, archive_entry_free, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(const char*, archive_entry_pathname, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(const char*, archive_entry_symlink, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(const char*, archive_entry_hardlink, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(__LA_MODE_T, archive_entry_filetype, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(__LA_MODE_T, archive_entry_perm, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(la_int64_t, archive_entry_size, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(int, archive_entry_size_is_set, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(la_int64_t, archive_entry_uid, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(la_int64_t, archive_entry_gid, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(time_t, archive_entry_mtime, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(long, archive_entry_mtime_nsec, (entry * e), (e))
SANDWEAVE_LIBARCHIVE(void, archive_entry_set_pathname, (entry * e, const char* p), (e, p))
SANDWEAVE_LIBARCHIVE(void, archive_entry_set_symlink, (entry * e, const char* p), (e, p))
SANDWEAVE_LIBARCHIVE(void, archive_entry_set_filetype, (entry * e, unsigned int t), (e, t))
SANDWEAVE_LIBARCHIVE(void, archive_entry_set_perm, (entry * e, __LA_MODE_T m), (e, m))
SANDWEAVE_LIBARCHIVE(void, archive_entry_set_size, (entry * e, la_int64_t n), (e, n))
SANDWEAVE_LIBARCHIVE(void, archive_entry_set_uid, (entry * e, la_int64_t n), (e, n))
SANDWEAVE_LIBARCHIVE(void, archive_entry_set_gid, (entry * e, la_int64_t n), (e, n))
SANDWEAVE_LIBARCHIVE(void, archive_entry_set_mtime, (entry * e, time_t t, long ns), (e, t, ns))
}
