"""A command whose output is read as it comes: :class:`RunStream`."""

from __future__ import annotations

import asyncio
import base64
import collections
import threading
from typing import TYPE_CHECKING, Any, Deque, Dict, Generator, Optional, Tuple, Union

from ._aio import Call, Step, Wait, twin
from ._command import as_bytes, chunks_of
from .client import _Pending
from .result import RunResult

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["RunStream"]

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
        for piece in chunks_of(as_bytes(data)):
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
