/*
 * The guest agent's wire format, shared by the guest (C) and the host (C++).
 * docs/agent.md describes the protocol; this header is its single source of
 * numbers.
 *
 * A frame is a 12-byte header followed by `length` payload bytes:
 *   u32 length   payload bytes, at most SW_AGENT_MAX_PAYLOAD
 *   u8  type     enum sw_agent_type
 *   u8  flags    0 (reserved)
 *   u16 reserved 0
 *   u32 session  the command it concerns; 0 for the connection itself
 * Every integer is little-endian. Strings in payloads are a u32 length and
 * that many bytes (no terminator); a list is a u32 count and its strings.
 */
#ifndef SANDWEAVE_AGENT_PROTO_H
#define SANDWEAVE_AGENT_PROTO_H

#define SW_AGENT_PROTOCOL 1
#define SW_AGENT_HEADER 12
#define SW_AGENT_MAX_PAYLOAD (1u << 20)
/* Where the agent's binary is in every guest (read-only); `--watch` is its
 * directory watch for the host, run as an ordinary command (guest/watch.c). */
#define SW_GUEST_INIT_PATH "/.sandweave/init"
/* Output bytes the agent sends for one command before the host acknowledges
 * them (OUTPUT_ACK), and stdin bytes the host sends before STDIN_ACK. */
#define SW_AGENT_WINDOW (1u << 20)
#define SW_AGENT_STDIN_WINDOW (256u << 10)
/* Commands one agent runs at once. */
#define SW_AGENT_MAX_SESSIONS 256

enum sw_agent_type {
    /* both ways, session 0: u32 protocol, 16 bytes nonce (the agent echoes the
     * host's, so a host reading a stream of unknown state finds its reply), then
     * the agent adds a string (its name). A HELLO starts a new connection: the
     * agent ends every command of the previous one. */
    SW_HELLO = 1,
    /* host -> agent: start a command. u32 uid, u32 gid, u32 flags, u32
     * timeout_ms (0: none), u16 rows, u16 cols, string cwd, list argv, list env. */
    SW_EXEC = 2,
    /* agent -> host: u32 pid of the started command. */
    SW_STARTED = 3,
    /* host -> agent: bytes for the command's stdin; an empty payload is EOF. */
    SW_STDIN = 4,
    /* agent -> host: bytes the command wrote (with a pty, all come as STDOUT). */
    SW_STDOUT = 5,
    SW_STDERR = 6,
    /* agent -> host: the command ended. u32 kind (enum sw_exit_kind), i32 code
     * (exit code, signal number or errno), string message. Last frame of a session. */
    SW_EXIT = 7,
    /* host -> agent: u32 signal, u32 scope (enum sw_signal_scope). */
    SW_SIGNAL = 8,
    /* host -> agent: u16 rows, u16 cols of the command's pty. */
    SW_RESIZE = 9,
    /* host -> agent: u32 bytes of output consumed (reopens the window). */
    SW_OUTPUT_ACK = 10,
    /* agent -> host: u32 stdin bytes written to the command. */
    SW_STDIN_ACK = 11,
    /* agent -> host: string; the request on `session` (or the last frame, for
     * session 0) was refused. A refused EXEC also gets its EXIT. */
    SW_ERROR = 12,

    /* Between sandweave clients and the supervisor's relay only (never sent
     * to the agent). The payloads are JSON text. */
    SW_LIST = 32,      /* client -> relay: {}; reply SW_LIST with {"processes":[...]} */
    SW_ATTACH = 33,    /* client -> relay: {"handle":N,"follow":bool}; output, then
                          SW_EXIT once the command ended (follow) or SW_LIST-less end */
    SW_WAIT = 34,      /* client -> relay: {"handle":N}; SW_EXIT when it ends */
    SW_KILL = 35,      /* client -> relay: {"handle":N,"signal":S}; reply SW_KILL {} */
    SW_STATUS = 36,    /* client -> relay: {}; reply {"agent": "...", ...} */
    SW_END_OF_LOG = 37 /* relay -> client: the kept output is replayed (no follow) */
};

/* EXEC flags. */
#define SW_EXEC_PTY 1u    /* a pty for stdin, stdout and stderr */
#define SW_EXEC_STDIN 2u  /* stdin comes as SW_STDIN frames (else /dev/null) */
#define SW_EXEC_DETACH 4u /* relay: keep the output, survive the client */
/* `sandweave cp`: instead of an execve, the forked child (with the request's
 * uid and gid) runs the agent's copier (wire/copy.h). COPY_OUT sends argv[0]
 * as a copy stream on stdout; COPY_IN (with STDIN) receives the stream from
 * stdin at argv[0], named argv[1] in it when it is a directory, or merges its
 * contents there with COPY_CONTENTS. A failure is one line on stderr and exit
 * status 1. */
#define SW_EXEC_COPY_OUT 8u
#define SW_EXEC_COPY_IN 16u
#define SW_EXEC_COPY_CONTENTS 32u

enum sw_exit_kind {
    SW_EXITED = 0,      /* code: the exit status */
    SW_SIGNALED = 1,    /* code: the signal */
    SW_NOT_STARTED = 2, /* code: errno of chdir/exec (message says which) */
    SW_TIMED_OUT = 3,   /* code: the signal that ended it after the timeout */
    SW_LOST = 4         /* relay: the agent went away before the command ended */
};

enum sw_signal_scope {
    SW_TO_PROCESS = 0, /* the command's own process */
    SW_TO_GROUP = 1,   /* its process group (what a terminal's Ctrl-C reaches) */
    SW_TO_TREE = 2     /* every process it started, however detached */
};

#endif
