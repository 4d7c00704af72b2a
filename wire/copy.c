/* The copy stream and the file work on either end of it: see copy.h. */
#define _GNU_SOURCE
#include "wire/copy.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "wire/byte_order.h"

#define IO_CHUNK (256u << 10)

static int fail(struct sw_copy_error* e, int err, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    if (err) {
        size_t n = strlen(e->msg);
        snprintf(e->msg + n, sizeof e->msg - n, ": %s", strerror(err));
    }
    e->err = err;
    return -1;
}

/* "base/rel" for messages (base alone for the root). */
static const char* where(char* buf, size_t size, const char* base, const char* rel) {
    if (!rel[0])
        snprintf(buf, size, "%s", base);
    else
        snprintf(buf, size, "%s%s%s", base, base[0] && base[strlen(base) - 1] == '/' ? "" : "/",
                 rel);
    return buf;
}

/* ---- rules ----------------------------------------------------------------- */

int sw_copy_path_ok(const char* path, size_t len) {
    if (len == 0 || len > SW_COPY_MAX_PATH || memchr(path, 0, len)) return -1;
    size_t start = 0;
    int depth = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && path[i] != '/') continue;
        size_t n = i - start;
        if (n == 0 || n > SW_COPY_MAX_NAME) return -1;
        if (path[start] == '.' && (n == 1 || (n == 2 && path[start + 1] == '.'))) return -1;
        if (++depth > SW_COPY_MAX_DEPTH) return -1;
        start = i + 1;
    }
    return 0;
}

int sw_copy_link_ok(const char* path, const char* target) {
    if (!target[0]) return -1;
    if (!path[0]) return 0; /* the root itself: copied as it is */
    if (target[0] == '/') return -1;
    long depth = 0; /* the link's directory, below the root */
    for (const char* p = path; *p; p++)
        if (*p == '/') depth++;
    const char* p = target;
    while (*p) {
        const char* slash = strchrnul(p, '/');
        size_t n = (size_t)(slash - p);
        if (n == 2 && p[0] == '.' && p[1] == '.') {
            if (--depth < 0) return -1;
        } else if (n && !(n == 1 && p[0] == '.')) {
            depth++;
        }
        p = *slash ? slash + 1 : slash;
    }
    return 0;
}

/* ---- the reader ---------------------------------------------------------- */

void sw_copy_reader_init(struct sw_copy_reader* r, sw_copy_read_fn read, void* ctx) {
    memset(r, 0, sizeof *r);
    r->read = read;
    r->ctx = ctx;
}

/* At least `need` bytes buffered: 1; the stream ended first: 0; -1 error. */
static int fill(struct sw_copy_reader* r, size_t need, struct sw_copy_error* e) {
    if (r->len - r->pos >= need) return 1;
    memmove(r->buf, r->buf + r->pos, r->len - r->pos);
    r->len -= r->pos;
    r->pos = 0;
    while (r->len < need) {
        ssize_t n = r->read(r->ctx, r->buf + r->len, sizeof r->buf - r->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return fail(e, errno, "reading the copy stream");
        if (n == 0) return 0;
        r->len += (size_t)n;
    }
    return 1;
}

static int truncated(struct sw_copy_error* e) {
    return fail(e, 0, "the copy stream ended before its end record (the other side stopped)");
}

ssize_t sw_copy_read_data(struct sw_copy_reader* r, void* buf, size_t n, struct sw_copy_error* e) {
    if (r->data_left == 0) return 0;
    int f = fill(r, 1, e);
    if (f < 0) return -1;
    if (f == 0) return truncated(e);
    size_t take = r->len - r->pos;
    if (take > n) take = n;
    if (take > r->data_left) take = (size_t)r->data_left;
    memcpy(buf, r->buf + r->pos, take);
    r->pos += take;
    r->data_left -= take;
    return (ssize_t)take;
}

int sw_copy_next(struct sw_copy_reader* r, struct sw_copy_entry* en, struct sw_copy_error* e) {
    while (r->data_left) { /* content the caller did not take */
        int f = fill(r, 1, e);
        if (f <= 0) return f < 0 ? -1 : truncated(e);
        size_t take = r->len - r->pos;
        if (take > r->data_left) take = (size_t)r->data_left;
        r->pos += take;
        r->data_left -= take;
    }
    if (r->ended) return 0;
    int f = fill(r, 1, e);
    if (f <= 0) return f < 0 ? -1 : truncated(e);
    unsigned char kind = r->buf[r->pos];
    if (kind == 'Z') {
        if (r->entries == 0) return fail(e, 0, "the copy stream has no entries");
        r->pos++;
        r->ended = 1;
        return 0;
    }
    if (kind != 'E') return fail(e, 0, "the copy stream is malformed (record kind %u)", kind);
    f = fill(r, SW_COPY_RECORD, e);
    if (f <= 0) return f < 0 ? -1 : truncated(e);
    const unsigned char* p = r->buf + r->pos;
    memset(en, 0, offsetof(struct sw_copy_entry, path));
    en->type = p[1];
    en->mode = sw_get32(p + 4);
    en->mtime_sec = (int64_t)sw_get64(p + 8);
    en->mtime_nsec = sw_get32(p + 16);
    en->uid = sw_get32(p + 20);
    en->gid = sw_get32(p + 24);
    en->size = sw_get64(p + 28);
    uint32_t plen = sw_get32(p + 36), llen = sw_get32(p + 40);
    if (en->type < SW_ENT_FILE || en->type > SW_ENT_SYMLINK || p[2] || p[3])
        return fail(e, 0, "the copy stream is malformed (entry type %u)", p[1]);
    if (en->mode > 07777 || en->mtime_nsec >= 1000000000u)
        return fail(e, 0, "the copy stream is malformed (mode or time out of range)");
    if (en->type != SW_ENT_FILE && en->size)
        return fail(e, 0, "the copy stream is malformed (a non-file with content)");
    if (plen > SW_COPY_MAX_PATH || llen > SW_COPY_MAX_PATH)
        return fail(e, 0, "the copy stream is malformed (a name over %u bytes)", SW_COPY_MAX_PATH);
    if ((en->type == SW_ENT_SYMLINK) != (llen > 0))
        return fail(e, 0, "the copy stream is malformed (link target)");
    f = fill(r, SW_COPY_RECORD + plen + llen, e);
    if (f <= 0) return f < 0 ? -1 : truncated(e);
    p = r->buf + r->pos;
    memcpy(en->path, p + SW_COPY_RECORD, plen);
    en->path[plen] = 0;
    memcpy(en->link, p + SW_COPY_RECORD + plen, llen);
    en->link[llen] = 0;
    if (memchr(p + SW_COPY_RECORD, 0, plen + llen))
        return fail(e, 0, "the copy stream is malformed (a NUL in a name)");
    if (r->entries == 0 && plen != 0)
        return fail(e, 0, "the copy stream is malformed (it does not start with its root)");
    if (r->entries > 0 && sw_copy_path_ok(en->path, plen) != 0)
        return fail(e, 0,
                    "refused: the entry '%.300s' escapes the destination or is not a "
                    "plain relative path",
                    en->path);
    if (en->type == SW_ENT_SYMLINK && sw_copy_link_ok(en->path, en->link) != 0)
        return fail(e, 0, "refused: the symlink '%.300s' points outside the copy ('%.300s')",
                    en->path, en->link);
    r->pos += SW_COPY_RECORD + plen + llen;
    r->data_left = en->type == SW_ENT_FILE ? en->size : 0;
    r->entries++;
    return 1;
}

size_t sw_copy_encode(const struct sw_copy_entry* e, unsigned char* b) {
    size_t plen = strlen(e->path), llen = strlen(e->link);
    b[0] = 'E';
    b[1] = e->type;
    b[2] = b[3] = 0;
    sw_put32(b + 4, e->mode & 07777);
    sw_put64(b + 8, (uint64_t)e->mtime_sec);
    sw_put32(b + 16, e->mtime_nsec);
    sw_put32(b + 20, e->uid);
    sw_put32(b + 24, e->gid);
    sw_put64(b + 28, e->type == SW_ENT_FILE ? e->size : 0);
    sw_put32(b + 36, (uint32_t)plen);
    sw_put32(b + 40, (uint32_t)llen);
    memcpy(b + SW_COPY_RECORD, e->path, plen);
    memcpy(b + SW_COPY_RECORD + plen, e->link, llen);
    return SW_COPY_RECORD + plen + llen;
}

/* ---- sending ------------------------------------------------------------- */

struct out {
    int fd;
    size_t len;
    unsigned char buf[IO_CHUNK];
};

static int write_all(int fd, const void* data, size_t n) {
    const unsigned char* p = data;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static int out_flush(struct out* o, struct sw_copy_error* e) {
    if (o->len && write_all(o->fd, o->buf, o->len) != 0)
        return fail(e, errno, "writing the copy stream");
    o->len = 0;
    return 0;
}

static int out_put(struct out* o, const void* data, size_t n, struct sw_copy_error* e) {
    if (o->len + n > sizeof o->buf && out_flush(o, e) != 0) return -1;
    if (n > sizeof o->buf) {
        if (write_all(o->fd, data, n) != 0) return fail(e, errno, "writing the copy stream");
        return 0;
    }
    memcpy(o->buf + o->len, data, n);
    o->len += n;
    return 0;
}

struct send_ctx {
    struct out* o;
    const struct sw_copy_progress* progress;
    uint64_t bytes;
    const char* base;
    struct sw_copy_entry en;
    unsigned char rec[SW_COPY_RECORD + 2 * SW_COPY_MAX_PATH];
    char msg[SW_COPY_MAX_PATH + 64];
};

static int send_node(struct send_ctx* c, int parent, const char* name, char* rel, size_t rlen,
                     int depth, struct sw_copy_error* e) {
    struct stat st;
    const char* at = where(c->msg, sizeof c->msg, c->base, rel);
    if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return fail(e, errno, "%s", at);
    struct sw_copy_entry* en = &c->en;
    memset(en, 0, offsetof(struct sw_copy_entry, path));
    memcpy(en->path, rel, rlen + 1);
    en->link[0] = 0;
    en->mode = st.st_mode & 07777;
    en->mtime_sec = st.st_mtim.tv_sec;
    en->mtime_nsec = (uint32_t)st.st_mtim.tv_nsec;
    en->uid = st.st_uid;
    en->gid = st.st_gid;
    if (S_ISLNK(st.st_mode)) {
        ssize_t n = readlinkat(parent, name, en->link, SW_COPY_MAX_PATH);
        if (n < 0) return fail(e, errno, "%s", at);
        if (n == 0 || n >= SW_COPY_MAX_PATH) return fail(e, 0, "%s: link target too long", at);
        en->link[n] = 0;
        if (sw_copy_link_ok(rel, en->link) != 0)
            return fail(e, 0, "refused: the symlink %s points outside the copy ('%.300s')", at,
                        en->link);
        en->type = SW_ENT_SYMLINK;
        return out_put(c->o, c->rec, sw_copy_encode(en, c->rec), e);
    }
    if (S_ISREG(st.st_mode)) {
        int fd = openat(parent, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
        if (fd < 0) return fail(e, errno, "%s", at);
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
            close(fd);
            return fail(e, 0, "%s changed while it was copied", at);
        }
        en->type = SW_ENT_FILE;
        en->size = (uint64_t)st.st_size;
        int rc = out_put(c->o, c->rec, sw_copy_encode(en, c->rec), e);
        uint64_t left = en->size;
        while (rc == 0 && left) {
            if (c->o->len == sizeof c->o->buf && out_flush(c->o, e) != 0) {
                rc = -1;
                break;
            }
            size_t want = sizeof c->o->buf - c->o->len;
            if (want > left) want = (size_t)left;
            ssize_t n = read(fd, c->o->buf + c->o->len, want);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                rc = fail(e, errno, "%s", at);
            } else if (n == 0) {
                rc = fail(e, 0, "%s shrank while it was copied", at);
            } else {
                c->o->len += (size_t)n;
                left -= (uint64_t)n;
                c->bytes += (uint64_t)n;
                if (c->progress && c->progress->fn) c->progress->fn(c->progress->ctx, c->bytes);
            }
        }
        close(fd);
        return rc;
    }
    if (!S_ISDIR(st.st_mode))
        return fail(e, 0,
                    "%s: not a file, directory or symlink (devices, fifos and sockets "
                    "are not copied)",
                    at);
    if (depth >= SW_COPY_MAX_DEPTH) return fail(e, 0, "%s: nested too deeply", at);
    int dfd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) return fail(e, errno, "%s", at);
    en->type = SW_ENT_DIR;
    if (out_put(c->o, c->rec, sw_copy_encode(en, c->rec), e) != 0) {
        close(dfd);
        return -1;
    }
    DIR* d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return fail(e, errno, "%s", at);
    }
    int rc = 0;
    struct dirent* de;
    errno = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        const char* n = de->d_name;
        if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]))) continue;
        size_t nlen = strlen(n);
        size_t clen = rlen + (rlen ? 1 : 0) + nlen;
        if (clen > SW_COPY_MAX_PATH) {
            rc = fail(e, 0, "%s/%s: path too long", at, n);
            break;
        }
        if (rlen) rel[rlen] = '/';
        memcpy(rel + rlen + (rlen ? 1 : 0), n, nlen + 1);
        rc = send_node(c, dirfd(d), n, rel, clen, depth + 1, e);
        rel[rlen] = 0;
        errno = 0;
    }
    if (rc == 0 && errno) rc = fail(e, errno, "%s", where(c->msg, sizeof c->msg, c->base, rel));
    closedir(d);
    return rc;
}

int sw_copy_send(const char* path, int fd, const struct sw_copy_progress* progress,
                 struct sw_copy_error* e) {
    struct out* o = malloc(sizeof *o);
    struct send_ctx* c = malloc(sizeof *c);
    char* rel = malloc(SW_COPY_MAX_PATH + 1);
    int rc = -1;
    if (!o || !c || !rel) {
        fail(e, ENOMEM, "%s", path);
    } else {
        o->fd = fd;
        o->len = 0;
        c->o = o;
        c->base = path;
        c->progress = progress;
        c->bytes = 0;
        rel[0] = 0;
        unsigned char z = 'Z';
        if (send_node(c, AT_FDCWD, path, rel, 0, 0, e) == 0 && out_put(o, &z, 1, e) == 0)
            rc = out_flush(o, e);
    }
    free(o);
    free(c);
    free(rel);
    return rc;
}

/* ---- receiving ------------------------------------------------------------ */

struct dir_attr {
    char* path; /* relative to the staged base ("" the root) */
    uint32_t mode;
    struct timespec mtime;
};

struct rx {
    struct sw_copy_reader r;
    int parent;                        /* holds the staged object */
    char stage[64];                    /* its name there */
    int base;                          /* the staged directory (-1: the root is no directory) */
    int merge;                         /* merge base's children into `into` */
    int into;                          /* merge: the directory merged into */
    char target[SW_COPY_MAX_NAME + 1]; /* create: the final name in `parent` */
    char display[SW_COPY_MAX_PATH + 300];
    struct dir_attr* dirs;
    size_t ndirs, cap;
    char cached[SW_COPY_MAX_PATH + 1]; /* the parent directory last opened */
    int cached_fd;
    char msg[2 * SW_COPY_MAX_PATH + 300];
    const struct sw_copy_progress* progress;
    uint64_t bytes;
    unsigned char data[IO_CHUNK];
};

static ssize_t read_fd(void* ctx, void* buf, size_t n) {
    return read(*(int*)ctx, buf, n);
}

/* Removes `name` in `dirfd` and everything below it, following no symlink. */
static void remove_tree(int at, const char* name, int depth) {
    if (unlinkat(at, name, 0) == 0 || errno == ENOENT) return;
    int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    fchmod(fd, 0700); /* a read-only directory of the copy */
    DIR* d = fdopendir(fd);
    if (!d) {
        close(fd);
        return;
    }
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        const char* n = de->d_name;
        if (n[0] == '.' && (!n[1] || (n[1] == '.' && !n[2]))) continue;
        if (depth < SW_COPY_MAX_DEPTH + 2) remove_tree(dirfd(d), n, depth + 1);
    }
    closedir(d);
    unlinkat(at, name, AT_REMOVEDIR);
}

/* The staged directory `rel` ("" for the base), opened without following a
 * symlink anywhere on the way. */
static int open_staged(struct rx* x, const char* rel, struct sw_copy_error* e) {
    if (x->cached_fd >= 0 && strcmp(rel, x->cached) == 0) return x->cached_fd;
    int fd = dup(x->base);
    if (fd < 0) return fail(e, errno, "%s", x->display);
    char part[SW_COPY_MAX_NAME + 1];
    const char* p = rel;
    while (*p) {
        const char* slash = strchrnul(p, '/');
        size_t n = (size_t)(slash - p);
        memcpy(part, p, n);
        part[n] = 0;
        int next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int err = errno;
        close(fd);
        if (next < 0) {
            if (err == ENOENT)
                return fail(e, 0, "the copy is malformed: '%.300s' comes before its directory",
                            rel);
            return fail(e, 0, "refused: '%.300s' goes through a symlink or a file of the copy",
                        rel);
        }
        fd = next;
        p = *slash ? slash + 1 : slash;
    }
    if (x->cached_fd >= 0) close(x->cached_fd);
    x->cached_fd = fd;
    snprintf(x->cached, sizeof x->cached, "%s", rel);
    return fd;
}

/* The staged directory holding `path`; *leaf: its last name. */
static int open_staged_parent(struct rx* x, const char* path, const char** leaf,
                              struct sw_copy_error* e) {
    const char* slash = strrchr(path, '/');
    char dir[SW_COPY_MAX_PATH + 1] = "";
    *leaf = path;
    if (slash) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = 0;
        *leaf = slash + 1;
    }
    return open_staged(x, dir, e);
}

static int remember_dir(struct rx* x, const struct sw_copy_entry* en, struct sw_copy_error* e) {
    if (x->ndirs == x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 64;
        struct dir_attr* d = realloc(x->dirs, cap * sizeof *d);
        if (!d) return fail(e, ENOMEM, "%s", x->display);
        x->dirs = d;
        x->cap = cap;
    }
    char* p = strdup(en->path);
    if (!p) return fail(e, ENOMEM, "%s", x->display);
    x->dirs[x->ndirs++] = (struct dir_attr){p, en->mode, {en->mtime_sec, en->mtime_nsec}};
    return 0;
}

static int write_content(struct rx* x, int fd, const struct sw_copy_entry* en, const char* at,
                         struct sw_copy_error* e) {
    for (;;) {
        ssize_t n = sw_copy_read_data(&x->r, x->data, sizeof x->data, e);
        if (n < 0) return -1;
        if (n == 0) break;
        if (write_all(fd, x->data, (size_t)n) != 0) return fail(e, errno, "writing %s", at);
        x->bytes += (uint64_t)n;
        if (x->progress && x->progress->fn) x->progress->fn(x->progress->ctx, x->bytes);
    }
    struct timespec ts[2] = {{0, UTIME_OMIT}, {en->mtime_sec, en->mtime_nsec}};
    if (fchmod(fd, en->mode) != 0 || futimens(fd, ts) != 0) return fail(e, errno, "%s", at);
    return 0;
}

/* Creates entry `en` as `name` in directory `dfd`. */
static int create_entry(struct rx* x, int dfd, const char* name, const struct sw_copy_entry* en,
                        struct sw_copy_error* e) {
    const char* at = where(x->msg, sizeof x->msg, x->display, en->path);
    if (en->type == SW_ENT_DIR) {
        if (mkdirat(dfd, name, 0700) != 0)
            return fail(e, errno == EEXIST ? 0 : errno,
                        errno == EEXIST ? "%s appears twice in "
                                          "the copy"
                                        : "%s",
                        at);
        return remember_dir(x, en, e);
    }
    if (en->type == SW_ENT_SYMLINK) {
        if (symlinkat(en->link, dfd, name) != 0)
            return fail(e, errno == EEXIST ? 0 : errno,
                        errno == EEXIST ? "%s appears twice in "
                                          "the copy"
                                        : "%s",
                        at);
        struct timespec ts[2] = {{0, UTIME_OMIT}, {en->mtime_sec, en->mtime_nsec}};
        utimensat(dfd, name, ts, AT_SYMLINK_NOFOLLOW);
        return 0;
    }
    int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
        return fail(e, errno == EEXIST ? 0 : errno,
                    errno == EEXIST ? "%s appears twice in "
                                      "the copy"
                                    : "%s",
                    at);
    int rc = write_content(x, fd, en, at, e);
    if (close(fd) != 0 && rc == 0) rc = fail(e, errno, "writing %s", at);
    return rc;
}

static int stage_name(struct rx* x, int dfd, const struct sw_copy_entry* root, int as_dir,
                      struct sw_copy_error* e) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    for (int attempt = 0; attempt < 16; attempt++) {
        snprintf(x->stage, sizeof x->stage, ".sw-cp-%d-%lx", (int)getpid(),
                 (unsigned long)(now.tv_nsec + attempt * 7919));
        int rc;
        if (as_dir) {
            rc = mkdirat(dfd, x->stage, 0700);
        } else if (root->type == SW_ENT_SYMLINK) {
            rc = symlinkat(root->link, dfd, x->stage);
        } else {
            rc = openat(dfd, x->stage, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
            if (rc >= 0) {
                int w = write_content(x, rc, root, x->display, e);
                if (close(rc) != 0 && w == 0) w = fail(e, errno, "writing %s", x->display);
                if (w != 0) {
                    unlinkat(dfd, x->stage, 0);
                    x->stage[0] = 0;
                    return -1;
                }
                rc = 0;
            }
        }
        if (rc == 0) {
            if (root->type == SW_ENT_SYMLINK) {
                struct timespec ts[2] = {{0, UTIME_OMIT}, {root->mtime_sec, root->mtime_nsec}};
                utimensat(dfd, x->stage, ts, AT_SYMLINK_NOFOLLOW);
            }
            return 0;
        }
        if (errno != EEXIST) break;
    }
    int err = errno;
    x->stage[0] = 0;
    return fail(e, err, "%s", x->display);
}

/* Moves the staged directory `from`'s entries into `to`, directories merged. */
static int merge_into(struct rx* x, int from, int to, const char* rel, int depth,
                      struct sw_copy_error* e) {
    DIR* d = fdopendir(dup(from));
    if (!d) return fail(e, errno, "%s", x->display);
    char** names = NULL;
    size_t n = 0, cap = 0;
    struct dirent* de;
    while ((de = readdir(d)) != NULL) {
        const char* nm = de->d_name;
        if (nm[0] == '.' && (!nm[1] || (nm[1] == '.' && !nm[2]))) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 32;
            char** g = realloc(names, cap * sizeof *g);
            if (!g) break;
            names = g;
        }
        names[n++] = strdup(nm);
    }
    closedir(d);
    int rc = 0;
    char sub[SW_COPY_MAX_PATH + 1];
    for (size_t i = 0; i < n; i++) {
        if (rc != 0 || !names[i]) continue;
        snprintf(sub, sizeof sub, "%s%s%s", rel, rel[0] ? "/" : "", names[i]);
        const char* at = where(x->msg, sizeof x->msg, x->display, sub);
        struct stat s, t;
        if (fstatat(from, names[i], &s, AT_SYMLINK_NOFOLLOW) != 0) {
            rc = fail(e, errno, "%s", at);
            continue;
        }
        if (fstatat(to, names[i], &t, AT_SYMLINK_NOFOLLOW) != 0) {
            if (errno != ENOENT || renameat(from, names[i], to, names[i]) != 0)
                rc = fail(e, errno, "%s", at);
            continue;
        }
        if (S_ISDIR(s.st_mode) && S_ISDIR(t.st_mode)) {
            int a = openat(from, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            int b = openat(to, names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (a < 0 || b < 0 || depth > SW_COPY_MAX_DEPTH) {
                rc = fail(e, errno, "%s", at);
            } else if ((rc = merge_into(x, a, b, sub, depth + 1, e)) == 0) {
                struct timespec ts[2] = {{0, UTIME_OMIT}, s.st_mtim};
                fchmod(b, s.st_mode & 07777);
                futimens(b, ts);
                unlinkat(from, names[i], AT_REMOVEDIR);
            }
            if (a >= 0) close(a);
            if (b >= 0) close(b);
        } else if (S_ISDIR(s.st_mode) || S_ISDIR(t.st_mode)) {
            rc = fail(e, 0, "%s: cannot overwrite a %s with a %s", at,
                      S_ISDIR(t.st_mode) ? "directory" : "non-directory",
                      S_ISDIR(s.st_mode) ? "directory" : "non-directory");
        } else if (renameat(from, names[i], to, names[i]) != 0) {
            rc = fail(e, errno, "%s", at);
        }
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

/* Splits dest into its parent directory (opened) and last name. */
static int open_parent(const char* dest, char* last, size_t size, struct sw_copy_error* e) {
    char buf[SW_COPY_MAX_PATH + 1];
    size_t len = strlen(dest);
    if (len == 0 || len > SW_COPY_MAX_PATH) return fail(e, 0, "%s: not a usable path", dest);
    memcpy(buf, dest, len + 1);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
    char* slash = strrchr(buf, '/');
    const char* name = slash ? slash + 1 : buf;
    size_t nlen = strlen(name);
    if (!name[0] || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || nlen >= size)
        return fail(e, 0, "%s: not a usable destination name", dest);
    memcpy(last, name, nlen + 1);
    const char* dir = ".";
    if (slash == buf) {
        dir = "/";
    } else if (slash) {
        *slash = 0;
        dir = buf;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return fail(e, 0, "%s: its parent directory does not exist", dest);
        return fail(e, errno, "%s", dir);
    }
    return fd;
}

/* lstat of the destination with its trailing "/" and "/." dropped, so a
 * symlink named as "link/" or "link/." is seen as the symlink, not as what it
 * points to. */
static int lstat_dest(const char* dest, struct stat* st) {
    char buf[SW_COPY_MAX_PATH + 1];
    size_t len = strlen(dest);
    if (len == 0 || len > SW_COPY_MAX_PATH) return lstat(dest, st);
    memcpy(buf, dest, len + 1);
    for (;;) {
        if (len > 1 && buf[len - 1] == '/') {
            buf[--len] = 0;
        } else if (len > 2 && buf[len - 1] == '.' && buf[len - 2] == '/') {
            len -= 2;
            buf[len] = 0;
        } else {
            break;
        }
    }
    return lstat(buf, st);
}

static int receive(struct rx* x, struct sw_copy_entry* ep, int fd, const char* dest,
                   const char* name, unsigned flags, struct sw_copy_error* e) {
    sw_copy_reader_init(&x->r, read_fd, &fd);
    int got = sw_copy_next(&x->r, ep, e);
    if (got <= 0) return got == 0 ? fail(e, 0, "the copy stream is empty") : -1;
    int root_dir = ep->type == SW_ENT_DIR;
    struct stat st;
    int have = lstat_dest(dest, &st) == 0;
    int stat_err = have ? 0 : errno;
    if (!have && stat_err != ENOENT && stat_err != ENOTDIR) return fail(e, stat_err, "%s", dest);
    /* A symlink at the destination may be one an earlier copy brought out of
     * the guest (out -> ../elsewhere): following it would write outside the
     * path the user named. */
    if (have && S_ISLNK(st.st_mode))
        return fail(e, 0,
                    "refused: %s is a symlink, and a copy is never written through one "
                    "(remove it or name its target)",
                    dest);
    if (flags & SW_COPY_CONTENTS) {
        if (!root_dir) return fail(e, 0, "the source is not a directory, so it has no contents");
        if (!have) return fail(e, 0, "%s: no such directory", dest);
        if (!S_ISDIR(st.st_mode)) return fail(e, 0, "%s: not a directory", dest);
        x->merge = 1;
        x->into = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (x->into < 0) return fail(e, errno, "%s", dest);
        snprintf(x->display, sizeof x->display, "%s", dest);
    } else if (have && S_ISDIR(st.st_mode)) {
        if (sw_copy_path_ok(name, strlen(name)) != 0 || strchr(name, '/'))
            return fail(e, 0, "'%.300s' is not a usable name in %s", name, dest);
        int dfd = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) return fail(e, errno, "%s", dest);
        where(x->display, sizeof x->display, dest, name);
        struct stat t;
        if (fstatat(dfd, name, &t, AT_SYMLINK_NOFOLLOW) == 0 && (S_ISDIR(t.st_mode) || root_dir)) {
            if (!S_ISDIR(t.st_mode) || !root_dir) {
                close(dfd);
                return fail(e, 0, "%s: cannot overwrite a %s with a %s", x->display,
                            S_ISDIR(t.st_mode) ? "directory" : "non-directory",
                            root_dir ? "directory" : "non-directory");
            }
            x->merge = 1;
            x->into = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            close(dfd);
            if (x->into < 0) return fail(e, errno, "%s", x->display);
        } else {
            x->parent = dfd;
            snprintf(x->target, sizeof x->target, "%s", name);
        }
    } else {
        if (have && root_dir)
            return fail(e, 0, "%s: cannot copy a directory onto a non-directory", dest);
        size_t dl = strlen(dest);
        if (!have && dl && dest[dl - 1] == '/') return fail(e, 0, "%s: no such directory", dest);
        x->parent = open_parent(dest, x->target, sizeof x->target, e);
        if (x->parent < 0) return -1;
        snprintf(x->display, sizeof x->display, "%s", dest);
    }

    /* Stage the root. */
    if (x->merge) {
        x->parent = x->into;
        x->into = -1;
        if (stage_name(x, x->parent, ep, 1, e) != 0) return -1;
        x->into = dup(x->parent);
    } else if (stage_name(x, x->parent, ep, root_dir, e) != 0) {
        return -1;
    } else if (root_dir && remember_dir(x, ep, e) != 0) {
        return -1;
    }
    if (root_dir) {
        x->base = openat(x->parent, x->stage, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (x->base < 0) return fail(e, errno, "%s", x->display);
    }

    /* Every other entry, below it. */
    for (;;) {
        got = sw_copy_next(&x->r, ep, e);
        if (got < 0) return -1;
        if (got == 0) break;
        if (!root_dir) return fail(e, 0, "the copy is malformed: entries below a non-directory");
        const char* leaf;
        int dfd = open_staged_parent(x, ep->path, &leaf, e);
        if (dfd < 0) return -1;
        if (create_entry(x, dfd, leaf, ep, e) != 0) return -1;
    }

    /* Complete: directory modes and times (deepest first), then into place. */
    for (size_t i = x->ndirs; i-- > 0;) {
        struct dir_attr* a = &x->dirs[i];
        int dfd = a->path[0] ? -1 : x->base;
        if (a->path[0]) {
            const char* leaf;
            int p = open_staged_parent(x, a->path, &leaf, e);
            if (p < 0) return -1;
            dfd = openat(p, leaf, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (dfd < 0)
                return fail(e, errno, "%s", where(x->msg, sizeof x->msg, x->display, a->path));
        }
        struct timespec ts[2] = {{0, UTIME_OMIT}, a->mtime};
        int rc = fchmod(dfd, a->mode) == 0 && futimens(dfd, ts) == 0 ? 0 : errno;
        if (dfd != x->base) close(dfd);
        if (rc) return fail(e, rc, "%s", where(x->msg, sizeof x->msg, x->display, a->path));
    }
    if (x->cached_fd >= 0) close(x->cached_fd);
    x->cached_fd = -1;
    if (x->merge) {
        if (merge_into(x, x->base, x->into, "", 0, e) != 0) {
            size_t n = strlen(e->msg);
            snprintf(e->msg + n, sizeof e->msg - n,
                     " (the copy is partly in place in %s; the rest was removed)", x->display);
            return -1;
        }
        return 0;
    }
    if (renameat(x->parent, x->stage, x->parent, x->target) != 0)
        return fail(e, errno, "%s", x->display);
    x->stage[0] = 0;
    return 0;
}

int sw_copy_receive(int fd, const char* dest, const char* name, unsigned flags,
                    const struct sw_copy_progress* progress, struct sw_copy_error* e) {
    e->msg[0] = 0;
    e->err = 0;
    struct rx* x = calloc(1, sizeof *x);
    struct sw_copy_entry* en = malloc(sizeof *en);
    if (!x || !en) {
        free(x);
        free(en);
        return fail(e, ENOMEM, "%s", dest);
    }
    x->parent = x->base = x->into = x->cached_fd = -1;
    x->progress = progress;
    int rc = receive(x, en, fd, dest, name, flags, e);
    if (x->cached_fd >= 0) close(x->cached_fd);
    if (x->base >= 0) close(x->base);
    if (x->parent >= 0 && x->stage[0]) remove_tree(x->parent, x->stage, 0);
    if (x->parent >= 0) close(x->parent);
    if (x->into >= 0) close(x->into);
    for (size_t i = 0; i < x->ndirs; i++) free(x->dirs[i].path);
    free(x->dirs);
    free(x);
    free(en);
    return rc;
}
