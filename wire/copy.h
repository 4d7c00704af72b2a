/*
 * The copy stream of `sandweave cp` (docs/agent.md, "Copying files"), and
 * the file work on either end of it. The same C code runs in the guest agent
 * (a copy is a forked child of init with the requested uid and gid, its
 * stdin or stdout the stream) and on the host (lib/core/copy_stream.cpp), so
 * both ends apply the same rules.
 *
 * A stream is a sequence of records, integers little-endian:
 *   'E' entry: u8 'E', u8 type (SW_ENT_*), u16 0, u32 mode (07777 bits),
 *       i64 mtime seconds, u32 mtime nanoseconds, u32 uid, u32 gid,
 *       u64 size (a file's content bytes, which follow the record; else 0),
 *       u32 path length, u32 link length, the path, the link target.
 *   'Z' end: u8 'Z'. A stream that stops before it is incomplete.
 * The first entry is the copy's root, with the empty path; every later path
 * is relative to it, parents before children, each component a plain name
 * (no "", ".", ".." or '/'; at most 255 bytes; the path at most 4096).
 *
 * A reader validates every record as hostile input. A writer (receive) never
 * follows a symlink: it builds the copy under a fresh, private name next to
 * its destination, walking with O_NOFOLLOW, and renames it into place only
 * when the end record has arrived; on any failure it removes what it wrote.
 * A symlink inside a copied tree may not point outside the tree (absolute,
 * or climbing above the root); a symlink that is the root itself is copied
 * as it is.
 */
#ifndef SANDWEAVE_COPY_H
#define SANDWEAVE_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SW_COPY_MAX_PATH 4096
#define SW_COPY_MAX_NAME 255
#define SW_COPY_MAX_DEPTH 128
#define SW_COPY_RECORD 44 /* fixed part of an entry record, its kind byte included */

enum sw_entry_type { SW_ENT_FILE = 1, SW_ENT_DIR = 2, SW_ENT_SYMLINK = 3 };

/* Receive flags. */
#define SW_COPY_CONTENTS 1u /* merge the root directory's children into dest (a "/." source, a tar) */

struct sw_copy_entry {
    uint8_t type;
    uint32_t mode;
    int64_t mtime_sec;
    uint32_t mtime_nsec;
    uint32_t uid, gid;
    uint64_t size;
    char path[SW_COPY_MAX_PATH + 1];
    char link[SW_COPY_MAX_PATH + 1];
};

struct sw_copy_error {
    char msg[768];
    int err; /* errno of the failure, 0 for a rule that was broken */
};

/* Where a reader's bytes come from: returns bytes read, 0 at the end, -1 with
 * errno on error. */
typedef ssize_t (*sw_copy_read_fn)(void* ctx, void* buf, size_t n);

struct sw_copy_reader {
    sw_copy_read_fn read;
    void* ctx;
    unsigned char buf[64 * 1024];
    size_t pos, len;
    uint64_t data_left; /* content bytes of the current file not yet taken */
    uint64_t entries;
    int ended; /* the end record was read */
};

void sw_copy_reader_init(struct sw_copy_reader* r, sw_copy_read_fn read, void* ctx);
/* The next entry (1), the end of the stream (0) or an error (-1, e filled).
 * A file's content must be taken with sw_copy_read_data first (or it is
 * skipped). */
int sw_copy_next(struct sw_copy_reader* r, struct sw_copy_entry* e, struct sw_copy_error* e_out);
/* Up to n content bytes of the current file; 0 when it has none left. */
ssize_t sw_copy_read_data(struct sw_copy_reader* r, void* buf, size_t n, struct sw_copy_error* err);

/* The rules, for either end and for tar members. 0 when `path` is a valid
 * relative entry path (non-empty). */
int sw_copy_path_ok(const char* path, size_t len);
/* 0 when symlink `path` (relative to the root; "" for the root itself) may
 * point to `target`: inside the tree, or anything for the root. */
int sw_copy_link_ok(const char* path, const char* target);

/* Encodes an entry record's fixed part and names into buf (at least
 * SW_COPY_RECORD + both lengths); returns its length. */
size_t sw_copy_encode(const struct sw_copy_entry* e, unsigned char* buf);

/* Told the content bytes copied so far (for progress); may be NULL. */
struct sw_copy_progress {
    void (*fn)(void* ctx, uint64_t bytes);
    void* ctx;
};

/* Sends `path` (not following it when it is a symlink) as a stream to `fd`.
 * 0, or -1 with e filled. */
int sw_copy_send(const char* path, int fd, const struct sw_copy_progress* progress,
                 struct sw_copy_error* e);

/* Receives a stream from `fd` at `dest`, as docker cp does: into it when it
 * is a directory (as `name`, or its contents with SW_COPY_CONTENTS), else as
 * dest itself, whose parent must exist. 0, or -1 with e filled and nothing
 * of the copy left behind. */
int sw_copy_receive(int fd, const char* dest, const char* name, unsigned flags,
                    const struct sw_copy_progress* progress, struct sw_copy_error* e);

#ifdef __cplusplus
}
#endif

#endif
