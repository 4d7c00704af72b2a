"""A command's request, output and stdin, shared by ``Sandbox.run``, ``Sandbox.stream`` and :class:`RunStream`."""

from __future__ import annotations

import base64
import math
import os
from typing import Any, Callable, Dict, Generator, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

from ._aio import Call, Next, Step
from .client import MAX_CHUNK_BYTES, Connection, _Pending
from .errors import ConnectionLost, SandweaveError
from .result import RunResult

PathLike = Union[str, "os.PathLike[str]"]
Command = Union[str, Sequence[str]]
Stdin = Union[str, bytes, bytearray, memoryview, Any]
OutputCallback = Callable[[bytes], Any]


def argv_of(cmd: Command) -> List[str]:
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


def run_params(
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
        params["argv"] = argv_of(cmd)
    if entrypoint is not None:
        if isinstance(entrypoint, str):
            raise TypeError("entrypoint: expected a list of str ([] runs cmd as it is), got a str")
        params["entrypoint"] = argv_of(list(entrypoint))
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


class Output:
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
            running=bool(res.get("running", False)),
        )


def chunks_of(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for i in range(0, len(view), MAX_CHUNK_BYTES):
        yield bytes(view[i : i + MAX_CHUNK_BYTES])


def as_bytes(item: Any) -> bytes:
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytes, bytearray, memoryview)):
        return bytes(item)
    raise TypeError(f"stdin: expected str or bytes chunks, got {type(item).__name__}")


def feed_stdin(conn: Connection, p: _Pending, stdin: Stdin) -> Generator[Step, Any, None]:
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
        chunks: Optional[Iterator[bytes]] = iter([as_bytes(stdin)])
        aiter = None
    elif hasattr(stdin, "read"):
        reader: Any = stdin
        chunks = iter(lambda: as_bytes(reader.read(MAX_CHUNK_BYTES)), b"")
        aiter = None
    elif hasattr(stdin, "__aiter__"):
        chunks = None
        aiter = stdin.__aiter__()
    elif isinstance(stdin, Iterable):
        chunks = (as_bytes(c) for c in stdin)
        aiter = None
    else:
        raise TypeError(f"stdin: expected str, bytes, a file or an iterable of chunks, got {type(stdin).__name__}")

    held: Optional[bytes] = None  # one piece of lookahead, so eof rides on the last
    while True:
        if chunks is not None:
            item = next(chunks, None)
        else:
            more, got = yield Next(aiter)
            item = as_bytes(got) if more else None
        if item is None:
            break
        for piece in chunks_of(item):
            if held is not None and not (yield from send(held, False)):
                return
            held = piece
    yield from send(held if held is not None else b"", True)
