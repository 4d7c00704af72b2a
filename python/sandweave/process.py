"""A command left running in a sandbox: :class:`Process` (``env.start(...)``).

The sandbox's supervisor keeps what the command writes (the last 4 MiB, per
command) and how it ended, so these calls work from any connection, after
the one that started it has gone. Its output comes back through an attach
(``sandbox.run`` with ``attach``), which streams the kept output and, with
``follow``, the rest until the command ends (docs/protocol.md).
"""

from __future__ import annotations

from typing import Any, Dict, Generator, Union

from ._aio import Call, Step, twin
from ._command import Output
from .client import Connection
from .result import RunResult

__all__ = ["Process"]


class Process:
    """A detached command: ``handle`` (the supervisor's number for it, what
    ``sandweave ps/logs/kill/wait`` take), ``pid`` (in the guest) and ``sandbox_id``.

    :meth:`wait` returns its :class:`RunResult` once it has ended,
    :meth:`output` what it has written so far, :meth:`kill` signals every
    process it started; each has its ``.aio``. Losing this object (or the
    connection) leaves the command running.
    """

    def __init__(self, conn: Connection, sandbox_id: str, handle: int, pid: int) -> None:
        self._conn = conn
        self.sandbox_id = sandbox_id
        self.handle = handle
        self.pid = pid

    def __repr__(self) -> str:
        return f"Process(sandbox_id={self.sandbox_id!r}, handle={self.handle}, pid={self.pid})"

    def _attach(self, follow: bool) -> Generator[Step, Any, RunResult]:
        out = Output(None, None)
        params: Dict[str, Any] = {"id": self.sandbox_id, "attach": self.handle, "follow": follow}
        # No cancel_method: run.cancel kills a command, and giving up on
        # waiting for this one must not.
        res = yield Call(self._conn, "sandbox.run", params, on_notify=out.notify)
        return out.result(res)

    @twin
    def wait(self) -> Generator[Step, Any, RunResult]:
        """Waits for the command to end and returns its :class:`RunResult`,
        with the output the supervisor kept (the last 4 MiB of each command).

        Interrupting the call (KeyboardInterrupt, a cancelled task) stops
        waiting and leaves the command running.
        """
        result = yield from self._attach(follow=True)
        return result

    @twin
    def output(self) -> Generator[Step, Any, RunResult]:
        """What the command has written so far, without waiting.

        While it runs, the result's ``running`` is True (and its
        ``exit_code`` 0, ``ok`` False); once it has ended, this is what
        :meth:`wait` returns.
        """
        result = yield from self._attach(follow=False)
        return result

    @twin
    def kill(self, signal: Union[str, int] = "TERM") -> Generator[Step, Any, bool]:
        """Sends a signal (``"TERM"``, ``"INT"``, ``"KILL"``, ... or its number)
        to every process of the command; returns whether it was still running.
        Its exit is then 128 + the signal's number, unless it handles the signal."""
        params = {"id": self.sandbox_id, "handle": self.handle, "signal": signal}
        res = yield Call(self._conn, "sandbox.kill", params)
        return bool(res.get("running", False))

    @twin
    def is_running(self) -> Generator[Step, Any, bool]:
        """Whether the command still runs (from ``sandbox.ps``; its output is not read)."""
        res = yield Call(self._conn, "sandbox.ps", {"id": self.sandbox_id})
        for p in res.get("processes", []):
            if p.get("handle") == self.handle:
                return p.get("state") == "running"
        return False  # ended long enough ago to be forgotten
