/*
 * The guest agent: PID 1 serving the host's requests over the socket the
 * supervisor donated as fd 0 (docs/agent.md). It starts each command as its
 * own fork and execve (so the audit log sees it), streams its output back
 * under a per-command window, forwards signals, enforces timeouts on
 * everything the command started (its cgroup, command_group.h), and reaps
 * every orphan as init must.
 *
 * Single-threaded: one poll() loop over the channel, a signalfd and each
 * command's descriptors. Everything the host sends is checked; a malformed
 * frame is answered with SW_ERROR and the input discarded.
 */
#define _GNU_SOURCE
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "command_group.h"
#include "wire/agent_proto.h"
#include "wire/byte_order.h"
#include "wire/copy.h"

#define CHANNEL 0
#define READ_CHUNK (64u << 10)
#define OUT_CAP (4u << 20)  /* queued frames to the host */
#define OUT_HIGH (2u << 20) /* stop reading commands above this */
#define IN_CAP (SW_AGENT_HEADER + SW_AGENT_MAX_PAYLOAD + READ_CHUNK)
#define MAX_ARGS 4096

struct session {
    uint32_t id; /* 0: slot free */
    pid_t pid;   /* 0 once reaped */
    int status;  /* wait status, valid when reaped */
    int reaped;
    int in_fd;          /* command's stdin (pipe or pty master); -1 */
    int out_fd, err_fd; /* its output; -1 once drained */
    int err_pipe;       /* a forked child's failure report; -1 */
    char fail_stage;    /* a vfork child's failure: 'c' chdir, 'e' exec; 0 */
    int fail_errno;
    int pty;
    int stdin_eof; /* host sent EOF: close in_fd once pending is written */
    int timed_out;
    uint64_t deadline_ms; /* 0: none */
    uint32_t credit;      /* output bytes we may still send */
    char* pending;        /* stdin not yet written */
    size_t pending_len;
    uint32_t stdin_written;     /* not yet acknowledged */
    struct command_group group; /* every process the command started */
    int killed;                 /* SIGKILL sent to its tree: nothing of it may stay */
};

static struct session sessions[SW_AGENT_MAX_SESSIONS];
static unsigned char inbuf[IN_CAP];
static size_t in_len;
static unsigned char outbuf[OUT_CAP];
static size_t out_len;
static int connected = 1; /* 0 after EOF: probe fd 0 now and then */

/* What a command must not inherit from PID 1, found once at start: the
 * signals whose disposition is not the default (execve resets handlers but
 * keeps SIG_IGN), and /dev/null for a command without stdin. Each system
 * call of the vfork child costs tens of microseconds under the ptrace
 * platform, so it makes only the ones this command needs. */
static int changed_signals[32];
static int n_changed_signals;
static int devnull = -1;
/* PID 1's own credentials are root's with no supplementary groups, and its
 * directory: a command asking for the same skips setgroups/setres*id/chdir. */
static int plain_root;
static char agent_cwd[256];
/* A vfork child's exec failure, written into our memory (which it borrows
 * until its execve) instead of through a pipe; read when vfork returns. */
static volatile struct {
    char stage; /* 0: none */
    int err;
} vfork_failure;

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- frames to the host ---------------------------------------------------- */

/* Reserves a frame of `len` payload bytes in the output queue; NULL when full
 * (the frame is then dropped: only for frames the host can live without). */
static unsigned char* frame_begin(uint8_t type, uint32_t session, uint32_t len) {
    if (!connected || out_len + SW_AGENT_HEADER + len > OUT_CAP) return NULL;
    unsigned char* h = outbuf + out_len;
    sw_put32(h, len);
    h[4] = type;
    h[5] = 0;
    h[6] = h[7] = 0;
    sw_put32(h + 8, session);
    out_len += SW_AGENT_HEADER + len;
    return h + SW_AGENT_HEADER;
}

static void send_u32(uint8_t type, uint32_t session, uint32_t v) {
    unsigned char* p = frame_begin(type, session, 4);
    if (p) sw_put32(p, v);
}

static void send_text(uint8_t type, uint32_t session, const char* text) {
    size_t n = strlen(text);
    unsigned char* p = frame_begin(type, session, (uint32_t)n);
    if (p) memcpy(p, text, n);
}

static void send_exit(struct session* s, uint32_t kind, int32_t code, const char* msg) {
    size_t n = msg ? strlen(msg) : 0;
    unsigned char* p = frame_begin(SW_EXIT, s->id, (uint32_t)(12 + n));
    if (!p) return;
    sw_put32(p, kind);
    sw_put32(p + 4, (uint32_t)code);
    sw_put32(p + 8, (uint32_t)n);
    if (n) memcpy(p + 12, msg, n);
}

static void flush_out(void) {
    size_t off = 0;
    while (off < out_len) {
        ssize_t n = write(CHANNEL, outbuf + off, out_len - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) break;
        /* The host side is gone: drop what was queued for it. */
        connected = 0;
        off = out_len;
        break;
    }
    memmove(outbuf, outbuf + off, out_len - off);
    out_len -= off;
}

/* ---- sessions ---------------------------------------------------------------- */

static struct session* find(uint32_t id) {
    if (id == 0) return NULL;
    for (int i = 0; i < SW_AGENT_MAX_SESSIONS; i++)
        if (sessions[i].id == id) return &sessions[i];
    return NULL;
}

static void close_fd(int* fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

static void release(struct session* s) {
    command_group_release(&s->group, s->killed || s->timed_out);
    close_fd(&s->in_fd);
    close_fd(&s->out_fd);
    close_fd(&s->err_fd);
    close_fd(&s->err_pipe);
    free(s->pending);
    memset(s, 0, sizeof *s);
    s->in_fd = s->out_fd = s->err_fd = s->err_pipe = -1;
    s->group.procs = -1;
}

/* Sends `sig` to every process the command started: its cgroup's, which
 * nothing of it can leave. Without one (an init that could not make the
 * hierarchy), the session `sid` (the command's setsid made its pid the session
 * id): the process group, then a /proc scan for what left the group. Only
 * PID 1 runs this, so hidepid hides nothing. */
static void kill_tree(struct session* s, int sig) {
    pid_t sid = s->pid;
    if (sig == SIGKILL) s->killed = 1;
    /* First: a forked copier may not have joined its group yet. Once reaped,
     * its pid may be another process's. */
    if (!s->reaped) kill(sid, sig);
    if (command_group_signal(&s->group, sig) >= 0) return;
    kill(-sid, sig);
    for (int pass = 0; pass < 2; pass++) {
        DIR* d = opendir("/proc");
        if (!d) return;
        struct dirent* e;
        while ((e = readdir(d)) != NULL) {
            char* end;
            long pid = strtol(e->d_name, &end, 10);
            if (*end || pid <= 1) continue;
            char path[64], buf[512];
            snprintf(path, sizeof path, "/proc/%ld/stat", pid);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) continue;
            ssize_t n = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (n <= 0) continue;
            buf[n] = 0;
            char* p = strrchr(buf, ')'); /* comm may hold spaces and parens */
            int ppid, pgrp, session;
            char state;
            if (p && sscanf(p + 1, " %c %d %d %d", &state, &ppid, &pgrp, &session) == 4 &&
                session == sid)
                kill((pid_t)pid, sig);
        }
        closedir(d);
    }
}

/* The session ends once its process is reaped and its output drained. */
static void maybe_finish(struct session* s) {
    if (!s->reaped || s->out_fd >= 0 || s->err_fd >= 0) return;
    if (out_len + SW_AGENT_HEADER + 512 > OUT_CAP) return; /* room for EXIT first */
    int failed_errno = s->fail_errno;
    char stage = s->fail_stage;
    if (s->err_pipe >= 0) {
        unsigned char rep[5];
        if (read(s->err_pipe, rep, sizeof rep) == (ssize_t)sizeof rep) {
            stage = (char)rep[0];
            failed_errno = (int)sw_get32(rep + 1);
        }
    }
    if (failed_errno) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s: %s", stage == 'c' ? "chdir" : "exec",
                 strerror(failed_errno));
        send_exit(s, SW_NOT_STARTED, failed_errno, msg);
    } else if (s->timed_out) {
        send_exit(s, SW_TIMED_OUT, WIFSIGNALED(s->status) ? WTERMSIG(s->status) : SIGKILL, NULL);
    } else if (WIFSIGNALED(s->status)) {
        send_exit(s, SW_SIGNALED, WTERMSIG(s->status), NULL);
    } else {
        send_exit(s, SW_EXITED, WEXITSTATUS(s->status), NULL);
    }
    release(s);
}

/* Reads one chunk of output into a frame; closes the descriptor at EOF, or
 * once the command has exited and nothing more is buffered. */
static void pump(struct session* s, int* fd, uint8_t type) {
    if (*fd < 0 || s->credit == 0) return;
    size_t room = OUT_CAP - out_len;
    if (room < SW_AGENT_HEADER + 1024 || out_len > OUT_HIGH) return;
    size_t want = READ_CHUNK;
    if (want > s->credit) want = s->credit;
    if (want > room - SW_AGENT_HEADER) want = room - SW_AGENT_HEADER;
    unsigned char* h = outbuf + out_len;
    ssize_t n = read(*fd, h + SW_AGENT_HEADER, want);
    if (n > 0) {
        sw_put32(h, (uint32_t)n);
        h[4] = type;
        h[5] = h[6] = h[7] = 0;
        sw_put32(h + 8, s->id);
        out_len += SW_AGENT_HEADER + (size_t)n;
        s->credit -= (uint32_t)n;
        return;
    }
    if (n < 0 && errno == EINTR) return;
    if (n < 0 && errno == EAGAIN && !s->reaped) return;
    /* EOF, EIO (a pty whose last slave closed), or drained after exit. */
    if (s->pty && fd == &s->out_fd) close_fd(&s->in_fd); /* the same terminal */
    close_fd(fd);
}

static void write_stdin(struct session* s) {
    while (s->pending_len > 0 && s->in_fd >= 0) {
        ssize_t n = write(s->in_fd, s->pending, s->pending_len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) return;
        if (n < 0) { /* the command closed its stdin: discard the rest */
            s->stdin_written += (uint32_t)s->pending_len;
            s->pending_len = 0;
            if (!s->pty) close_fd(&s->in_fd);
            break;
        }
        memmove(s->pending, s->pending + n, s->pending_len - (size_t)n);
        s->pending_len -= (size_t)n;
        s->stdin_written += (uint32_t)n;
    }
    if (s->stdin_written) {
        send_u32(SW_STDIN_ACK, s->id, s->stdin_written);
        s->stdin_written = 0;
    }
    if (s->pending_len == 0 && s->stdin_eof && s->in_fd >= 0) {
        if (s->pty) {
            /* A pty has no half-close: EOF is the terminal's ^D. */
            struct termios t;
            if (tcgetattr(s->in_fd, &t) == 0) {
                char eof = (char)t.c_cc[VEOF];
                if (write(s->in_fd, &eof, 1) < 0) {
                }
            }
            s->stdin_eof = 0;
        } else {
            close_fd(&s->in_fd);
        }
    }
}

/* This runtime's pty has no ISIG: the ^C, ^\\ and ^Z a person types would
 * reach the program as bytes. Do what a kernel line discipline does: signal
 * the terminal's foreground process group and drop the character. Returns the
 * bytes left in `data`. */
static size_t terminal_signals(struct session* s, unsigned char* data, size_t len) {
    struct termios t;
    if (s->in_fd < 0 || tcgetattr(s->in_fd, &t) != 0 || !(t.c_lflag & ISIG)) return len;
    size_t kept = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = data[i];
        int sig = c == t.c_cc[VINTR]   ? SIGINT
                  : c == t.c_cc[VQUIT] ? SIGQUIT
                  : c == t.c_cc[VSUSP] ? SIGTSTP
                                       : 0;
        if (sig && c != _POSIX_VDISABLE) {
            pid_t fg = 0;
            if (ioctl(s->in_fd, TIOCGPGRP, &fg) != 0 || fg <= 0) fg = s->pid;
            kill(-fg, sig);
            continue;
        }
        data[kept++] = c;
    }
    return kept;
}

/* ---- starting a command -------------------------------------------------------- */

struct exec_req {
    struct command_group group;
    uint32_t uid, gid, flags, timeout_ms;
    uint16_t rows, cols;
    char* cwd;
    char* argv[MAX_ARGS + 1];
    char* env[MAX_ARGS + 1];
};

/* Parses a string at *p into a fresh NUL-terminated copy inside `arena`
 * (strings may not hold NUL: argv and env cannot). */
static int take_string(const unsigned char** p, const unsigned char* end, char** arena,
                       char** out) {
    if (end - *p < 4) return -1;
    uint32_t n = sw_get32(*p);
    *p += 4;
    if ((uint32_t)(end - *p) < n || memchr(*p, 0, n)) return -1;
    memcpy(*arena, *p, n);
    (*arena)[n] = 0;
    *out = *arena;
    *arena += n + 1;
    *p += n;
    return 0;
}

static int take_list(const unsigned char** p, const unsigned char* end, char** arena, char** out) {
    if (end - *p < 4) return -1;
    uint32_t count = sw_get32(*p);
    *p += 4;
    if (count > MAX_ARGS) return -1;
    for (uint32_t i = 0; i < count; i++)
        if (take_string(p, end, arena, &out[i]) != 0) return -1;
    out[count] = NULL;
    return 0;
}

static const char* env_path(char* const* env) {
    for (; *env; env++)
        if (strncmp(*env, "PATH=", 5) == 0) return *env + 5;
    return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
}

/* In the child: exec argv[0] as execvp would, searching the command's own PATH. */
static int exec_search(char* const* argv, char* const* env) {
    if (strchr(argv[0], '/')) {
        execve(argv[0], argv, env);
        return errno;
    }
    const char* path = env_path(env);
    int saw_eacces = 0;
    char file[4096];
    while (*path) {
        const char* colon = strchrnul(path, ':');
        size_t dlen = (size_t)(colon - path);
        if (dlen + 1 + strlen(argv[0]) + 1 <= sizeof file) {
            if (dlen == 0) {
                snprintf(file, sizeof file, "%s", argv[0]);
            } else {
                memcpy(file, path, dlen);
                snprintf(file + dlen, sizeof file - dlen, "/%s", argv[0]);
            }
            execve(file, argv, env);
            if (errno == EACCES)
                saw_eacces = 1;
            else if (errno != ENOENT && errno != ENOTDIR)
                return errno;
        }
        path = *colon ? colon + 1 : colon;
    }
    return saw_eacces ? EACCES : ENOENT;
}

/* `report` is the pipe of a forked child, or -1 in a vfork child. */
static void __attribute__((noreturn)) child_fail(int report, char stage, int err) {
    if (report < 0) {
        vfork_failure.err = err;
        vfork_failure.stage = stage;
        _exit(127);
    }
    unsigned char rep[5];
    rep[0] = (unsigned char)stage;
    sw_put32(rep + 1, (uint32_t)err);
    if (write(report, rep, sizeof rep) < 0) {
    }
    _exit(127);
}

/* ---- sandweave cp: the copier, in a fork of its own ---------------------------- */

static void __attribute__((noreturn)) copy_child(const struct exec_req* r) {
    struct sw_copy_error e;
    int rc;
    /* No execve closes the agent's descriptors here: without this the copier
     * would hold its own stdin pipe's write end and never see the EOF. */
    if (syscall(SYS_close_range, 3u, ~0u, 0u) != 0) {
        DIR* d = opendir("/proc/self/fd");
        int keep = d ? dirfd(d) : -1;
        struct dirent* de;
        while (d && (de = readdir(d)) != NULL) {
            int fd = atoi(de->d_name);
            if (fd > 2 && fd != keep) close(fd);
        }
        if (d) closedir(d);
    }
    if (r->flags & SW_EXEC_COPY_OUT)
        rc = sw_copy_send(r->argv[0], 1, NULL, &e);
    else
        rc = sw_copy_receive(0, r->argv[0], r->argv[1] ? r->argv[1] : "",
                             (r->flags & SW_EXEC_COPY_CONTENTS) ? SW_COPY_CONTENTS : 0, NULL, &e);
    if (rc != 0) {
        size_t n = strlen(e.msg);
        e.msg[n < sizeof e.msg - 1 ? n : n - 1] = '\n';
        if (write(2, e.msg, n < sizeof e.msg - 1 ? n + 1 : n) < 0) {
        }
    }
    _exit(rc == 0 ? 0 : 1);
}

/* The child of start_command, between vfork and execve: system calls only
 * (it runs on the agent's memory), never returns. */
static void __attribute__((noreturn))
exec_child(const struct exec_req* r, int master, const char* slave, int in, int out, int err,
           int report) {
    sigset_t none;
    sigemptyset(&none);
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int i = 0; i < n_changed_signals; i++) sigaction(changed_signals[i], &dfl, NULL);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid();
    command_group_join(&r->group);
    int i0, i1, i2;
    if (master >= 0) {
        int fd = open(slave, O_RDWR | O_CLOEXEC);
        if (fd < 0) child_fail(report, 'e', errno);
        ioctl(fd, TIOCSCTTY, 0);
        i0 = i1 = i2 = fd;
    } else {
        i0 = in >= 0 ? in : devnull >= 0 ? devnull : open("/dev/null", O_RDONLY | O_CLOEXEC);
        i1 = out;
        i2 = err;
    }
    if (dup2(i0, 0) < 0 || dup2(i1, 1) < 0 || dup2(i2, 2) < 0) child_fail(report, 'e', errno);
    /* The directory is entered with init's rights, as runsc exec does: a
     * template may give uid 1001 a cwd only root can open. */
    if (r->cwd[0] && strcmp(r->cwd, agent_cwd) != 0 && chdir(r->cwd) != 0)
        child_fail(report, 'c', errno);
    /* Raw system calls: this task's credentials only (no libc broadcast). */
    int same_ids = plain_root && r->uid == 0 && r->gid == 0;
    if (!same_ids && (syscall(SYS_setgroups, 0, NULL) != 0 ||
                      syscall(SYS_setresgid, r->gid, r->gid, r->gid) != 0 ||
                      syscall(SYS_setresuid, r->uid, r->uid, r->uid) != 0))
        child_fail(report, 'e', errno);
    /* A non-root user gets no capabilities (setresuid dropped them) and cannot
     * regain any through setuid files, as with runsc exec. */
    if (r->uid != 0) prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
    if (r->flags & (SW_EXEC_COPY_OUT | SW_EXEC_COPY_IN)) copy_child(r);
    child_fail(report, 'e', exec_search(r->argv, r->env));
}

static void start_command(uint32_t id, const unsigned char* p, const unsigned char* end) {
    static struct exec_req r;
    static char arena[SW_AGENT_MAX_PAYLOAD + 2 * MAX_ARGS + 16];
    char* a = arena;
    if (id == 0 || find(id)) {
        send_text(SW_ERROR, id, "session id 0 or already in use");
        return;
    }
    if (end - p < 20) goto bad;
    r.uid = sw_get32(p);
    r.gid = sw_get32(p + 4);
    r.flags = sw_get32(p + 8);
    r.timeout_ms = sw_get32(p + 12);
    r.rows = sw_get16(p + 16);
    r.cols = sw_get16(p + 18);
    p += 20;
    if (take_string(&p, end, &a, &r.cwd) || take_list(&p, end, &a, r.argv) ||
        take_list(&p, end, &a, r.env) || p != end || r.argv[0] == NULL || !r.argv[0][0])
        goto bad;

    struct session* s = NULL;
    for (int i = 0; i < SW_AGENT_MAX_SESSIONS && !s; i++)
        if (sessions[i].id == 0) s = &sessions[i];
    if (!s) {
        send_text(SW_ERROR, id, "too many commands running in this sandbox");
        struct session tmp = {.id = id};
        send_exit(&tmp, SW_NOT_STARTED, EAGAIN, "too many commands running in this sandbox");
        return;
    }

    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, rep[2] = {-1, -1};
    int master = -1;
    char slave[64] = "";
    int copying = (r.flags & (SW_EXEC_COPY_OUT | SW_EXEC_COPY_IN)) != 0;
    if (copying && pipe2(rep, O_CLOEXEC) != 0) goto sys;
    if (r.flags & SW_EXEC_PTY) {
        master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (master < 0 || grantpt(master) || unlockpt(master) ||
            ptsname_r(master, slave, sizeof slave))
            goto sys;
        struct winsize ws = {.ws_row = r.rows ? r.rows : 24, .ws_col = r.cols ? r.cols : 80};
        ioctl(master, TIOCSWINSZ, &ws);
    } else {
        if (pipe2(out, O_CLOEXEC) || pipe2(err, O_CLOEXEC)) goto sys;
        if ((r.flags & SW_EXEC_STDIN) && pipe2(in, O_CLOEXEC)) goto sys;
    }

    /* vfork: the child borrows our address space until its execve, so the
     * runtime builds one new address space per command instead of two (a
     * fork's copy, then the exec's). exec_child only makes system calls. */
    /* A copy runs the agent's own code in the child: a real fork, which
     * reports a failure through the pipe `rep`. */
    if (copying && (r.flags & SW_EXEC_PTY)) goto bad_fds;
    vfork_failure.stage = 0;
    vfork_failure.err = 0;
    command_group_take(&r.group);
    pid_t pid = copying ? fork() : vfork();
    if (pid < 0) {
        command_group_release(&r.group, 0);
        goto sys;
    }
    if (pid == 0) exec_child(&r, master, slave, in[0], out[1], err[1], rep[1]);

    if (rep[1] >= 0) close(rep[1]);
    memset(s, 0, sizeof *s);
    s->id = id;
    s->pid = pid;
    s->group = r.group;
    s->err_pipe = rep[0];
    if (!copying) {
        s->fail_stage = vfork_failure.stage;
        s->fail_errno = vfork_failure.err;
    }
    s->credit = SW_AGENT_WINDOW;
    s->in_fd = s->out_fd = s->err_fd = -1;
    if (master >= 0) {
        s->pty = 1;
        s->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 3);
        s->out_fd = master;
    } else {
        close(out[1]);
        close(err[1]);
        s->out_fd = out[0];
        s->err_fd = err[0];
        if (in[0] >= 0) {
            close(in[0]);
            s->in_fd = in[1];
        }
    }
    if (s->in_fd >= 0) fcntl(s->in_fd, F_SETFL, O_NONBLOCK);
    if (s->out_fd >= 0) fcntl(s->out_fd, F_SETFL, O_NONBLOCK);
    if (s->err_fd >= 0) fcntl(s->err_fd, F_SETFL, O_NONBLOCK);
    if (r.timeout_ms) s->deadline_ms = now_ms() + r.timeout_ms;
    send_u32(SW_STARTED, id, (uint32_t)pid);
    return;

sys : {
    int e = errno;
    int fds[] = {in[0], in[1], out[0], out[1], err[0], err[1], rep[0], rep[1], master};
    for (unsigned i = 0; i < sizeof fds / sizeof fds[0]; i++)
        if (fds[i] >= 0) close(fds[i]);
    struct session tmp = {.id = id};
    char msg[128];
    snprintf(msg, sizeof msg, "cannot start the command: %s", strerror(e));
    send_exit(&tmp, SW_NOT_STARTED, e, msg);
    return;
}
bad_fds:
    errno = EINVAL;
    goto sys;
bad : {
    send_text(SW_ERROR, id, "malformed EXEC request");
    struct session tmp = {.id = id};
    send_exit(&tmp, SW_NOT_STARTED, EINVAL, "malformed EXEC request");
}
}

/* ---- requests from the host ------------------------------------------------------ */

static void end_all_sessions(void) {
    for (int i = 0; i < SW_AGENT_MAX_SESSIONS; i++) {
        struct session* s = &sessions[i];
        if (!s->id) continue;
        if (s->pid && !s->reaped) kill_tree(s, SIGKILL);
        /* Reaped later by the loop as an orphan; the session is forgotten. */
        release(s);
    }
}

static void handle(uint8_t type, uint32_t id, const unsigned char* p, uint32_t len) {
    const unsigned char* end = p + len;
    struct session* s = find(id);
    switch (type) {
        case SW_HELLO: {
            if (len < 20 || sw_get32(p) != SW_AGENT_PROTOCOL) {
                send_text(SW_ERROR, 0, "unsupported protocol version");
                return;
            }
            end_all_sessions();
            out_len = 0; /* whatever was queued belonged to the previous host */
            static const char name[] = "sandweave-init";
            unsigned char* q = frame_begin(SW_HELLO, 0, 4 + 16 + 4 + sizeof name - 1);
            if (!q) return;
            sw_put32(q, SW_AGENT_PROTOCOL);
            memcpy(q + 4, p + 4, 16);
            sw_put32(q + 20, sizeof name - 1);
            memcpy(q + 24, name, sizeof name - 1);
            return;
        }
        case SW_EXEC:
            start_command(id, p, end);
            return;
        case SW_STDIN:
            if (!s) return; /* ended meanwhile */
            if (len == 0) {
                s->stdin_eof = 1;
            } else if (s->in_fd < 0) {
                send_u32(SW_STDIN_ACK, id, len); /* nobody reads it: drop */
                return;
            } else {
                if (s->pending_len + len > SW_AGENT_STDIN_WINDOW) {
                    send_text(SW_ERROR, id, "stdin beyond the window");
                    return;
                }
                if (s->pty) {
                    /* Our own copy of the frame's bytes, in the input buffer. */
                    uint32_t kept = (uint32_t)terminal_signals(s, (unsigned char*)p, len);
                    s->stdin_written += len - kept; /* acknowledged as consumed */
                    len = kept;
                }
                char* grown = realloc(s->pending, s->pending_len + len + 1);
                if (!grown) {
                    send_text(SW_ERROR, id, "out of memory for stdin");
                    return;
                }
                s->pending = grown;
                memcpy(s->pending + s->pending_len, p, len);
                s->pending_len += len;
            }
            write_stdin(s);
            return;
        case SW_SIGNAL: {
            if (!s || len != 8) return;
            uint32_t sig = sw_get32(p), scope = sw_get32(p + 4);
            if (sig == 0 || sig >= 65 || !s->pid || s->reaped) return;
            if (scope == SW_TO_TREE)
                kill_tree(s, (int)sig);
            else if (scope == SW_TO_GROUP && kill(-s->pid, (int)sig) == 0) {
            } else if (scope == SW_TO_GROUP)
                kill(s->pid, (int)sig); /* before its setsid() */
            else
                kill(s->pid, (int)sig);
            return;
        }
        case SW_RESIZE: {
            if (!s || !s->pty || len != 4 || s->in_fd < 0) return;
            struct winsize ws = {.ws_row = sw_get16(p), .ws_col = sw_get16(p + 2)}, was;
            int changed = ioctl(s->in_fd, TIOCGWINSZ, &was) != 0 || was.ws_row != ws.ws_row ||
                          was.ws_col != ws.ws_col;
            if (ioctl(s->in_fd, TIOCSWINSZ, &ws) != 0 || !changed) return;
            /* Linux tells the foreground process group of a resized terminal
             * with SIGWINCH; gVisor's pty does not, so the agent does. */
            pid_t fg = 0;
            if (ioctl(s->in_fd, TIOCGPGRP, &fg) != 0 || fg <= 0) fg = s->pid;
            kill(-fg, SIGWINCH);
            return;
        }
        case SW_OUTPUT_ACK: {
            if (!s || len != 4) return;
            uint64_t c = (uint64_t)s->credit + sw_get32(p);
            s->credit = c > SW_AGENT_WINDOW ? SW_AGENT_WINDOW : (uint32_t)c;
            return;
        }
        default:
            send_text(SW_ERROR, id, "unknown request type");
    }
}

static void read_channel(void) {
    ssize_t n = read(CHANNEL, inbuf + in_len, IN_CAP - in_len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
        /* The supervisor went away. Commands keep running; a restored
         * sandbox's new supervisor says HELLO on the same descriptor. */
        connected = 0;
        in_len = 0;
        out_len = 0;
        return;
    }
    if (!connected) {
        connected = 1;
    }
    in_len += (size_t)n;
    size_t off = 0;
    while (in_len - off >= SW_AGENT_HEADER) {
        const unsigned char* h = inbuf + off;
        uint32_t len = sw_get32(h);
        if (len > SW_AGENT_MAX_PAYLOAD || h[5] || h[6] || h[7]) {
            send_text(SW_ERROR, 0, "malformed frame: input discarded");
            in_len = off = 0;
            return;
        }
        if (in_len - off < SW_AGENT_HEADER + len) break;
        handle(h[4], sw_get32(h + 8), h + SW_AGENT_HEADER, len);
        off += SW_AGENT_HEADER + len;
    }
    memmove(inbuf, inbuf + off, in_len - off);
    in_len -= off;
}

static void reap(void) {
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno == EINTR) continue;
        if (pid <= 0) return;
        int own = 0;
        for (int i = 0; i < SW_AGENT_MAX_SESSIONS; i++) {
            struct session* s = &sessions[i];
            if (s->id && s->pid == pid && !s->reaped) {
                own = 1;
                s->reaped = 1;
                s->status = status;
                /* What the command left behind goes with it when it was
                 * killed for its timeout. */
                if (s->timed_out) kill_tree(s, SIGKILL);
            }
        }
        if (!own) command_group_orphan_reaped();
    }
}

static void add_changed_signal(int sig) {
    for (int i = 0; i < n_changed_signals; i++)
        if (changed_signals[i] == sig) return;
    changed_signals[n_changed_signals++] = sig;
}

/* The signals this process was started with ignored (the only
 * dispositions an execve keeps). PID 1 has none: the runtime creates it with
 * every signal at its default, and nothing of ours installs a handler but
 * agent_serve's SIGPIPE. Anything else (the agent run by hand, as in a test)
 * asks sigaction(2), 31 system calls that PID 1 keeps off the path to the
 * first command. */
static void find_changed_signals(void) {
    if (getpid() == 1) return;
    for (int sig = 1; sig < 32; sig++) {
        struct sigaction old;
        if (sig != SIGKILL && sig != SIGSTOP && sigaction(sig, NULL, &old) == 0 &&
            old.sa_handler != SIG_DFL)
            add_changed_signal(sig);
    }
}

int agent_serve(const sigset_t* signals) {
    for (int i = 0; i < SW_AGENT_MAX_SESSIONS; i++) {
        struct session* s = &sessions[i];
        s->in_fd = s->out_fd = s->err_fd = s->err_pipe = -1; /* not 0: that is the channel */
        s->group.procs = -1;
    }
    /* A command that stops reading its stdin, or a host that goes away,
     * must be an EPIPE here, never the end of PID 1. */
    find_changed_signals();
    signal(SIGPIPE, SIG_IGN);
    add_changed_signal(SIGPIPE);
    devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    uid_t ru, eu, su;
    gid_t rg, eg, sg;
    plain_root = getresuid(&ru, &eu, &su) == 0 && getresgid(&rg, &eg, &sg) == 0 &&
                 (ru | eu | su | rg | eg | sg) == 0 && getgroups(0, NULL) == 0;
    if (!getcwd(agent_cwd, sizeof agent_cwd)) agent_cwd[0] = 0;
    fcntl(CHANNEL, F_SETFL, O_NONBLOCK);
    int sfd = signalfd(-1, signals, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sfd < 0) return -1;
    static struct pollfd pfd[2 + 3 * SW_AGENT_MAX_SESSIONS];
    static struct session* owner[2 + 3 * SW_AGENT_MAX_SESSIONS];
    static int which[2 + 3 * SW_AGENT_MAX_SESSIONS];
    for (;;) {
        uint64_t now = 0; /* read only when a command has a deadline: a system call */
        int timeout = connected ? -1 : 1000;
        for (int i = 0; i < SW_AGENT_MAX_SESSIONS; i++) {
            struct session* s = &sessions[i];
            if (!s->id || !s->deadline_ms || s->reaped) continue;
            if (!now) now = now_ms();
            if (s->deadline_ms <= now) {
                if (!s->timed_out) {
                    s->timed_out = 1;
                    kill_tree(s, SIGKILL);
                }
                continue;
            }
            uint64_t left = s->deadline_ms - now;
            if (timeout < 0 || left < (uint64_t)timeout) timeout = (int)left;
        }
        int n = 0;
        pfd[n] = (struct pollfd){.fd = sfd, .events = POLLIN};
        owner[n++] = NULL;
        int channel_at = -1;
        if (connected) {
            channel_at = n;
            pfd[n] = (struct pollfd){.fd = CHANNEL, .events = in_len < IN_CAP ? POLLIN : 0};
            owner[n++] = NULL;
        }
        int room = out_len <= OUT_HIGH;
        for (int i = 0; i < SW_AGENT_MAX_SESSIONS; i++) {
            struct session* s = &sessions[i];
            if (!s->id) continue;
            if (s->reaped) {
                /* Drain what is buffered, then end (no poll: the pipe may
                 * stay open in a background process). */
                pump(s, &s->out_fd, SW_STDOUT);
                pump(s, &s->err_fd, SW_STDERR);
                maybe_finish(s);
                if (!s->id) continue;
                if (s->out_fd >= 0 || s->err_fd >= 0)
                    timeout = timeout < 0 || timeout > 10 ? 10 : timeout;
                continue;
            }
            if (room && s->credit) {
                if (s->out_fd >= 0) {
                    pfd[n] = (struct pollfd){.fd = s->out_fd, .events = POLLIN};
                    owner[n] = s, which[n++] = 1;
                }
                if (s->err_fd >= 0) {
                    pfd[n] = (struct pollfd){.fd = s->err_fd, .events = POLLIN};
                    owner[n] = s, which[n++] = 2;
                }
            }
            if (s->pending_len && s->in_fd >= 0) {
                pfd[n] = (struct pollfd){.fd = s->in_fd, .events = POLLOUT};
                owner[n] = s, which[n++] = 3;
            }
        }
        /* What the loop above queued (an EXIT, say) goes out before we sleep. */
        if (out_len && connected) flush_out();
        if (channel_at >= 0 && out_len) pfd[channel_at].events |= POLLOUT;
        int ready = poll(pfd, (nfds_t)n, timeout);
        if (ready < 0 && errno != EINTR) return -1;
        if (!connected) read_channel(); /* a restored sandbox reconnects here */
        for (int i = 0; i < n && ready > 0; i++) {
            if (!pfd[i].revents) continue;
            if (pfd[i].fd == sfd) {
                /* Several at a time: each read is a trip through the runtime. */
                struct signalfd_siginfo si[8];
                ssize_t got;
                do {
                    got = read(sfd, si, sizeof si);
                    for (ssize_t k = 0; k < got / (ssize_t)sizeof si[0]; k++)
                        if (si[k].ssi_signo == SIGTERM || si[k].ssi_signo == SIGINT) return 0;
                } while (got == (ssize_t)sizeof si);
                reap();
            } else if (pfd[i].fd == CHANNEL && owner[i] == NULL) {
                if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) read_channel();
            } else {
                struct session* s = owner[i];
                if (!s->id) continue;
                if (which[i] == 1)
                    pump(s, &s->out_fd, SW_STDOUT);
                else if (which[i] == 2)
                    pump(s, &s->err_fd, SW_STDERR);
                else
                    write_stdin(s);
            }
        }
        if (out_len && connected) flush_out();
        /* Off a command's path: after its EXIT went out, before the next. */
        command_group_sweep();
        command_group_prepare();
    }
}
