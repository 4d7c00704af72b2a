"""The connection to a worker: one ``sandweave serve --stdio`` child process.

A :class:`Connection` owns the child and speaks the JSON-RPC protocol of
``docs/protocol.md`` with it. Every :class:`~sandweave.Sandbox` and
:class:`~sandweave.Pool` on the same connection shares that one child; many
requests are in flight on it at once, from any number of threads and event
loops.

Threads (per child): a *writer* that drains what the child's stdin did not
take at once (a caller writes its request itself when the pipe takes it whole
and nothing waits before it, so no caller ever blocks on a full pipe and the
common request costs no thread handoff; the reader never writes), a *reader* that routes
each response to the request it answers and each notification to the request
it names, a *stderr* drain (the server's own diagnostics, logged at debug
level on the ``sandweave`` logger), and a *waiter* that notices the child's
end and fails every request still in flight with :class:`ConnectionLost`.
The next call starts a new child; sandboxes are unaffected by that, since
they are independent of the ``serve`` process.

A synchronous caller blocks on a :class:`threading.Event`; an asynchronous one
awaits an :class:`asyncio.Future` that the reader resolves through
``loop.call_soon_threadsafe``. No thread is started per call.

Nothing here knows what a method means: parameters are checked by the worker.
The SDK only enforces the framing (a line is at most 1 MiB) and keeps at most
``max_in_flight`` requests outstanding (the server's limit, 256), holding the
rest back until earlier ones finish instead of letting the server refuse them.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import itertools
import json
import logging
import os
import queue
import select
import shutil
import subprocess
import threading
import weakref
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import (
    BinaryNotFound,
    Cancelled,
    ConnectionLost,
    NotFound,
    RuntimeUnavailable,
    SandweaveError,
    UsageError,
    error_from_rpc,
)

__all__ = ["Connection", "connect", "find_binary", "INSTALLED_LOCATIONS"]

log = logging.getLogger("sandweave")

#: The protocol version this SDK speaks (docs/protocol.md).
PROTOCOL = 1
#: A line is at most 1 MiB, newline excluded (docs/protocol.md, "Transport").
MAX_LINE_BYTES = 1 << 20
#: Binary data travels in chunks of at most 64 KiB of decoded data.
MAX_CHUNK_BYTES = 64 << 10
#: Requests the server runs on a thread of their own, at most 256 at a time.
DEFAULT_MAX_IN_FLIGHT = 256
#: Where ``scripts/setup.sh`` installs the binary; the last place looked.
INSTALLED_LOCATIONS: Tuple[str, ...] = ("/usr/local/bin/sandweave",)

# Served by the server's reader, in order, outside the in-flight limit.
_CONTROL = frozenset({"run.stdin", "run.signal", "run.resize", "run.cancel"})
_LOG_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}
_SDK_NAME = "sandweave-python 0.1.0"


def _executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_binary(explicit: Optional[str] = None) -> str:
    """The sandweave binary to run.

    In order: ``explicit`` (the ``binary=`` argument of :func:`connect`), the
    ``SANDWEAVE_BIN`` environment variable, ``sandweave`` on ``PATH``, then
    :data:`INSTALLED_LOCATIONS`. A path that is given (argument or variable)
    but is not an executable file is an error, never skipped silently.

    Raises :class:`BinaryNotFound` when there is none.
    """
    if explicit:
        if not _executable(explicit):
            raise BinaryNotFound(f"sandweave binary {explicit}: not an executable file")
        return os.path.abspath(explicit)
    env = os.environ.get("SANDWEAVE_BIN")
    if env:
        if not _executable(env):
            raise BinaryNotFound(f"SANDWEAVE_BIN={env}: not an executable file")
        return os.path.abspath(env)
    on_path = shutil.which("sandweave")
    if on_path:
        return os.path.abspath(on_path)
    for candidate in INSTALLED_LOCATIONS:
        if _executable(candidate):
            return candidate
    broken = _broken_link()
    if broken:
        link, target = broken
        raise BinaryNotFound(
            f"{link} links to {target}, which is gone (a removed or moved build tree): run "
            "scripts/setup.sh in the sandweave tree to use, or set SANDWEAVE_BIN"
        )
    raise BinaryNotFound(
        "the sandweave binary was not found: set SANDWEAVE_BIN, put sandweave on PATH, "
        "or install it to " + " or ".join(INSTALLED_LOCATIONS) + " (scripts/setup.sh does)"
    )


def _broken_link() -> Optional[Tuple[str, str]]:
    """The first ``sandweave`` on PATH or in INSTALLED_LOCATIONS that is a
    symbolic link to nothing (setup.sh links its build), with its target."""
    dirs = [d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d]
    for path in [os.path.join(d, "sandweave") for d in dirs] + list(INSTALLED_LOCATIONS):
        if os.path.islink(path) and not os.path.exists(path):
            try:
                return path, os.readlink(path)
            except OSError:
                continue
    return None


# ---------------------------------------------------------------------------


NotifyFn = Callable[["_Pending", str, Dict[str, Any]], None]


class _Pending:
    """One request: its line, its waiter (event or future) and its outcome."""

    __slots__ = (
        "id",
        "method",
        "line",
        "on_notify",
        "loop",
        "future",
        "event",
        "result",
        "error",
        "threaded",
        "sent",
        "followers",
        "cancel_method",
        "on_done",
        "finished",
    )

    def __init__(
        self,
        rid: int,
        method: str,
        line: bytes,
        on_notify: Optional[NotifyFn],
        loop: Optional[asyncio.AbstractEventLoop],
        cancel_method: Optional[str],
    ) -> None:
        self.id = rid
        self.method = method
        self.line = line
        self.on_notify = on_notify
        self.loop = loop
        self.future: "Optional[asyncio.Future[Any]]" = loop.create_future() if loop else None
        self.event: Optional[threading.Event] = None if loop else threading.Event()
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.threaded = False  # counted against the in-flight limit
        self.sent = False  # handed to the writer
        self.followers: List["_Pending"] = []  # control requests waiting for this one to be sent
        self.cancel_method = cancel_method
        # Sync requests: called on the reader thread once resolved (async
        # ones use future.add_done_callback).
        self.on_done: Optional[Callable[[], None]] = None
        # The response (or the child's end) arrived; unlike `done`, not set by
        # a cancelled future.
        self.finished = False

    @property
    def done(self) -> bool:
        if self.future is not None:
            return self.future.done()
        assert self.event is not None
        return self.event.is_set()

    def resolve(self, result: Any, error: Optional[BaseException]) -> None:
        """Called once, from any thread."""
        self.finished = True
        if self.loop is None:
            self.result = result
            self.error = error
            assert self.event is not None
            self.event.set()
            if self.on_done is not None:
                self.on_done()
            return
        try:
            self.loop.call_soon_threadsafe(self._set_future, result, error)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    def _set_future(self, result: Any, error: Optional[BaseException]) -> None:
        fut = self.future
        assert fut is not None
        if fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(result)

    def deliver(self, fn: Callable[..., None], *args: Any) -> None:
        """Runs fn where the caller lives: this thread (sync) or its event loop."""
        if self.loop is None:
            fn(*args)
            return
        try:
            self.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            pass


class _Child:
    """One ``serve`` process and the requests sent to it."""

    def __init__(self, proc: "subprocess.Popen[bytes]", argv: List[str]) -> None:
        self.proc = proc
        self.argv = argv
        self.pending: Dict[int, _Pending] = {}
        self.backlog: Deque[_Pending] = collections.deque()
        self.inflight = 0
        self.dead = False
        self.closing = False
        self.hello: Optional[Dict[str, Any]] = None
        self.hello_error: Optional[BaseException] = None
        self.hello_event = threading.Event()
        self.stderr_tail: Deque[str] = collections.deque(maxlen=20)
        self.outq: "queue.SimpleQueue[Optional[bytes]]" = queue.SimpleQueue()
        self.queued = 0  # lines in outq or being written by the writer
        self.stdin_closed = False
        self.stdin_fd = proc.stdin.fileno() if proc.stdin is not None else -1
        if self.stdin_fd >= 0:
            os.set_blocking(self.stdin_fd, False)
        self.reader: Optional[threading.Thread] = None
        self.stderr_reader: Optional[threading.Thread] = None

    def send(self, p: _Pending) -> None:
        """Sends p (and the control requests waiting on it). Under the lock."""
        p.sent = True
        self.put(p.line)
        for f in p.followers:
            f.sent = True
            self.put(f.line)
        p.followers = []

    def put(self, line: Optional[bytes]) -> None:
        """Writes ``line`` to the child's stdin at once when nothing is queued
        before it and the pipe takes it whole; else (a full pipe, a partial
        write, an error) the writer thread gets the rest. ``None`` ends the
        stream after what is queued. Under the lock, which keeps the lines in
        order: the writer takes it to say it has written one."""
        if line is not None and self.queued == 0 and not self.stdin_closed:
            try:
                n = os.write(self.stdin_fd, line)
            except OSError:  # full (EAGAIN), or gone: the writer sees it again and says so
                n = 0
            if n == len(line):
                return
            line = line[n:]
        self.queued += 1
        self.outq.put(line)


class Connection:
    """A connection to a worker through one ``sandweave serve --stdio`` child.

    Usually obtained with :func:`connect` (which shares one connection per
    host, state directory, binary and runtime), or implicitly by
    ``Sandbox(...)``. The child starts on the first request and again on the
    first request after it ended.

    ``host`` is ``"local"`` or a remote worker such as ``"ssh://user@host"``
    (passed to the child as ``--host``; the binary decides what it
    supports). ``state_dir`` and ``runsc`` become ``--state-dir`` and
    ``--runsc``. ``args`` are further global options for the child, as the
    command line takes them (for ssh: ``["--identity", KEY, "--known-hosts",
    FILE]``, ...). For a remote host the child does not inherit
    ``SANDWEAVE_STATE_DIR`` and ``SANDWEAVE_RUNSC``: they describe this
    machine, and the worker uses its own.
    """

    def __init__(
        self,
        host: str = "local",
        *,
        state_dir: Optional[str] = None,
        binary: Optional[str] = None,
        runsc: Optional[str] = None,
        args: Sequence[str] = (),
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        self.host = host
        self.state_dir = state_dir
        self.binary = find_binary(binary)
        self.runsc = runsc
        self.args: Tuple[str, ...] = tuple(os.fspath(a) for a in args)
        self.max_in_flight = max(1, int(max_in_flight))
        self._env = dict(env) if env is not None else None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._child: Optional[_Child] = None
        self._pid = os.getpid()
        _all_connections.add(self)

    def __repr__(self) -> str:
        return f"Connection(host={self.host!r}, state_dir={self.state_dir!r}, binary={self.binary!r})"

    # ---- public ------------------------------------------------------------

    @property
    def pid(self) -> Optional[int]:
        """The pid of the current ``serve`` child, or None when none runs."""
        child = self._child
        return child.proc.pid if child is not None and not child.dead else None

    def server_info(self) -> Dict[str, Any]:
        """The worker's ``hello`` result (``server``, ``capabilities``, ``methods``).

        Starts the child if needed and waits for the handshake.
        """
        with self._lock:
            child = self._live_child()
        child.hello_event.wait()
        if child.hello_error is not None:
            raise child.hello_error
        assert child.hello is not None
        return dict(child.hello)

    def has_capability(self, name: str) -> bool:
        """True when the worker's ``hello`` lists capability ``name`` (``run.entrypoint``, ...)."""
        return name in self.server_info().get("capabilities", [])

    def call(self, method: str, params: Optional[Mapping[str, Any]] = None) -> Any:
        """Sends one request and waits for its result (raises its error)."""
        return self.wait(self.start(method, params))

    async def call_async(self, method: str, params: Optional[Mapping[str, Any]] = None) -> Any:
        """The async form of :meth:`call`."""
        p = self.start(method, params, loop=asyncio.get_running_loop())
        return await self.wait_async(p)

    def close(self, timeout: float = 5.0) -> None:
        """Ends the child: closes its stdin, so it kills commands still running
        (their sandboxes stay) and exits once its other requests are answered.
        Waits up to ``timeout`` seconds. The next call starts a new child."""
        with self._lock:
            child = self._child
            self._child = None
            if child is None or self._pid != os.getpid():
                return
            child.closing = True
            child.put(None)
        try:
            child.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.debug("sandweave serve (pid %d) still finishing requests", child.proc.pid)

    # ---- requests (used by the SDK's classes) --------------------------------

    def start(
        self,
        method: str,
        params: Optional[Mapping[str, Any]] = None,
        *,
        on_notify: Optional[NotifyFn] = None,
        loop: Optional[asyncio.AbstractEventLoop] = None,
        cancel_method: Optional[str] = None,
    ) -> _Pending:
        """Sends a request without waiting; returns its handle.

        ``on_notify(pending, method, params)`` sees the notifications that name
        it (``run.output``, ``run.exit``), on the reader thread. With ``loop``
        the result arrives as a future of that loop.
        """
        params = dict(params or {})
        rid = next(self._ids)
        line = json.dumps(
            {"jsonrpc": "2.0", "id": rid, "method": method, "params": params},
            separators=(",", ":"),
        ).encode("ascii")
        if len(line) > MAX_LINE_BYTES:
            raise UsageError(
                f"{method}: the request is {len(line)} bytes of JSON, over the protocol's "
                f"limit of {MAX_LINE_BYTES} bytes per line"
            )
        p = _Pending(rid, method, line + b"\n", on_notify, loop, cancel_method)
        with self._lock:
            child = self._live_child()
            child.pending[rid] = p
            if method in _CONTROL:
                target = child.pending.get(params.get("request"))  # type: ignore[arg-type]
                if target is not None and not target.sent:
                    target.followers.append(p)
                else:
                    child.send(p)
            elif child.inflight >= self.max_in_flight:
                child.backlog.append(p)
            else:
                child.inflight += 1
                p.threaded = True
                child.send(p)
        return p

    def wait(self, p: _Pending) -> Any:
        """Waits (blocking) for a request started without a loop."""
        assert p.event is not None, "started for an event loop: use wait_async"
        try:
            p.event.wait()
        except BaseException:
            self.abandon(p)
            raise
        if p.error is not None:
            raise p.error
        return p.result

    async def wait_async(self, p: _Pending) -> Any:
        """Awaits a request started with a loop."""
        assert p.future is not None, "started without a loop: use wait"
        try:
            return await p.future
        except asyncio.CancelledError:
            self.abandon(p)
            raise

    def abandon(self, p: _Pending) -> None:
        """The caller stopped waiting (KeyboardInterrupt, task cancelled): a
        command it started is cancelled rather than left running."""
        if p.cancel_method and not p.finished:
            self.cancel(p)

    def cancel(self, p: _Pending) -> None:
        """Cancels a running command (``run.cancel``); its request then ends
        with :class:`Cancelled`. A request not yet sent is dropped here."""
        with self._lock:
            child = self._child
            if child is None or child.pending.get(p.id) is not p:
                return
            if not p.sent:
                try:
                    child.backlog.remove(p)
                except ValueError:
                    return
                del child.pending[p.id]
                p.resolve(None, Cancelled("cancelled before it was sent", 1))
                return
            line = json.dumps(
                {"jsonrpc": "2.0", "method": p.cancel_method or "run.cancel", "params": {"request": p.id}},
                separators=(",", ":"),
            ).encode("ascii")
            child.put(line + b"\n")

    # ---- the child -----------------------------------------------------------

    def _argv(self) -> List[str]:
        argv = [self.binary, "--host", self.host]
        if self.state_dir:
            argv += ["--state-dir", self.state_dir]
        if self.runsc:
            argv += ["--runsc", self.runsc]
        return argv + list(self.args) + ["serve", "--stdio"]

    def _child_env(self) -> Optional[Dict[str, str]]:
        if self._env is not None:
            return self._env
        if self.host == "local":
            return None  # ours
        env = dict(os.environ)
        for name in ("SANDWEAVE_STATE_DIR", "SANDWEAVE_RUNSC"):
            env.pop(name, None)
        return env

    def _live_child(self) -> _Child:
        """The running child, started if there is none. Under the lock."""
        if self._pid != os.getpid():  # forked: the parent's child is not ours
            self._pid = os.getpid()
            self._child = None
        child = self._child
        if child is not None and not child.dead and child.proc.poll() is None:
            return child
        self._child = self._spawn()
        return self._child

    def _spawn(self) -> _Child:
        if not _executable(self.binary):
            raise BinaryNotFound(f"sandweave binary {self.binary}: not an executable file (any more)")
        argv = self._argv()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                close_fds=True,
                # Ctrl-C reaches this process only: the SDK cancels what runs.
                start_new_session=True,
                env=self._child_env(),
            )
        except OSError as e:
            raise BinaryNotFound(f"cannot run {self.binary}: {e.strerror or e}") from e
        log.debug("started sandweave serve (pid %d): %s", proc.pid, " ".join(argv))
        child = _Child(proc, argv)
        # The handshake goes first; the server handles it before reading the
        # next line, so later requests need not wait for its answer.
        hello_line = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "hello",
                "params": {"protocol": PROTOCOL, "client": _SDK_NAME, "capabilities": ["log"]},
            },
            separators=(",", ":"),
        ).encode("ascii")
        hello = _Pending(0, "hello", hello_line + b"\n", None, None, None)
        child.pending[0] = hello
        child.send(hello)
        threads = [
            threading.Thread(target=self._writer, args=(child,), name=f"sandweave-writer-{proc.pid}"),
            threading.Thread(target=self._reader, args=(child,), name=f"sandweave-reader-{proc.pid}"),
            threading.Thread(target=self._stderr, args=(child,), name=f"sandweave-stderr-{proc.pid}"),
        ]
        child.reader, child.stderr_reader = threads[1], threads[2]
        for t in threads:
            t.daemon = True
            t.start()
        waiter = threading.Thread(target=self._waiter, args=(child,), name=f"sandweave-waiter-{proc.pid}")
        waiter.daemon = True
        waiter.start()
        return child

    def _writer(self, child: _Child) -> None:
        stdin = child.proc.stdin
        assert stdin is not None
        writable = select.poll()  # not select(): a busy process has descriptors past 1024
        writable.register(child.stdin_fd, select.POLLOUT)
        try:
            while True:
                item = child.outq.get()
                if item is None:
                    break
                view = memoryview(item)
                while view:
                    try:
                        view = view[os.write(child.stdin_fd, view) :]
                    except BlockingIOError:
                        writable.poll()
                with self._lock:
                    child.queued -= 1
        except (OSError, ValueError) as e:
            log.debug("sandweave serve (pid %d): stdin closed: %s", child.proc.pid, e)
        finally:
            with self._lock:
                child.stdin_closed = True
            try:
                stdin.close()
            except (OSError, ValueError):
                pass

    def _reader(self, child: _Child) -> None:
        stdout = child.proc.stdout
        assert stdout is not None
        for raw in stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                log.warning("sandweave serve sent a line that is not JSON: %r", raw[:200])
                continue
            if not isinstance(msg, dict):
                continue
            if "result" in msg or "error" in msg:
                self._on_response(child, msg)
                continue
            params = msg.get("params")
            if not isinstance(params, dict):
                continue
            method = msg.get("method")
            p = child.pending.get(params.get("request"))  # type: ignore[arg-type]
            if method == "log":
                level = _LOG_LEVELS.get(str(params.get("level")), logging.INFO)
                log.log(level, "%s", params.get("message"), extra={"sandweave_request": p.method if p else None})
            elif p is not None and p.on_notify is not None:
                try:
                    p.on_notify(p, str(method), params)
                except Exception:  # a bug in a handler must not stop the reader
                    log.exception("sandweave: handling %s for request %d", method, p.id)
        try:
            stdout.close()
        except OSError:
            pass

    def _on_response(self, child: _Child, msg: Dict[str, Any]) -> None:
        rid = msg.get("id")
        error = msg.get("error")
        with self._lock:
            p = child.pending.pop(rid, None)  # type: ignore[arg-type]
            if p is not None and p.threaded:
                child.inflight -= 1
                while child.backlog and child.inflight < self.max_in_flight:
                    nxt = child.backlog.popleft()
                    nxt.threaded = True
                    child.inflight += 1
                    child.send(nxt)
        if p is None:
            if rid is None and isinstance(error, dict):
                log.warning("sandweave serve: %s", error.get("message"))
            return
        if p.method == "hello" and p.id == 0:
            if isinstance(error, dict):
                child.hello_error = error_from_rpc(error)
            else:
                child.hello = msg.get("result") or {}
            child.hello_event.set()
            return
        if isinstance(error, dict):
            p.resolve(None, error_from_rpc(error))
        else:
            p.resolve(msg.get("result"), None)

    def _stderr(self, child: _Child) -> None:
        stderr = child.proc.stderr
        assert stderr is not None
        for raw in stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line:
                child.stderr_tail.append(line)
                log.debug("serve[%d]: %s", child.proc.pid, line)
        try:
            stderr.close()
        except OSError:
            pass

    def _waiter(self, child: _Child) -> None:
        status = child.proc.wait()
        # What the child wrote before it died is still routed; a grandchild
        # holding the pipe open must not keep us waiting.
        if child.reader is not None:
            child.reader.join(2.0)
        if child.stderr_reader is not None:
            child.stderr_reader.join(1.0)
        with self._lock:
            child.dead = True
            if self._child is child:
                self._child = None
            pending = list(child.pending.values())
            child.pending.clear()
            child.backlog.clear()
        log.debug("sandweave serve (pid %d) ended with status %s", child.proc.pid, status)
        # No handshake answered: the child refused to start (a bad --host,
        # state directory or runtime) and said why on stderr.
        at_startup = child.hello is None and child.hello_error is None
        if at_startup:
            child.hello_error = self._startup_error(child, status) or self._lost(child, status, "hello", True)
            child.hello_event.set()
        for p in pending:
            if p.method == "hello" and p.id == 0:
                continue
            err = (self._startup_error(child, status) if at_startup else None) or self._lost(
                child, status, p.method, p.sent
            )
            p.resolve(None, err)

    @staticmethod
    def _describe(status: int) -> str:
        if status < 0:
            return f"was killed by signal {-status}"
        return f"exited with status {status}"

    def _startup_error(self, child: _Child, status: int) -> Optional[SandweaveError]:
        """The child refused to start (a bad --host, state dir, runtime): its
        one-line message, as the exception of its exit status."""
        if status <= 0:
            return None
        message = ""
        for line in reversed(child.stderr_tail):
            if line.startswith("sandweave: "):
                message = line[len("sandweave: ") :]
                break
        if not message:
            return None
        cls = {2: UsageError, 4: NotFound, 5: RuntimeUnavailable, 255: ConnectionLost}.get(status, SandweaveError)
        return cls(message, status)

    def _lost(self, child: _Child, status: int, method: str, sent: bool) -> ConnectionLost:
        pid = child.proc.pid
        if child.closing:
            what = f"sandweave serve (pid {pid}) was closed by this client"
        else:
            what = f"sandweave serve (pid {pid}) {self._describe(status)}"
        if sent:
            msg = f"{what} while {method} was in flight; its outcome on the worker is unknown"
        else:
            msg = f"{what} before {method} was sent; nothing was done"
        tail = [l for l in child.stderr_tail if l.strip()]
        if tail and not child.closing:
            msg += f" (its last message: {tail[-1]})"
        msg += "; the next call starts a new serve process"
        return ConnectionLost(msg)


# ---- shared connections ------------------------------------------------------

_registry: Dict[Tuple[str, Optional[str], str, Optional[str], Tuple[str, ...]], Connection] = {}
_registry_lock = threading.Lock()
_all_connections: "weakref.WeakSet[Connection]" = weakref.WeakSet()


def connect(
    host: Optional[str] = None,
    *,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
    runsc: Optional[str] = None,
    args: Sequence[str] = (),
) -> Connection:
    """The shared :class:`Connection` for these settings (created on first use).

    ``host``: ``"local"`` or ``"ssh://user@host"``; default ``SANDWEAVE_HOST``,
    else local. ``state_dir``: default ``SANDWEAVE_STATE_DIR``, else the
    worker's default (``/var/lib/sandweave`` for root). ``binary``: see
    :func:`find_binary`. ``runsc``: default ``SANDWEAVE_RUNSC``, else the
    worker's. The two environment variables apply to the local connection
    only. ``args``: further global options for the child (see
    :class:`Connection`).
    """
    host = host or os.environ.get("SANDWEAVE_HOST") or "local"
    local = host == "local"
    state_dir = state_dir or (os.environ.get("SANDWEAVE_STATE_DIR") if local else None) or None
    if state_dir and local:
        state_dir = os.path.abspath(os.fspath(state_dir))
    runsc = runsc or (os.environ.get("SANDWEAVE_RUNSC") if local else None) or None
    resolved = find_binary(binary)
    extra = tuple(os.fspath(a) for a in args)
    key = (host, state_dir, resolved, runsc, extra)
    with _registry_lock:
        conn = _registry.get(key)
        if conn is None:
            conn = Connection(host, state_dir=state_dir, binary=resolved, runsc=runsc, args=extra)
            _registry[key] = conn
        return conn


def resolve_connection(connection: Any, state_dir: Optional[str] = None) -> Connection:
    """A Connection from what a user passed as ``connection=``."""
    if isinstance(connection, Connection):
        if state_dir is not None:
            raise UsageError("state_dir= applies to a connection string, not to a Connection object")
        return connection
    if connection is not None and not isinstance(connection, str):
        raise TypeError(f"connection: expected 'local', 'ssh://...' or a Connection, got {type(connection).__name__}")
    return connect(connection, state_dir=state_dir)


@atexit.register
def _close_all() -> None:
    for conn in list(_all_connections):
        try:
            conn.close(timeout=2.0)
        except Exception:
            pass
