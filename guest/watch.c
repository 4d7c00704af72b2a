/*
 * `init --watch [--recursive] [--entry] DIR`: a directory watch for the host
 * (the E2B API's WatchDir), run as an ordinary command with the caller's uid,
 * so the guest's own permissions decide what may be watched. inotify, in the
 * guest.
 *
 * Output on stdout, for a reader that trusts none of it (the host checks
 * every field against these limits):
 *   "ready\n" once every watch is in place (events before it are not seen);
 *   then one record per event: "T LEN NAME\n", T one of C (created or moved
 *   in), W (written), R (removed), N (renamed or moved out), M (attributes),
 *   LEN the decimal byte length of NAME (1 to 4096), NAME the path relative
 *   to DIR, any bytes but NUL.
 *   With --entry, a C, W or M record whose file still exists when its event
 *   is read comes after "E MODE SIZE MTIME OWNER GROUP LEN PATH\n": the file's
 *   lstat (MODE octal, SIZE and MTIME decimal), its owner and group as names
 *   of [A-Za-z0-9._-] from /etc/passwd and /etc/group (else the numbers), and
 *   its absolute PATH of LEN bytes (1 to 8192).
 * Exit: 0 when DIR itself is removed or moved away, 3 DIR does not exist,
 * 4 DIR is not a directory, 5 permission denied, 6 events were lost (the
 * kernel's queue overflowed) or more than the watch limit, 1 otherwise; a
 * one-line reason on stderr.
 */
#define _GNU_SOURCE
#include "watch.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#define WATCH_MAX_DIRS 8192
#define WATCH_MAX_DEPTH 64
#define WATCH_MAX_NAME 4096

#define WATCH_MASK                                                                 \
    (IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | \
     IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)

struct watched {
    int wd;
    char* rel; /* "" for DIR itself, else "sub/dir" */
};

static struct watched* dirs;
static size_t ndirs;
static int ifd = -1;
static int root_wd = -1;
static const char* watch_root;
static int with_entry;

static int fail(int code, const char* what, const char* path) {
    fprintf(stderr, "watch: %s '%s': %s\n", what, path, strerror(errno));
    return code;
}

static int code_of(int err) {
    if (err == ENOENT) return 3;
    if (err == ENOTDIR) return 4;
    if (err == EACCES || err == EPERM) return 5;
    return 1;
}

static const char* rel_of(int wd) {
    for (size_t i = 0; i < ndirs; ++i)
        if (dirs[i].wd == wd) return dirs[i].rel;
    return NULL;
}

static void forget(int wd) {
    for (size_t i = 0; i < ndirs; ++i)
        if (dirs[i].wd == wd) {
            free(dirs[i].rel);
            dirs[i] = dirs[--ndirs];
            return;
        }
}

static int emit(char type, const char* rel, const char* name);

/* Watches root/rel and, when recursive, every directory under it. Returns 0,
 * or the exit code of a failure (only the top one is an error; a
 * subdirectory that vanished or is unreadable meanwhile is skipped).
 * `announce`: a directory created while watched; what was made in it before
 * its watch was in place is reported as created (perhaps twice), not lost. */
static int add_tree(const char* root, const char* rel, int recursive, int depth, int announce) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s%s%s", root, *rel ? "/" : "", rel) >= (int)sizeof path)
        return depth == 0 ? (errno = ENAMETOOLONG, fail(1, "watch", root)) : 0;
    if (ndirs >= WATCH_MAX_DIRS) {
        fprintf(stderr, "watch: more than %d directories under '%s'\n", WATCH_MAX_DIRS, root);
        return 6;
    }
    int wd = inotify_add_watch(ifd, path, WATCH_MASK);
    if (wd < 0) return depth == 0 ? fail(code_of(errno), "watch", path) : 0;
    if (rel_of(wd) == NULL) {
        struct watched* grown = realloc(dirs, (ndirs + 1) * sizeof *dirs);
        char* copy = strdup(rel);
        if (grown == NULL || copy == NULL) {
            free(copy);
            if (grown != NULL) dirs = grown;
            fprintf(stderr, "watch: out of memory\n");
            return 1;
        }
        dirs = grown;
        dirs[ndirs].wd = wd;
        dirs[ndirs].rel = copy;
        ndirs++;
    }
    if (depth == 0) root_wd = wd;
    if (!recursive || depth >= WATCH_MAX_DEPTH) return 0;
    DIR* d = opendir(path);
    if (d == NULL) return 0;
    struct dirent* e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        if (announce && emit('C', rel, e->d_name) != 0) {
            rc = 7;
            break;
        }
        if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) continue;
        char sub[PATH_MAX];
        if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", e->d_name) >= (int)sizeof sub)
            continue;
        if (e->d_type == DT_UNKNOWN) {
            char full[PATH_MAX];
            struct stat st;
            if (snprintf(full, sizeof full, "%s/%s", root, sub) >= (int)sizeof full ||
                lstat(full, &st) != 0 || !S_ISDIR(st.st_mode))
                continue;
        }
        rc = add_tree(root, sub, recursive, depth + 1, announce);
    }
    closedir(d);
    return rc;
}

static int put(const char* buf, size_t n) {
    while (n > 0) {
        ssize_t w = write(1, buf, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* A user or group name as the reader takes it: [A-Za-z0-9._-], 1 to 32. */
static int plain_name(const char* s) {
    size_t n = strlen(s);
    if (n == 0 || n > 32) return 0;
    for (; *s; ++s)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '.' || *s == '_' || *s == '-'))
            return 0;
    return 1;
}

/* The name of uid (or gid, `group`) from the guest's own files, read
 * directly (no NSS in a static init); the last answer is kept. */
static void name_of(unsigned id, int group, char out[33]) {
    static unsigned last_id[2] = {(unsigned)-1, (unsigned)-1};
    static char last[2][33];
    if (last_id[group] == id) {
        memcpy(out, last[group], 33);
        return;
    }
    snprintf(out, 33, "%u", id);
    FILE* f = fopen(group ? "/etc/group" : "/etc/passwd", "re");
    if (f != NULL) {
        if (group) {
            struct group* g;
            while ((g = fgetgrent(f)) != NULL)
                if (g->gr_gid == id) {
                    if (plain_name(g->gr_name)) snprintf(out, 33, "%s", g->gr_name);
                    break;
                }
        } else {
            struct passwd* p;
            while ((p = fgetpwent(f)) != NULL)
                if (p->pw_uid == id) {
                    if (plain_name(p->pw_name)) snprintf(out, 33, "%s", p->pw_name);
                    break;
                }
        }
        fclose(f);
    }
    last_id[group] = id;
    memcpy(last[group], out, 33);
}

/* The "E ..." line of `rel`'s file, when it still exists. */
static int emit_entry(const char* rel) {
    char path[PATH_MAX];
    size_t rl = strlen(watch_root);
    int len = snprintf(path, sizeof path, "%s%s%s", watch_root,
                       rl > 0 && watch_root[rl - 1] == '/' ? "" : "/", rel);
    if (len <= 0 || len >= (int)sizeof path) return 0;
    struct stat st;
    if (lstat(path, &st) != 0) return 0; /* gone already: no entry */
    char owner[33], group[33];
    name_of((unsigned)st.st_uid, 0, owner);
    name_of((unsigned)st.st_gid, 1, group);
    char line[PATH_MAX + 160];
    int n = snprintf(line, sizeof line, "E %o %lld %lld %s %s %d %s\n", (unsigned)st.st_mode,
                     (long long)st.st_size, (long long)st.st_mtime, owner, group, len, path);
    if (n <= 0 || n >= (int)sizeof line) return 0;
    return put(line, (size_t)n);
}

static int emit(char type, const char* rel, const char* name) {
    char line[WATCH_MAX_NAME + 64];
    char full[WATCH_MAX_NAME + 2];
    int len = snprintf(full, sizeof full, "%s%s%s", rel, *rel ? "/" : "", name);
    if (len <= 0 || len > WATCH_MAX_NAME) return 0; /* nothing a reader could take */
    if (with_entry && type != 'R' && type != 'N' && emit_entry(full) != 0) return -1;
    int n = snprintf(line, sizeof line, "%c %d %s\n", type, len, full);
    return put(line, (size_t)n);
}

int watch_main(int argc, char** argv) {
    int recursive = 0;
    int i = 2;
    for (; i < argc; ++i) {
        if (strcmp(argv[i], "--recursive") == 0)
            recursive = 1;
        else if (strcmp(argv[i], "--entry") == 0)
            with_entry = 1;
        else
            break;
    }
    if (i + 1 != argc || argv[i][0] == '\0') {
        fprintf(stderr, "usage: %s --watch [--recursive] [--entry] DIR\n", argv[0]);
        return 2;
    }
    const char* root = argv[i];
    watch_root = root;
    struct stat st;
    if (stat(root, &st) != 0) return fail(code_of(errno), "watch", root);
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return fail(4, "watch", root);
    }
    ifd = inotify_init1(IN_CLOEXEC);
    if (ifd < 0) return fail(1, "inotify_init1 for", root);
    int rc = add_tree(root, "", recursive, 0, 0);
    if (rc != 0) return rc;
    if (put("ready\n", 6) != 0) return 1;
    char buf[64 * 1024] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t n = read(ifd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return fail(1, "reading inotify events of", root);
        for (char* p = buf; p < buf + n;) {
            struct inotify_event* ev = (struct inotify_event*)p;
            p += sizeof *ev + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                fprintf(stderr, "watch: events under '%s' were lost (queue overflow)\n", root);
                return 6;
            }
            if (ev->wd == root_wd && (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)))
                return 0;
            if (ev->mask & IN_IGNORED) {
                forget(ev->wd);
                continue;
            }
            const char* rel = rel_of(ev->wd);
            if (rel == NULL || ev->len == 0 || ev->name[0] == '\0') continue;
            char type = (ev->mask & (IN_CREATE | IN_MOVED_TO)) ? 'C'
                        : (ev->mask & IN_MODIFY)               ? 'W'
                        : (ev->mask & IN_DELETE)               ? 'R'
                        : (ev->mask & IN_MOVED_FROM)           ? 'N'
                        : (ev->mask & IN_ATTRIB)               ? 'M'
                                                               : 0;
            if (type == 0) continue;
            if (emit(type, rel, ev->name) != 0) return 0; /* the reader is gone */
            if (recursive && type == 'C' && (ev->mask & IN_ISDIR)) {
                char sub[PATH_MAX];
                if (snprintf(sub, sizeof sub, "%s%s%s", rel, *rel ? "/" : "", ev->name) <
                    (int)sizeof sub) {
                    rc = add_tree(root, sub, 1, 1, 1);
                    if (rc == 7) return 0; /* the reader is gone */
                    if (rc != 0) return rc;
                }
            }
        }
    }
}
