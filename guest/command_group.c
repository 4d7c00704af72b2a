/*
 * A cgroup per command (command_group.h). gVisor's `job` controller carries
 * no accounting, so its hierarchy costs nothing but the membership; an empty
 * named hierarchy would do as well on Linux, but gVisor does not carry one
 * over fork.
 */
#define _GNU_SOURCE
#include "command_group.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define MOUNT_POINT "/dev/.sandweave-groups"
#define MAX_LINGERING 1024
#define KILL_PASSES 4

static int root = -1; /* the hierarchy's root directory, detached */
static unsigned next_number = 1;
static struct command_group spare = {0, -1};

/* Released groups not yet removed: a background process of a command that
 * ended normally may keep its group for as long as it runs. */
static struct {
    unsigned number;
    int procs; /* closed by the sweep, off the command's path; -1 after */
    int doomed;
} lingering[MAX_LINGERING];
static int n_lingering;
static int n_fresh; /* the last n_fresh entries were released since the last sweep */
static int orphan_reaped;

/* capget/capset's structures (linux/capability.h, which musl's headers lack). */
#define CAPABILITY_VERSION_3 0x20080522
#define CAP_SYS_ADMIN 21
struct cap_header {
    unsigned version;
    int pid;
};
struct cap_data {
    unsigned effective, permitted, inheritable;
};

static void drop_sys_admin(void) {
    struct cap_header h = {CAPABILITY_VERSION_3, 0};
    struct cap_data d[2];
    prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0);
    if (syscall(SYS_capget, &h, d) != 0) return;
    unsigned bit = 1u << CAP_SYS_ADMIN; /* in the first word */
    if (!((d[0].effective | d[0].permitted | d[0].inheritable) & bit)) return;
    d[0].effective &= ~bit;
    d[0].permitted &= ~bit;
    d[0].inheritable &= ~bit;
    if (syscall(SYS_capset, &h, d) != 0) perror("sandweave-init: dropping CAP_SYS_ADMIN");
}

int command_group_setup(void) {
    if (mkdir(MOUNT_POINT, 0700) == 0 || errno == EEXIST) {
        if (mount("sandweave", MOUNT_POINT, "cgroup", MS_NOSUID | MS_NODEV | MS_NOEXEC, "job") ==
            0) {
            root = open(MOUNT_POINT, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            umount2(MOUNT_POINT, MNT_DETACH);
            /* Closed to other users even through /proc/1/fd, which gVisor
             * follows without Linux's ptrace check. */
            if (root >= 0) fchmod(root, 0700);
        }
        rmdir(MOUNT_POINT);
    }
    drop_sys_admin();
    return root >= 0 ? 0 : -1;
}

static void make_group(struct command_group* g) {
    g->number = 0;
    g->procs = -1;
    if (root < 0) return;
    char name[32];
    for (int tries = 0; tries < 3; tries++) {
        unsigned n = next_number++;
        if (next_number == 0) next_number = 1;
        snprintf(name, sizeof name, "c%u", n);
        if (mkdirat(root, name, 0700) != 0) {
            if (errno == EEXIST) continue; /* still lingering from a wrap-around */
            return;
        }
        snprintf(name, sizeof name, "c%u/cgroup.procs", n);
        g->procs = openat(root, name, O_RDWR | O_CLOEXEC);
        if (g->procs < 0) {
            snprintf(name, sizeof name, "c%u", n);
            unlinkat(root, name, AT_REMOVEDIR);
            return;
        }
        g->number = n;
        return;
    }
}

void command_group_prepare(void) {
    if (root >= 0 && spare.procs < 0) make_group(&spare);
}

void command_group_take(struct command_group* g) {
    if (spare.procs >= 0) {
        *g = spare;
        spare.number = 0;
        spare.procs = -1;
        return;
    }
    make_group(g);
}

int command_group_join(const struct command_group* g) {
    if (g->procs < 0) return -1;
    return write(g->procs, "0", 1) == 1 ? 0 : -1;
}

/* Signals the processes listed in the cgroup.procs open as `fd`; returns how
 * many it signalled. */
static int signal_listed(int fd, int sig) {
    static char buf[256 << 10];
    size_t len = 0;
    for (;;) {
        ssize_t n = pread(fd, buf + len, sizeof buf - 1 - len, (off_t)len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += (size_t)n;
        if (len == sizeof buf - 1) break; /* the rest on the next pass */
    }
    buf[len] = 0;
    int signalled = 0;
    for (char* p = buf; *p;) {
        char* end;
        long pid = strtol(p, &end, 10);
        if (end == p) break;
        if (pid > 1 && kill((pid_t)pid, sig) == 0) signalled++;
        p = *end ? end + 1 : end;
    }
    return signalled;
}

static int signal_group_fd(int fd, int sig) {
    int total = 0;
    for (int pass = 0; pass < (sig == SIGKILL ? KILL_PASSES : 1); pass++) {
        int n = signal_listed(fd, sig);
        total += n;
        if (n == 0) break;
    }
    return total;
}

int command_group_signal(const struct command_group* g, int sig) {
    if (g->procs < 0) return -1;
    return signal_group_fd(g->procs, sig);
}

void command_group_release(struct command_group* g, int doomed) {
    if (g->procs < 0) return;
    if (n_lingering < MAX_LINGERING) {
        lingering[n_lingering].number = g->number;
        lingering[n_lingering].procs = g->procs;
        lingering[n_lingering].doomed = doomed;
        n_lingering++;
        n_fresh++;
    } else {
        close(g->procs); /* its empty directory stays behind */
    }
    g->procs = -1;
    g->number = 0;
}

void command_group_orphan_reaped(void) {
    orphan_reaped = 1;
}

void command_group_sweep(void) {
    if (!n_fresh && !orphan_reaped) return;
    /* After an orphan's end, every lingering group may have emptied; else
     * only the ones released since the last sweep are worth a look. */
    int from = orphan_reaped ? 0 : n_lingering - n_fresh;
    n_fresh = 0;
    orphan_reaped = 0;
    for (int i = from; i < n_lingering;) {
        if (lingering[i].procs >= 0) {
            close(lingering[i].procs);
            lingering[i].procs = -1;
        }
        char name[32];
        snprintf(name, sizeof name, "c%u", lingering[i].number);
        /* Linux says EBUSY for a group with processes; gVisor ENOTEMPTY. */
        if (unlinkat(root, name, AT_REMOVEDIR) == 0 || (errno != EBUSY && errno != ENOTEMPTY)) {
            lingering[i] = lingering[--n_lingering];
            continue;
        }
        if (lingering[i].doomed) {
            snprintf(name, sizeof name, "c%u/cgroup.procs", lingering[i].number);
            int fd = openat(root, name, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                signal_group_fd(fd, SIGKILL);
                close(fd);
            }
        }
        i++;
    }
}
