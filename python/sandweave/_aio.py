"""Every call once, in two forms: ``obj.method(...)`` and ``await obj.method.aio(...)``.

An operation is written once, as a generator that yields the protocol steps it
needs (:class:`Call`, :class:`Start`, :class:`Wait`, :class:`Next`, and for an
operation that runs the sandweave binary itself :class:`Spawn`,
:class:`ReadLine`, :class:`Reap`) and receives their results. :func:`twin` turns it into a method whose plain call
drives the generator synchronously (blocking the calling thread on each step)
and whose ``.aio`` drives it on the running event loop (awaiting a future per
step, no thread per call). So the two forms cannot drift apart. An operation that produces items as it
goes yields :class:`Emit` for each: :func:`iterate_sync` and
:func:`iterate_async` turn it into an iterator and an async iterator of them
(the plain drivers pass over them).

A constructor is such an operation too, on the new object: :func:`init_from`
makes ``__init__`` of it and :func:`create_from` the class's ``create`` twin
(``Sandbox(...)``, ``Sandbox.create(...)``, ``await Sandbox.create.aio(...)``).

Both forms are real functions with the operation's docstring and signature
(without ``self``, returning what the generator returns), so ``help()``,
``inspect.signature`` and editors show what to pass.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import inspect
import subprocess
import threading
import typing
from typing import TYPE_CHECKING, Any, AsyncIterator, Callable, Deque, Dict, Generator, Iterator, List, Optional, Sequence

from .client import Connection, NotifyFn, _Pending

__all__ = [
    "Call",
    "Start",
    "Wait",
    "Next",
    "Spawn",
    "ReadLine",
    "Reap",
    "Emit",
    "Step",
    "twin",
    "twin_classmethod",
    "init_from",
    "create_from",
    "drive_sync",
    "drive_async",
    "iterate_sync",
    "iterate_async",
]


class Call:
    """Send a request and wait for its result (the generator receives it, or its error is thrown in)."""

    __slots__ = ("conn", "method", "params", "on_notify", "cancel_method")

    def __init__(
        self,
        conn: Connection,
        method: str,
        params: Optional[Dict[str, Any]] = None,
        *,
        on_notify: Optional[NotifyFn] = None,
        cancel_method: Optional[str] = None,
    ) -> None:
        self.conn = conn
        self.method = method
        self.params = params
        self.on_notify = on_notify
        self.cancel_method = cancel_method


class Start(Call):
    """Send a request without waiting: the generator receives its handle (a ``_Pending``)."""

    __slots__ = ()


class Wait:
    """Wait for a request sent with :class:`Start`."""

    __slots__ = ("conn", "pending")

    def __init__(self, conn: Connection, pending: _Pending) -> None:
        self.conn = conn
        self.pending = pending


class Next:
    """Await the next item of an async iterator (async form only); receives ``(True, item)`` or ``(False, None)`` at its end."""

    __slots__ = ("aiter",)

    def __init__(self, aiter: Any) -> None:
        self.aiter = aiter


class Spawn:
    """Start a program (no shell) with stdout piped: the generator receives its handle.
    Its stderr is kept (the last 64 KiB) for :class:`Reap`. A driver that ends
    before the program was reaped terminates it (SIGTERM) and waits for it."""

    __slots__ = ("argv", "env")

    def __init__(self, argv: Sequence[str], env: Optional[Dict[str, str]] = None) -> None:
        self.argv = list(argv)
        self.env = env


class _OnProcess:
    __slots__ = ("proc",)

    def __init__(self, proc: Any) -> None:
        self.proc = proc


class ReadLine(_OnProcess):
    """The next line of a spawned program's stdout (bytes with its newline), b"" at its end."""

    __slots__ = ()


class Reap(_OnProcess):
    """Wait for a spawned program: the generator receives ``(exit status, stderr text)``."""

    __slots__ = ()


class Emit:
    """An item for the iterator faces (:func:`iterate_sync`, :func:`iterate_async`)."""

    __slots__ = ("item",)

    def __init__(self, item: Any) -> None:
        self.item = item


Step = Any  # Call | Start | Wait | Next | Spawn | ReadLine | Reap | Emit

_STDERR_KEPT = 64 << 10
_LINE_LIMIT = 16 << 20


class _Tail:
    """The last bytes of a stream."""

    def __init__(self) -> None:
        self.chunks: Deque[bytes] = collections.deque()
        self.size = 0

    def add(self, b: bytes) -> None:
        self.chunks.append(b)
        self.size += len(b)
        while self.size > _STDERR_KEPT and len(self.chunks) > 1:
            self.size -= len(self.chunks.popleft())

    def text(self) -> str:
        return b"".join(self.chunks)[-_STDERR_KEPT:].decode("utf-8", "replace")


class _SyncProcess:
    def __init__(self, step: Spawn) -> None:
        self.proc = subprocess.Popen(
            step.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=step.env
        )
        self.err = _Tail()
        self.drain = threading.Thread(target=self._drain, daemon=True)
        self.drain.start()
        self.reaped = False

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):  # type: ignore[union-attr]
            self.err.add(chunk)

    def readline(self) -> bytes:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline(_LINE_LIMIT)

    def reap(self) -> Any:
        code = self.proc.wait()
        self.drain.join()
        self.reaped = True
        return code, self.err.text()

    def end(self) -> None:
        if not self.reaped:
            self.proc.terminate()
            self.reap()


class _AsyncProcess:
    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.err = _Tail()
        self.drain = asyncio.ensure_future(self._drain())
        self.reaped = False

    @classmethod
    async def start(cls, step: Spawn) -> "_AsyncProcess":
        proc = await asyncio.create_subprocess_exec(
            *step.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=step.env,
            limit=_LINE_LIMIT,
        )
        return cls(proc)

    async def _drain(self) -> None:
        while True:
            chunk = await self.proc.stderr.read(65536)
            if not chunk:
                return
            self.err.add(chunk)

    async def readline(self) -> bytes:
        line: bytes = await self.proc.stdout.readline()
        return line

    async def reap(self) -> Any:
        code = await self.proc.wait()
        await self.drain
        self.reaped = True
        return code, self.err.text()

    async def end(self) -> None:
        if not self.reaped:
            if self.proc.returncode is None:
                self.proc.terminate()
            await asyncio.shield(self.reap())
Op = Generator[Step, Any, Any]


def drive_sync(gen: Op) -> Any:
    """Runs an operation in this thread."""
    steps = _steps_sync(gen)
    try:
        for kind, value in steps:
            if kind == "done":
                return value
    finally:
        steps.close()
    return None  # pragma: no cover


def iterate_sync(gen: Op) -> Iterator[Any]:
    """Runs an operation in this thread, giving each item it emits as it comes."""
    steps = _steps_sync(gen)
    try:
        for kind, value in steps:
            if kind == "item":
                yield value
    finally:
        steps.close()


def _steps_sync(gen: Op) -> Iterator[Any]:
    """Drives `gen`; yields ("item", x) for each Emit and ("done", result) at the end."""
    procs: List[_SyncProcess] = []
    value: Any = None
    error: Optional[BaseException] = None
    try:
        while True:
            try:
                step = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                yield "done", stop.value
                return
            value, error = None, None
            try:
                if isinstance(step, Emit):
                    yield "item", step.item
                elif isinstance(step, Spawn):
                    value = _SyncProcess(step)
                    procs.append(value)
                elif isinstance(step, ReadLine):
                    value = step.proc.readline()
                elif isinstance(step, Reap):
                    value = step.proc.reap()
                elif isinstance(step, Start):
                    value = step.conn.start(
                        step.method, step.params, on_notify=step.on_notify, cancel_method=step.cancel_method
                    )
                elif isinstance(step, Call):
                    p = step.conn.start(
                        step.method, step.params, on_notify=step.on_notify, cancel_method=step.cancel_method
                    )
                    value = step.conn.wait(p)
                elif isinstance(step, Wait):
                    value = step.conn.wait(step.pending)
                elif isinstance(step, Next):
                    raise TypeError("an async iterable can only be used with the .aio form")
                else:  # pragma: no cover - a bug in an operation
                    raise TypeError(f"unknown step {step!r}")
            except GeneratorExit:
                raise
            except BaseException as e:  # noqa: B902 - thrown into the operation, which may clean up
                error = e
    finally:
        gen.close()
        for proc in procs:
            proc.end()


async def drive_async(gen: Op) -> Any:
    """Runs an operation on the running event loop."""
    steps = _steps_async(gen)
    try:
        async for kind, value in steps:
            if kind == "done":
                return value
    finally:
        await steps.aclose()
    return None  # pragma: no cover


async def iterate_async(gen: Op) -> AsyncIterator[Any]:
    """Runs an operation on the running event loop, giving each item it emits as it comes."""
    steps = _steps_async(gen)
    try:
        async for kind, value in steps:
            if kind == "item":
                yield value
    finally:
        await steps.aclose()


async def _steps_async(gen: Op) -> AsyncIterator[Any]:
    """Drives `gen`; yields ("item", x) for each Emit and ("done", result) at the end."""
    loop = asyncio.get_running_loop()
    procs: List[_AsyncProcess] = []
    value: Any = None
    error: Optional[BaseException] = None
    try:
        while True:
            try:
                step = gen.throw(error) if error is not None else gen.send(value)
            except StopIteration as stop:
                yield "done", stop.value
                return
            value, error = None, None
            try:
                if isinstance(step, Emit):
                    yield "item", step.item
                elif isinstance(step, Spawn):
                    value = await _AsyncProcess.start(step)
                    procs.append(value)
                elif isinstance(step, ReadLine):
                    value = await step.proc.readline()
                elif isinstance(step, Reap):
                    value = await step.proc.reap()
                elif isinstance(step, Start):
                    value = step.conn.start(
                        step.method, step.params, on_notify=step.on_notify, loop=loop, cancel_method=step.cancel_method
                    )
                elif isinstance(step, Call):
                    p = step.conn.start(
                        step.method, step.params, on_notify=step.on_notify, loop=loop, cancel_method=step.cancel_method
                    )
                    value = await step.conn.wait_async(p)
                elif isinstance(step, Wait):
                    value = await step.conn.wait_async(step.pending)
                elif isinstance(step, Next):
                    try:
                        value = (True, await step.aiter.__anext__())
                    except StopAsyncIteration:
                        value = (False, None)
                else:  # pragma: no cover
                    raise TypeError(f"unknown step {step!r}")
            except GeneratorExit:
                raise
            except BaseException as e:  # noqa: B902
                error = e
    finally:
        gen.close()
        for proc in procs:
            await proc.end()


def _result_annotation(ann: Any) -> Any:
    """What an operation returns, from its ``Generator[Step, Any, R]`` annotation: ``R``."""
    if not isinstance(ann, str):  # an evaluated annotation
        args = typing.get_args(ann)
        return args[2] if len(args) == 3 else ann
    if not (ann.startswith("Generator[") and ann.endswith("]")):
        return ann
    inner = ann[len("Generator[") : -1]
    depth, last = 0, -1
    for i, ch in enumerate(inner):  # the last comma outside brackets
        depth += (ch == "[") - (ch == "]")
        if ch == "," and depth == 0:
            last = i
    result = inner[last + 1 :].strip()
    return result[1:-1] if result[:1] in ("'", '"') and result[-1:] == result[:1] else result


def _signature(fn: Callable[..., Op], first: Optional[str] = None, returns: Any = None) -> inspect.Signature:
    """The signature an operation shows: its own, the result type as the return, and
    its first parameter (``self``/``cls``) dropped, or renamed to ``first``."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    params = [params[0].replace(name=first)] + params[1:] if first else params[1:]
    ret = _result_annotation(sig.return_annotation) if returns is None else returns
    return sig.replace(parameters=params, return_annotation=ret)


class _TwinDescriptor:
    """The class attribute :func:`twin` makes. Reading it from an object gives a
    plain function bound to that object, with ``.aio`` its coroutine function; both
    carry the operation's docstring and its signature without ``self``."""

    def __init__(self, fn: Callable[..., Op], on_class: bool, returns: Any = None) -> None:
        self._fn = fn
        self._on_class = on_class
        self._returns = returns
        functools.update_wrapper(self, fn)
        self._named(fn.__name__, fn.__qualname__)

    def __set_name__(self, owner: type, name: str) -> None:
        if self._returns is _OWNER:
            self._returns = owner.__name__
        self._named(name, f"{owner.__qualname__}.{name}")

    def _named(self, name: str, qualname: str) -> None:
        self.__name__ = self._name = name
        self.__qualname__ = self._qualname = qualname
        returns = None if self._returns is _OWNER else self._returns
        self.__signature__ = _signature(self._fn, first=None if self._on_class else "self", returns=returns)
        self._bound_signature = _signature(self._fn, returns=returns)

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        if self._on_class:
            return self._bind(owner if owner is not None else type(obj))
        if obj is None:
            return self
        return self._bind(obj)

    def __call__(self, target: Any, *args: Any, **kwargs: Any) -> Any:
        """``Class.method(obj, ...)``, as for a plain method."""
        return self._bind(target)(*args, **kwargs)

    def _bind(self, target: Any) -> Callable[..., Any]:
        fn = self._fn

        def call(*args: Any, **kwargs: Any) -> Any:
            return drive_sync(fn(target, *args, **kwargs))

        async def aio(*args: Any, **kwargs: Any) -> Any:
            return await drive_async(fn(target, *args, **kwargs))

        for f, qualname in ((call, self._qualname), (aio, self._qualname + ".aio")):
            f.__name__, f.__qualname__, f.__module__, f.__doc__ = self._name, qualname, fn.__module__, fn.__doc__
            f.__wrapped__ = fn  # type: ignore[attr-defined]
            f.__signature__ = self._bound_signature  # type: ignore[attr-defined]
        call.aio = aio  # type: ignore[attr-defined]
        return call


_OWNER = object()  # a constructor's result: the class it is defined in


def _constructor(op: Callable[..., Op]) -> Callable[..., Op]:
    """``create(cls, ...)``: a new object of ``cls`` that ``op`` sets up."""

    def create(cls: type, *args: Any, **kwargs: Any) -> Op:
        obj = cls.__new__(cls)
        yield from op(obj, *args, **kwargs)
        return obj

    functools.update_wrapper(create, op)
    create.__signature__ = _signature(op, first="cls")  # type: ignore[attr-defined]
    return create


if TYPE_CHECKING:
    from typing import Awaitable, Generic, TypeVar

    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")
    R = TypeVar("R")

    class BoundTwin(Generic[P, R]):
        def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R: ...
        def aio(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]: ...

    class TwinMethod(Generic[P, R]):
        def __get__(self, obj: Any, owner: Any = None) -> BoundTwin[P, R]: ...

    T = TypeVar("T")

    def twin(fn: Callable[Concatenate[Any, P], Generator[Any, Any, R]]) -> TwinMethod[P, R]: ...
    def twin_classmethod(fn: Callable[Concatenate[Any, P], Generator[Any, Any, R]]) -> TwinMethod[P, R]: ...
    def init_from(op: Callable[Concatenate[T, P], Generator[Any, Any, None]]) -> Callable[Concatenate[T, P], None]: ...
    def create_from(op: Callable[Concatenate[T, P], Generator[Any, Any, None]]) -> TwinMethod[P, T]: ...

else:

    def twin(fn):
        """A method written as a generator of protocol steps, callable sync or through ``.aio``."""
        return _TwinDescriptor(fn, on_class=False)

    def twin_classmethod(fn):
        """As :func:`twin`, bound to the class (``Sandbox.create``, ``Sandbox.create.aio``)."""
        return _TwinDescriptor(fn, on_class=True)

    def init_from(op):
        """``__init__`` from an operation that sets up ``self``: ``Cls(...)`` runs it in this thread."""

        def __init__(self, *args, **kwargs):
            drive_sync(op(self, *args, **kwargs))

        functools.update_wrapper(__init__, op)
        __init__.__name__ = "__init__"
        __init__.__qualname__ = op.__qualname__.rsplit(".", 1)[0] + ".__init__"
        __init__.__signature__ = _signature(op, first="self", returns="None")
        return __init__

    def create_from(op):
        """The class's ``create`` from the same operation as its :func:`init_from`:
        ``Cls.create(...)`` is ``Cls(...)``; ``await Cls.create.aio(...)`` runs it on the event loop."""
        return _TwinDescriptor(_constructor(op), on_class=True, returns=_OWNER)


def function_from(op: Callable[..., Op]) -> Callable[..., Any]:
    """A module-level function from an operation: ``f(...)`` runs it in this thread,
    ``await f.aio(...)`` on the event loop; both show the operation's signature."""
    sig = inspect.signature(op)
    sig = sig.replace(return_annotation=_result_annotation(sig.return_annotation))

    def call(*args: Any, **kwargs: Any) -> Any:
        return drive_sync(op(*args, **kwargs))

    async def aio(*args: Any, **kwargs: Any) -> Any:
        return await drive_async(op(*args, **kwargs))

    for f, suffix in ((call, ""), (aio, ".aio")):
        f.__name__, f.__qualname__, f.__module__, f.__doc__ = op.__name__, op.__name__ + suffix, op.__module__, op.__doc__
        f.__wrapped__ = op  # type: ignore[attr-defined]
        f.__signature__ = sig  # type: ignore[attr-defined]
    call.aio = aio  # type: ignore[attr-defined]
    return call


def iterator_from(op: Callable[..., Op], name: str, doc: str, item: Any) -> Callable[..., Any]:
    """The items an operation emits: ``f(...)`` an iterator (this thread),
    ``f.aio(...)`` an async iterator (the event loop)."""
    sig = inspect.signature(op)

    def call(*args: Any, **kwargs: Any) -> Iterator[Any]:
        return iterate_sync(op(*args, **kwargs))

    def aio(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        return iterate_async(op(*args, **kwargs))

    for f, suffix, ret in ((call, "", Iterator[item]), (aio, ".aio", AsyncIterator[item])):
        f.__name__, f.__qualname__, f.__module__, f.__doc__ = name, name + suffix, op.__module__, doc
        f.__signature__ = sig.replace(return_annotation=ret)  # type: ignore[attr-defined]
    call.aio = aio  # type: ignore[attr-defined]
    return call
