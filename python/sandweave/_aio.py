"""Every call once, in two forms: ``obj.method(...)`` and ``await obj.method.aio(...)``.

An operation is written once, as a generator that yields the protocol steps it
needs (:class:`Call`, :class:`Start`, :class:`Wait`, :class:`Next`) and
receives their results. :func:`twin` turns it into a method whose plain call
drives the generator synchronously (blocking the calling thread on each step)
and whose ``.aio`` drives it on the running event loop (awaiting a future per
step, no thread per call). So the two forms cannot drift apart.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, Optional

from .client import Connection, NotifyFn, _Pending

__all__ = ["Call", "Start", "Wait", "Next", "Step", "twin", "twin_classmethod", "drive_sync", "drive_async"]


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


Step = Any  # Call | Start | Wait | Next
Op = Generator[Step, Any, Any]


def drive_sync(gen: Op) -> Any:
    """Runs an operation in this thread."""
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            step = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            if isinstance(step, Start):
                value = step.conn.start(
                    step.method, step.params, on_notify=step.on_notify, cancel_method=step.cancel_method
                )
            elif isinstance(step, Call):
                p = step.conn.start(step.method, step.params, on_notify=step.on_notify, cancel_method=step.cancel_method)
                value = step.conn.wait(p)
            elif isinstance(step, Wait):
                value = step.conn.wait(step.pending)
            elif isinstance(step, Next):
                raise TypeError("an async iterable can only be used with the .aio form")
            else:  # pragma: no cover - a bug in an operation
                raise TypeError(f"unknown step {step!r}")
        except BaseException as e:  # noqa: B902 - thrown into the operation, which may clean up
            error = e


async def drive_async(gen: Op) -> Any:
    """Runs an operation on the running event loop."""
    loop = asyncio.get_running_loop()
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            step = gen.throw(error) if error is not None else gen.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            if isinstance(step, Start):
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
        except BaseException as e:  # noqa: B902
            error = e


class _Bound:
    """A twin bound to its instance or class: call it, or await ``.aio(...)``."""

    __slots__ = ("_fn", "_target")

    def __init__(self, fn: Callable[..., Op], target: Any) -> None:
        self._fn = fn
        self._target = target

    @property
    def __doc__(self) -> Optional[str]:  # type: ignore[override]
        return self._fn.__doc__

    @property
    def __name__(self) -> str:
        return self._fn.__name__

    @property
    def __wrapped__(self) -> Callable[..., Op]:
        return self._fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return drive_sync(self._fn(self._target, *args, **kwargs))

    async def aio(self, *args: Any, **kwargs: Any) -> Any:
        """The async form: same arguments, awaited on the running event loop."""
        return await drive_async(self._fn(self._target, *args, **kwargs))

    def __repr__(self) -> str:
        return f"<sandweave call {self._fn.__qualname__} (and .aio) of {self._target!r}>"


class _TwinDescriptor:
    def __init__(self, fn: Callable[..., Op], on_class: bool) -> None:
        self._fn = fn
        self._on_class = on_class
        functools.update_wrapper(self, fn)

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        if self._on_class:
            return _Bound(self._fn, owner if owner is not None else type(obj))
        if obj is None:
            return self
        return _Bound(self._fn, obj)


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

    def twin(fn: Callable[Concatenate[Any, P], Generator[Any, Any, R]]) -> TwinMethod[P, R]: ...
    def twin_classmethod(fn: Callable[Concatenate[Any, P], Generator[Any, Any, R]]) -> TwinMethod[P, R]: ...

else:

    def twin(fn):
        """A method written as a generator of protocol steps, callable sync or through ``.aio``."""
        return _TwinDescriptor(fn, on_class=False)

    def twin_classmethod(fn):
        """As :func:`twin`, bound to the class (``Sandbox.create``, ``Sandbox.create.aio``)."""
        return _TwinDescriptor(fn, on_class=True)
