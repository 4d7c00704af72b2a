"""A gVisor sandbox on a worker: :class:`Sandbox`.

Every method that talks to the worker has an async twin: ``env.run(...)`` and
``await env.run.aio(...)`` take the same arguments and do the same thing.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, Generator, List, Mapping, Optional, Sequence, Union

from ._aio import Call, Start, Step, Wait, create_from, init_from, twin, twin_classmethod
from ._command import Command, OutputCallback, Output, PathLike, Stdin, feed_stdin, run_params
from .client import Connection, resolve_connection
from .desktop import Desktop
from .errors import NotFound, SandweaveError
from .options import CreateOptions, Template, create, takes_create_options
from .process import Process
from .result import RunResult
from .snapshot import KINDS as snapshot_kinds
from .snapshot import Snapshot
from .stream import RunStream

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

__all__ = ["Sandbox", "RunResult", "RunStream", "Snapshot"]


class Sandbox:
    """A gVisor sandbox on a worker.

    ``Sandbox(template="coding", hidepid=2, audit=True)`` creates and starts
    one; ``await Sandbox.create.aio(...)`` is the async form (see
    :meth:`create` for the arguments).

    The sandbox belongs to this object: :meth:`close` removes it (with its
    audit log, so export first). ``with Sandbox(...) as env:`` terminates and
    closes on exit. Sandboxes found with :meth:`from_id` or :meth:`list` are
    not owned: closing them only lets go of them.
    """

    _conn: Connection
    _view: Dict[str, Any]
    _owned: bool
    _closed: bool

    @takes_create_options
    def _create(
        self, template: Optional[Template] = None, *, name: Optional[str] = None, **options: Unpack[CreateOptions]
    ) -> Generator[Step, Any, None]:
        """Creates and starts a sandbox.

        - ``template``: a template name, a file on this machine (read here
          and sent as its content; its ``extends`` may name an installed
          template, not another file), inline JSON/YAML text, or a dict such
          as ``{"extends": "coding", "runtime_options": {"audit_max_bytes":
          8 * 1024**3}}``; default the worker's (``base``).
        - ``name`` (unique on the worker).
        - ``hidepid`` (0, 1, 2) and ``audit`` (bool): explicit values win over
          the template and the snapshot.
        - ``user``: the default ``"UID[:GID]"`` for commands.
        - ``labels`` (dict of str).
        - ``snapshot``: restore from this snapshot (a :class:`Snapshot`, id or name)
          instead of a template.
        - ``ttl`` and ``idle_timeout`` (seconds): the worker terminates the
          sandbox (audit barrier first) when it has lived that long, or has had
          no command and no call acting on it for that long; see :attr:`time_left`.
        - ``cpus`` (float) and ``memory`` (bytes): override the template's
          ``resources``; through a ``weave://`` controller they also size the
          Slurm job (``--cpus-per-task``, ``--mem``).
        - ``network``: ``"none"`` (no network, whatever the template says), or
          ``{"allow": [...], "deny": [...]}``, destinations
          ``"CIDR[:PORTS[/tcp|udp]]"`` added to the template's egress policy
          (``sandweave create --allow/--deny``).
        - ``publish``: guest TCP ports to expose on this host's loopback for
          the sandbox's life, each a port (the same on both sides) or
          ``"HOST:GUEST"`` (``sandweave create --publish``); without an
          ``allow`` list the sandbox gets a network that lets nothing out.
          Not for pool members.
        - ``connection``: ``"local"`` (default, or ``SANDWEAVE_HOST``),
          ``"ssh://user@host"``, or a :class:`~sandweave.Connection`;
          ``state_dir``: the worker's state directory.

        Only the options given are sent: every default is the worker's.
        ``Sandbox(...)`` runs this in the calling thread, ``Sandbox.create(...)``
        is the same, and ``await Sandbox.create.aio(...)`` runs it on the event loop.
        """
        conn, view = yield from create("sandbox.create", template, options, name=name)
        self._setup(conn, view, owned=True)

    __init__ = init_from(_create)

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

    #: ``Sandbox.create(...)`` is ``Sandbox(...)``; ``await Sandbox.create.aio(...)`` is its async form.
    create = create_from(_create)

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
    ) -> Generator[Step, Any, RunResult]:
        """Runs a command in the sandbox and returns its :class:`RunResult`
        (:meth:`start` leaves one running instead).

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

        A non-zero exit is a result, not an exception. Errors of the request
        itself (no such sandbox, a bad ``user``) raise :class:`SandweaveError`
        subclasses. Interrupting the call (KeyboardInterrupt, a cancelled
        task) kills the command.
        """
        self._check_open()
        params = run_params(self._conn, self.id, cmd, entrypoint, user, cwd, env, timeout)
        out = Output(on_stdout, on_stderr)
        if stdin is None:
            res = yield Call(self._conn, "sandbox.run", params, on_notify=out.notify, cancel_method="run.cancel")
            return out.result(res)
        params["stdin"] = True
        p = yield Start(self._conn, "sandbox.run", params, on_notify=out.notify, cancel_method="run.cancel")
        try:
            yield from feed_stdin(self._conn, p, stdin)
        except BaseException:
            self._conn.abandon(p)
            raise
        res = yield Wait(self._conn, p)
        return out.result(res)

    @twin
    def start(
        self,
        cmd: Optional[Command] = None,
        *,
        entrypoint: Optional[Sequence[str]] = None,
        user: Optional[str] = None,
        cwd: Optional[PathLike] = None,
        env: Union[None, Mapping[str, str], Sequence[str]] = None,
        timeout: Optional[float] = None,
    ) -> Generator[Step, Any, Process]:
        """Starts a command and returns its :class:`Process` at once, without
        waiting (``sandweave run --detach``).

        The arguments are those of :meth:`run`. The command has no stdin; the
        sandbox's supervisor keeps its output (the last 4 MiB) for
        :meth:`Process.output` and :meth:`Process.wait`, and ``timeout``
        still applies. It goes on running when this connection closes, until
        it ends, :meth:`Process.kill`, or the sandbox's end.
        """
        self._check_open()
        params = run_params(self._conn, self.id, cmd, entrypoint, user, cwd, env, timeout)
        params["detach"] = True
        started = yield Call(self._conn, "sandbox.run", params)
        return Process(self._conn, self.id, int(started["handle"]), int(started["pid"]))

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
        params = run_params(self._conn, self.id, cmd, entrypoint, user, cwd, env, timeout)
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
        params: Dict[str, Any] = {"sandbox": self.id, "kind": snapshot_kinds.get(state, state)}
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
    def finish(self, audit_log: Optional[PathLike] = None) -> Generator[Step, Any, Optional[Dict[str, Any]]]:
        """Ends an episode in one call: the final audit barrier, the stop, the
        whole audit log exported to ``audit_log`` (and its ``.status.json``, as
        :meth:`audit_log` writes them), then the removal. Returns the export's
        status, or None without ``audit_log``.

        The same as :meth:`terminate`, :meth:`audit_log` and :meth:`remove` in
        a row, in one request under one lock. If the export fails, the sandbox
        is left stopped with its log (export it again, then :meth:`close`).
        """
        self._check_open()
        params: Dict[str, Any] = {"id": self.id}
        if audit_log is not None:
            params["audit_path"] = os.path.abspath(os.fspath(audit_log))
        result = yield Call(self._conn, "sandbox.finish", params)
        self._closed = True
        status = dict(result).get("audit")
        return dict(status) if status is not None else None

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
