"""Sandboxes, their commands, audit logs and snapshots.

Every method that talks to the worker has an async twin: ``env.run(...)`` and
``await env.run.aio(...)`` take the same arguments and do the same thing.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import json
import math
import os
import threading
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Deque,
    Dict,
    Generator,
    Iterable,
    Iterator,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from ._aio import Call, Next, Start, Step, Wait, twin, twin_classmethod
from .client import MAX_CHUNK_BYTES, Connection, _Pending, resolve_connection
from .desktop import Desktop
from .errors import ConnectionLost, NotFound, NotSupported, SandweaveError

__all__ = ["Sandbox", "RunResult", "RunStream", "Snapshot"]

PathLike = Union[str, "os.PathLike[str]"]
Template = Union[str, "os.PathLike[str]", Mapping[str, Any]]
Command = Union[str, Sequence[str]]
Stdin = Union[str, bytes, bytearray, memoryview, Any]
OutputCallback = Callable[[bytes], Any]

# Snapshot.create's kinds, by the seed's names for them.
_SNAPSHOT_KINDS = {"auto": "auto", "filesystem": "fs", "fs": "fs", "memory": "memory"}


def template_param(template: Optional[Template], conn: Connection) -> Optional[str]:
    """The ``template`` request parameter: a name, a path, or inline JSON.

    A mapping is sent as JSON text; a path object (``pathlib.Path``) is made
    absolute for a local worker, whose working directory is not this process's
    once this process changes directory. A string goes as it is: the worker
    tells a name from a path from inline text.
    """
    if template is None:
        return None
    if isinstance(template, Mapping):
        return json.dumps(template)
    if isinstance(template, os.PathLike):
        path = os.fspath(template)
        return os.path.abspath(path) if conn.host == "local" else path
    if isinstance(template, str):
        return template
    raise TypeError(f"template: expected a name, a path or a dict, got {type(template).__name__}")


def create_params(
    conn: Connection,
    template: Optional[Template] = None,
    hidepid: Optional[int] = None,
    audit: Optional[bool] = None,
    user: Optional[str] = None,
    name: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    snapshot: Union[None, str, "Snapshot"] = None,
    *,
    ttl: Optional[float] = None,
    idle_timeout: Optional[float] = None,
) -> Dict[str, Any]:
    """The params of ``sandbox.create`` (and the create options of ``pool.create``).

    Only what the caller gave is sent: every default is the worker's.
    ``ttl`` and ``idle_timeout`` are in seconds.
    """
    params: Dict[str, Any] = {}
    for key, seconds in (("ttl_ms", ttl), ("idle_timeout_ms", idle_timeout)):
        if seconds is not None:
            if seconds <= 0:
                raise ValueError(f"{key[:-3]}: must be positive, got {seconds!r}")
            params[key] = max(1, int(round(seconds * 1000)))
    tpl = template_param(template, conn)
    if tpl is not None:
        params["template"] = tpl
    if snapshot is not None:
        params["from_snapshot"] = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
    if hidepid is not None:
        params["hidepid"] = hidepid
    if audit is not None:
        params["audit"] = audit
    if user is not None:
        params["user"] = user
    if name is not None:
        params["name"] = name
    if labels is not None:
        params["labels"] = dict(labels)
    return params


def _argv(cmd: Command) -> List[str]:
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    if isinstance(cmd, (bytes, bytearray)):
        raise TypeError("cmd: expected a str (run by /bin/sh -c) or a list of str (argv), got bytes")
    argv = []
    for a in cmd:
        a = os.fspath(a) if isinstance(a, os.PathLike) else a
        if not isinstance(a, str):
            raise TypeError(f"cmd: every argv item must be a str, got {type(a).__name__}")
        argv.append(a)
    return argv


def _run_params(
    conn: Connection,
    sandbox_id: str,
    cmd: Optional[Command],
    entrypoint: Optional[Sequence[str]],
    user: Optional[str],
    cwd: Optional[PathLike],
    env: Union[None, Mapping[str, str], Sequence[str]],
    timeout: Optional[float],
) -> Dict[str, Any]:
    # docker run's rule (docs/protocol.md, sandbox.run): no cmd runs the
    # sandbox's entrypoint and cmd, a list goes after its entrypoint, and a
    # string is a shell command, never the entrypoint's arguments.
    params: Dict[str, Any] = {"id": sandbox_id}
    if cmd is not None:
        params["argv"] = _argv(cmd)
    if entrypoint is not None:
        if isinstance(entrypoint, str):
            raise TypeError("entrypoint: expected a list of str ([] runs cmd as it is), got a str")
        params["entrypoint"] = _argv(list(entrypoint))
    elif isinstance(cmd, str) and conn.has_capability("run.entrypoint"):
        params["entrypoint"] = []
    if user is not None:
        params["user"] = user
    if cwd is not None:
        params["cwd"] = os.fspath(cwd)
    if env is not None:
        if isinstance(env, Mapping):
            params["env"] = [f"{k}={v}" for k, v in env.items()]
        else:
            params["env"] = list(env)
    if timeout is not None:
        # Seconds to milliseconds, rounded up so a small positive timeout stays
        # positive; zero and negative values go as they are, for the worker to refuse.
        params["timeout_ms"] = math.ceil(timeout * 1000) if timeout > 0 else int(timeout * 1000)
    return params


@dataclass(frozen=True)
class RunResult:
    """What a command did: ``exit_code``, its output, and whether it timed out.

    ``exit_code`` follows Docker: the command's status, 128+N when killed by
    signal N, 124 when ``timed_out``, 126 not executable, 127 not found.
    ``message`` is the one line the CLI would print about it (for example
    ``command not found in sandbox ...``), or None.
    """

    exit_code: int
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    timed_out: bool = False
    message: Optional[str] = None

    @property
    def stdout(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """stderr decoded as UTF-8 (invalid bytes replaced)."""
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """True when the command exited 0."""
        return self.exit_code == 0

    def __repr__(self) -> str:
        def short(b: bytes) -> str:
            return repr(b if len(b) <= 60 else b[:57] + b"...")

        extra = ", timed_out=True" if self.timed_out else ""
        extra += f", message={self.message!r}" if self.message else ""
        return (
            f"RunResult(exit_code={self.exit_code}, stdout_bytes={short(self.stdout_bytes)}, "
            f"stderr_bytes={short(self.stderr_bytes)}{extra})"
        )


class _Output:
    """Collects a command's output, or hands each chunk to a callback."""

    def __init__(self, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]) -> None:
        self.callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        self.buffers = {"stdout": bytearray(), "stderr": bytearray()}
        self.error: Optional[BaseException] = None

    def notify(self, p: _Pending, method: str, params: Dict[str, Any]) -> None:
        if method != "run.output":
            return  # run.exit repeats what the response says
        stream = params.get("stream")
        if stream not in self.buffers:
            return
        data = base64.b64decode(params.get("data") or "")
        cb = self.callbacks[stream]
        if cb is None:
            self.buffers[stream] += data
        else:
            p.deliver(self._call, cb, data)

    def _call(self, cb: OutputCallback, data: bytes) -> None:
        if self.error is not None:
            return
        try:
            cb(data)
        except BaseException as e:  # raised by run() once the command ends
            self.error = e

    def result(self, res: Mapping[str, Any]) -> RunResult:
        if self.error is not None:
            raise self.error
        return RunResult(
            exit_code=int(res.get("exit_code", 125)),
            stdout_bytes=bytes(self.buffers["stdout"]),
            stderr_bytes=bytes(self.buffers["stderr"]),
            timed_out=bool(res.get("timed_out", False)),
            message=res.get("message"),
        )


def _split(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for i in range(0, len(view), MAX_CHUNK_BYTES):
        yield bytes(view[i : i + MAX_CHUNK_BYTES])


def _as_bytes(item: Any) -> bytes:
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    raise TypeError(f"stdin: expected str or bytes chunks, got {type(item).__name__}")


def _feed_stdin(conn: Connection, p: _Pending, stdin: Stdin) -> Generator[Step, Any, None]:
    """Sends stdin as ``run.stdin`` requests, one chunk in flight, eof with the last.

    ``stdin``: str or bytes; a file object (read in 64 KiB pieces); an
    iterable of str/bytes chunks; or, with ``.aio``, an async iterable. If the
    command ends or closes its stdin first, the rest is dropped.
    """

    def send(data: bytes, eof: bool) -> Generator[Step, Any, bool]:
        try:
            yield Call(
                conn,
                "run.stdin",
                {"request": p.id, "data": base64.b64encode(data).decode("ascii"), "eof": eof},
            )
        except ConnectionLost:
            raise
        except SandweaveError:
            return False  # the command ended or closed its stdin: nothing more to send
        return True

    if isinstance(stdin, (str, bytes, bytearray, memoryview)):
        chunks: Optional[Iterator[bytes]] = iter([_as_bytes(stdin)])
        aiter = None
    elif hasattr(stdin, "read"):
        reader: Any = stdin
        chunks = iter(lambda: _as_bytes(reader.read(MAX_CHUNK_BYTES)), b"")
        aiter = None
    elif hasattr(stdin, "__aiter__"):
        chunks = None
        aiter = stdin.__aiter__()
    elif isinstance(stdin, Iterable):
        chunks = (_as_bytes(c) for c in stdin)
        aiter = None
    else:
        raise TypeError(f"stdin: expected str, bytes, a file or an iterable of chunks, got {type(stdin).__name__}")

    held: Optional[bytes] = None  # one piece of lookahead, so eof rides on the last
    while True:
        if chunks is not None:
            item = next(chunks, None)
        else:
            more, got = yield Next(aiter)
            item = _as_bytes(got) if more else None
        if item is None:
            break
        for piece in _split(item):
            if held is not None and not (yield from send(held, False)):
                return
            held = piece
    yield from send(held if held is not None else b"", True)


_END = object()


class RunStream:
    """A command whose output is read as it comes: ``for stream, data in s``
    (or ``async for`` when made by ``stream.aio``), then :attr:`result`.

    Each item is ``("stdout" | "stderr", bytes)``. :meth:`wait` returns the
    :class:`RunResult`, with whatever output was not iterated. With
    ``stdin=True``, :meth:`write` and :meth:`close_stdin` feed the command.
    """

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox
        self._conn = sandbox._conn
        self._items: Deque[Any] = collections.deque()
        self._cond = threading.Condition()
        self._aevent: Optional[asyncio.Event] = None
        self._pending: Optional[_Pending] = None
        self._ended = False
        #: The RunResult, once the command has ended and its output was read.
        self.result: Optional[RunResult] = None

    @property
    def request_id(self) -> Optional[int]:
        """The id of the ``sandbox.run`` request on its connection."""
        return self._pending.id if self._pending else None

    # reader thread (sync) or event loop (async)
    def _notify(self, p: _Pending, method: str, params: Dict[str, Any]) -> None:
        if method == "run.output" and params.get("stream") in ("stdout", "stderr"):
            p.deliver(self._put, (params["stream"], base64.b64decode(params.get("data") or "")))

    def _put(self, item: Any) -> None:
        with self._cond:
            self._items.append(item)
            self._cond.notify_all()
        if self._aevent is not None:
            self._aevent.set()

    def _attach(self, p: _Pending) -> None:
        self._pending = p
        if p.future is not None:
            self._aevent = asyncio.Event()
            if self._items:
                self._aevent.set()
            p.future.add_done_callback(lambda _f: self._put(_END))
        else:
            p.on_done = lambda: self._put(_END)
            if p.done:
                self._put(_END)

    def _finish(self, rest: Dict[str, bytearray]) -> RunResult:
        self._ended = True
        p = self._pending
        assert p is not None
        if p.future is not None:
            if p.future.cancelled():
                raise asyncio.CancelledError()
            exc = p.future.exception()
            if exc is not None:
                raise exc
            res = p.future.result()
        else:
            if p.error is not None:
                raise p.error
            res = p.result
        self.result = RunResult(
            int(res.get("exit_code", 125)),
            bytes(rest["stdout"]),
            bytes(rest["stderr"]),
            bool(res.get("timed_out", False)),
            res.get("message"),
        )
        return self.result

    def __iter__(self) -> "RunStream":
        if self._pending is None or self._pending.future is not None:
            raise TypeError("this RunStream was made by stream.aio: use `async for`")
        return self

    def __next__(self) -> Tuple[str, bytes]:
        if self._ended:
            raise StopIteration
        with self._cond:
            while not self._items:
                self._cond.wait()
            item = self._items.popleft()
        if item is _END:
            self._finish({"stdout": bytearray(), "stderr": bytearray()})
            raise StopIteration
        return item  # type: ignore[no-any-return]

    def __aiter__(self) -> "RunStream":
        if self._pending is None or self._pending.future is None:
            raise TypeError("this RunStream was made by stream(): use `for`")
        return self

    async def __anext__(self) -> Tuple[str, bytes]:
        if self._ended:
            raise StopAsyncIteration
        assert self._aevent is not None
        while not self._items:
            self._aevent.clear()
            await self._aevent.wait()
        item = self._items.popleft()
        if item is _END:
            self._finish({"stdout": bytearray(), "stderr": bytearray()})
            raise StopAsyncIteration
        return item  # type: ignore[no-any-return]

    @twin
    def wait(self) -> Generator[Step, Any, RunResult]:
        """Waits for the command to end; returns its RunResult with the output not yet iterated."""
        if self.result is not None:
            return self.result
        p = self._pending
        assert p is not None
        try:
            yield Wait(self._conn, p)
        except Exception:
            pass  # raised by _finish, after the output is drained
        # Every output notification was delivered before the response.
        rest = {"stdout": bytearray(), "stderr": bytearray()}
        with self._cond:
            items = list(self._items)
            self._items.clear()
        for item in items:
            if item is not _END:
                rest[item[0]] += item[1]
        return self._finish(rest)

    @twin
    def signal(self, sig: Union[str, int]) -> Generator[Step, Any, None]:
        """Sends a signal (``"TERM"``, ``"INT"``, ``"KILL"``, ... or a number) to the command."""
        assert self._pending is not None
        yield Call(self._conn, "run.signal", {"request": self._pending.id, "signal": sig})

    @twin
    def cancel(self) -> Generator[Step, Any, bool]:
        """Kills the command; iterating or waiting then raises :class:`Cancelled`. False if it had already ended."""
        assert self._pending is not None
        res = yield Call(self._conn, "run.cancel", {"request": self._pending.id})
        return bool((res or {}).get("cancelled", False))

    @twin
    def write(self, data: Union[str, bytes]) -> Generator[Step, Any, None]:
        """Appends to the command's stdin (``stream(..., stdin=True)``), in 64 KiB chunks."""
        assert self._pending is not None
        for piece in _split(_as_bytes(data)):
            yield Call(
                self._conn,
                "run.stdin",
                {"request": self._pending.id, "data": base64.b64encode(piece).decode("ascii"), "eof": False},
            )

    @twin
    def close_stdin(self) -> Generator[Step, Any, None]:
        """Closes the command's stdin (end of file)."""
        assert self._pending is not None
        yield Call(self._conn, "run.stdin", {"request": self._pending.id, "data": "", "eof": True})


class Snapshot:
    """A snapshot (``env.snapshot()``): ``id``, ``name``, ``kind`` (``fs`` or ``memory``) and :attr:`info`.

    Restore one with ``Sandbox(snapshot=snap)`` (or its id or name).
    """

    def __init__(self, conn: Connection, info: Mapping[str, Any]) -> None:
        self._conn = conn
        #: The snapshot object as the worker returned it.
        self.info: Dict[str, Any] = dict(info)

    @property
    def id(self) -> str:
        return str(self.info.get("id", ""))

    @property
    def name(self) -> str:
        return str(self.info.get("name") or "")

    @property
    def kind(self) -> str:
        return str(self.info.get("kind", ""))

    def __repr__(self) -> str:
        return f"Snapshot(id={self.id!r}, name={self.name!r}, kind={self.kind!r})"

    @twin_classmethod
    def list(
        cls: Any, *, connection: Union[None, str, Connection] = None, state_dir: Optional[str] = None
    ) -> Generator[Step, Any, "List[Snapshot]"]:
        """Every snapshot on the worker."""
        conn = resolve_connection(connection, state_dir)
        res = yield Call(conn, "snapshot.ls")
        return [cls(conn, s) for s in res.get("snapshots", [])]

    @twin
    def remove(self) -> Generator[Step, Any, None]:
        """Deletes the snapshot."""
        yield Call(self._conn, "snapshot.rm", {"id": self.id})


class Sandbox:
    """A gVisor sandbox on a worker.

    ``Sandbox(template="coding", hidepid=2, audit=True)`` creates and starts
    one (``await Sandbox.create.aio(...)`` is the async form):

    - ``template``: a template name, a file path on the worker, inline
      JSON/YAML text, or a dict such as ``{"extends": "coding",
      "runtime_options": {"audit_max_bytes": 8 * 1024**3}}``; default the
      worker's (``base``).
    - ``hidepid`` (0, 1, 2) and ``audit`` (bool): explicit values win over
      the template and the snapshot.
    - ``user``: the default ``"UID[:GID]"`` for commands.
    - ``name`` (unique), ``labels`` (dict of str).
    - ``snapshot``: restore from this snapshot (a :class:`Snapshot`, id or name)
      instead of a template.
    - ``ttl`` and ``idle_timeout`` (seconds): the worker terminates the
      sandbox (audit barrier first) when it has lived that long, or has had
      no command and no call acting on it for that long; see :attr:`time_left`.
    - ``connection``: ``"local"`` (default, or ``SANDWEAVE_HOST``),
      ``"ssh://user@host"``, or a :class:`~sandweave.Connection`;
      ``state_dir``: the worker's state directory.

    The sandbox belongs to this object: :meth:`close` removes it (with its
    audit log, so export first). ``with Sandbox(...) as env:`` terminates and
    closes on exit. Sandboxes found with :meth:`from_id` or :meth:`list` are
    not owned: closing them only lets go of them.
    """

    _conn: Connection
    _view: Dict[str, Any]
    _owned: bool
    _closed: bool

    def __init__(
        self,
        template: Optional[Template] = None,
        *,
        hidepid: Optional[int] = None,
        audit: Optional[bool] = None,
        user: Optional[str] = None,
        name: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        snapshot: Union[None, str, Snapshot] = None,
        ttl: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> None:
        conn = resolve_connection(connection, state_dir)
        params = create_params(
            conn, template, hidepid, audit, user, name, labels, snapshot, ttl=ttl, idle_timeout=idle_timeout
        )
        view = conn.call("sandbox.create", params)
        self._setup(conn, view, owned=True)

    def _setup(self, conn: Connection, view: Mapping[str, Any], owned: bool) -> None:
        self._conn = conn
        self._view = dict(view)
        self._owned = owned
        self._closed = False

    @classmethod
    def _wrap(cls, conn: Connection, view: Mapping[str, Any], owned: bool) -> "Sandbox":
        obj = cls.__new__(cls)
        obj._setup(conn, view, owned)
        return obj

    # ---- what it is ----------------------------------------------------------

    @property
    def id(self) -> str:
        """The sandbox id (``sw-`` and 12 hex digits)."""
        return str(self._view["id"])

    @property
    def name(self) -> str:
        return str(self._view.get("name") or "")

    @property
    def info(self) -> Dict[str, Any]:
        """The sandbox object as last returned by the worker (see :meth:`inspect`)."""
        return dict(self._view)

    @property
    def spec(self) -> Dict[str, Any]:
        """The resolved settings (``runtime_options``, ``user``, ``labels``, ``origin``, ...)."""
        return dict(self._view.get("spec") or {})

    @property
    def labels(self) -> Dict[str, str]:
        return dict(self.spec.get("labels") or {})

    @property
    def time_left(self) -> Dict[str, Any]:
        """With a ttl or idle timeout, as of the last call that returned the
        sandbox (:meth:`inspect` refreshes it): ``ttl_ms``, ``idle_ms`` and
        ``busy`` (a command runs, so the idle clock stands still); else ``{}``."""
        return dict(self._view.get("time_left") or {})

    @property
    def connection(self) -> Connection:
        return self._conn

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        state = "closed" if self._closed else self._view.get("state", "?")
        return f"Sandbox(id={self.id!r}, name={self.name!r}, state={state!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise SandweaveError(f"sandbox {self.id} is closed")

    # ---- finding and creating --------------------------------------------------

    @twin_classmethod
    def create(
        cls: Any,
        template: Optional[Template] = None,
        *,
        hidepid: Optional[int] = None,
        audit: Optional[bool] = None,
        user: Optional[str] = None,
        name: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        snapshot: Union[None, str, Snapshot] = None,
        ttl: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> Generator[Step, Any, "Sandbox"]:
        """Creates and starts a sandbox: the same as ``Sandbox(...)``, with an async form."""
        conn = resolve_connection(connection, state_dir)
        params = create_params(
            conn, template, hidepid, audit, user, name, labels, snapshot, ttl=ttl, idle_timeout=idle_timeout
        )
        view = yield Call(conn, "sandbox.create", params)
        created: Sandbox = cls._wrap(conn, view, owned=True)
        return created

    @twin_classmethod
    def from_id(
        cls: Any,
        sandbox_id: str,
        *,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> Generator[Step, Any, "Sandbox"]:
        """An existing sandbox by id, name or unique id prefix (raises :class:`NotFound`).

        It is not owned: :meth:`close` does not remove it (``close(remove=True)`` does).
        """
        conn = resolve_connection(connection, state_dir)
        view = yield Call(conn, "sandbox.inspect", {"id": sandbox_id})
        found: Sandbox = cls._wrap(conn, view, owned=False)
        return found

    @twin_classmethod
    def list(
        cls: Any,
        labels: Optional[Mapping[str, str]] = None,
        *,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> Generator[Step, Any, "List[Sandbox]"]:
        """Every sandbox on the worker, or those carrying all of ``labels`` (not owned)."""
        conn = resolve_connection(connection, state_dir)
        res = yield Call(conn, "sandbox.ls")
        want = dict(labels or {})
        out = []
        for view in res.get("sandboxes", []):
            have = (view.get("spec") or {}).get("labels") or {}
            if all(have.get(k) == v for k, v in want.items()):
                out.append(cls._wrap(conn, view, owned=False))
        return out

    @twin
    def inspect(self) -> Generator[Step, Any, Dict[str, Any]]:
        """The sandbox object now (``state``, ``spec``, ``pool``, ...); also refreshes :attr:`info`."""
        self._check_open()
        view = yield Call(self._conn, "sandbox.inspect", {"id": self.id})
        self._view = dict(view)
        return dict(view)

    # ---- commands ----------------------------------------------------------------

    @twin
    def run(
        self,
        cmd: Optional[Command] = None,
        *,
        entrypoint: Optional[Sequence[str]] = None,
        user: Optional[str] = None,
        cwd: Optional[PathLike] = None,
        env: Union[None, Mapping[str, str], Sequence[str]] = None,
        timeout: Optional[float] = None,
        stdin: Optional[Stdin] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        detach: bool = False,
    ) -> Generator[Step, Any, RunResult]:
        """Runs a command in the sandbox and returns its :class:`RunResult`.

        - ``cmd``: a string runs under ``/bin/sh -c``; a list is the argv.
          In a sandbox with an entrypoint (an imported image's Entrypoint, or
          the template's), a list is its arguments and no ``cmd`` runs its
          Cmd, as ``docker run`` does; ``entrypoint=[...]`` replaces it (and
          drops the Cmd), ``entrypoint=[]`` runs the list as it is. Without
          an entrypoint or Cmd, ``cmd`` is required.
        - ``user``: ``"UID[:GID]"``; default the sandbox's user.
        - ``cwd``: an absolute path in the guest; ``env``: a dict or a list of
          ``"KEY=VALUE"``, added to the sandbox's environment.
        - ``timeout``: seconds; the command is killed after that long (exit
          124, ``timed_out``).
        - ``stdin``: str, bytes, a file object, an iterable of chunks (or with
          ``.aio`` an async iterable); default: empty stdin.
        - ``on_stdout`` / ``on_stderr``: called with each chunk of bytes as it
          arrives (that stream is then not kept in the result). Sync calls run
          them on the SDK's reader thread (keep them quick); ``.aio`` runs them
          on the event loop. For an iterator of chunks see :meth:`stream`.
        - ``detach=True`` (a background process handle) needs the guest agent
          of a later sandweave version and raises :class:`NotSupported` here.

        A non-zero exit is a result, not an exception. Errors of the request
        itself (no such sandbox, a bad ``user``) raise :class:`SandweaveError`
        subclasses. Interrupting the call (KeyboardInterrupt, a cancelled
        task) kills the command.
        """
        if detach:
            raise NotSupported(
                "run(detach=True): background processes need the guest agent's process handles, "
                "which this version of sandweave does not have; use stream() for a command "
                "that is read while it runs"
            )
        self._check_open()
        params = _run_params(self._conn, self.id, cmd, entrypoint, user, cwd, env, timeout)
        out = _Output(on_stdout, on_stderr)
        if stdin is None:
            res = yield Call(self._conn, "sandbox.run", params, on_notify=out.notify, cancel_method="run.cancel")
            return out.result(res)
        params["stdin"] = True
        p = yield Start(self._conn, "sandbox.run", params, on_notify=out.notify, cancel_method="run.cancel")
        try:
            yield from _feed_stdin(self._conn, p, stdin)
        except BaseException:
            self._conn.abandon(p)
            raise
        res = yield Wait(self._conn, p)
        return out.result(res)

    @twin
    def stream(
        self,
        cmd: Optional[Command] = None,
        *,
        entrypoint: Optional[Sequence[str]] = None,
        user: Optional[str] = None,
        cwd: Optional[PathLike] = None,
        env: Union[None, Mapping[str, str], Sequence[str]] = None,
        timeout: Optional[float] = None,
        stdin: bool = False,
    ) -> Generator[Step, Any, RunStream]:
        """Starts a command and returns a :class:`RunStream` of its output chunks.

        ``for stream, data in env.stream("make")`` (or ``async for`` over
        ``await env.stream.aio(...)``), then ``.result``; or ``.wait()``. The
        arguments are those of :meth:`run`; with ``stdin=True`` feed the
        command through :meth:`RunStream.write` and :meth:`RunStream.close_stdin`.
        """
        self._check_open()
        params = _run_params(self._conn, self.id, cmd, entrypoint, user, cwd, env, timeout)
        if stdin:
            params["stdin"] = True
        rs = RunStream(self)
        p = yield Start(self._conn, "sandbox.run", params, on_notify=rs._notify, cancel_method="run.cancel")
        rs._attach(p)
        return rs

    # ---- desktop -------------------------------------------------------------------

    @property
    def desktop(self) -> "Desktop":
        """The display of a desktop sandbox: ``screenshot()`` (PNG bytes), ``click``,
        ``move``, ``type``, ``key``, each with ``.aio`` (see :class:`~sandweave.desktop.Desktop`)."""
        return Desktop(self)

    # ---- audit ---------------------------------------------------------------------

    @twin
    def audit_log(self, path: PathLike) -> Generator[Step, Any, Dict[str, Any]]:
        """Exports the audit log to ``path`` and ``path + ".status.json"`` (mode 0600) on this machine.

        Returns the status: ``complete``, ``dropped``, ``events``,
        ``last_sequence``, ``bytes``, ``reasons``, ``sha256``, ... An
        incomplete export is a status with ``complete`` false, not an
        exception. Export before :meth:`close`, which deletes the log.
        """
        self._check_open()
        target = os.path.abspath(os.fspath(path))
        status = yield Call(self._conn, "audit.export", {"id": self.id, "path": target})
        return dict(status)

    @twin
    def audit_status(self) -> Generator[Step, Any, Dict[str, Any]]:
        """The audit writer's live status (no flush barrier, so never complete)."""
        self._check_open()
        status = yield Call(self._conn, "audit.status", {"id": self.id})
        return dict(status)

    # ---- snapshots -----------------------------------------------------------------

    @twin
    def snapshot(self, state: str = "auto", *, name: Optional[str] = None) -> Generator[Step, Any, Snapshot]:
        """Snapshots the sandbox: ``state`` is ``"auto"``, ``"filesystem"`` or ``"memory"``.

        ``auto`` takes a filesystem snapshot when audit is on (audit refuses
        memory snapshots). Restore with ``Sandbox(snapshot=snap)``.
        """
        self._check_open()
        params: Dict[str, Any] = {"sandbox": self.id, "kind": _SNAPSHOT_KINDS.get(state, state)}
        if name is not None:
            params["name"] = name
        info = yield Call(self._conn, "snapshot.create", params)
        return Snapshot(self._conn, info)

    # ---- ending ----------------------------------------------------------------------

    @twin
    def terminate(self) -> Generator[Step, Any, None]:
        """Stops the sandbox after a final audit barrier. Idempotent; the audit log can still be exported."""
        self._check_open()
        view = yield Call(self._conn, "sandbox.terminate", {"id": self.id})
        self._view = dict(view)

    @twin
    def remove(self) -> Generator[Step, Any, None]:
        """Deletes the sandbox and everything it has, its audit log included (stopping it first)."""
        self._check_open()
        try:
            yield Call(self._conn, "sandbox.rm", {"id": self.id})
        except NotFound:
            pass
        self._closed = True

    @twin
    def close(self, remove: Optional[bool] = None) -> Generator[Step, Any, None]:
        """Lets go of the sandbox: removes it when this object owns it (it
        created or acquired it), unless ``remove=False``. Idempotent. Calls on a
        closed Sandbox raise :class:`SandweaveError`."""
        if self._closed:
            return
        if self._owned if remove is None else remove:
            try:
                yield Call(self._conn, "sandbox.rm", {"id": self.id})
            except NotFound:
                pass
        self._closed = True

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        removing = self._owned
        try:
            if not self._closed:
                self.terminate()
        except SandweaveError:
            if not removing:
                raise  # nothing else will stop it
        finally:
            self.close()

    async def __aenter__(self) -> "Sandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        removing = self._owned
        try:
            if not self._closed:
                await self.terminate.aio()
        except SandweaveError:
            if not removing:
                raise
        finally:
            await self.close.aio()
