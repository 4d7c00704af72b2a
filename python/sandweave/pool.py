"""Warm pools: sandboxes started ahead of time, handed out by ``acquire``."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any, Dict, Generator, Mapping, Optional, Union

from ._aio import Call, Step, create_from, init_from, twin, twin_classmethod
from .client import Connection, resolve_connection
from .errors import NotFound
from .options import CreateOptions, Template, create, takes_create_options
from .sandbox import Sandbox

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

__all__ = ["Pool"]


def _pool_name() -> str:
    return "sdk-" + secrets.token_hex(6)


#: The number of warm members of a pool made without ``size=``.
DEFAULT_SIZE = 1


class Pool:
    """A warm pool of sandboxes on a worker, started ahead of time.

    ``Pool(template="coding", size=8, hidepid=2, audit=True)`` creates it and
    starts every member before it returns; ``await Pool.create.aio(...)`` is
    the async form (see :meth:`create` for the arguments).

    :meth:`acquire` hands out a warm member (the pool refills behind it); the
    :class:`~sandweave.Sandbox` is then the caller's, removed by its own
    ``close()``. :meth:`close` removes the pool and its idle members.
    ``with Pool(...) as pool:`` closes on exit.
    """

    _conn: Connection
    _name: str
    _info: Dict[str, Any]
    _owned: bool
    _closed: bool

    @takes_create_options
    def _create(
        self,
        template: Optional[Template] = None,
        *,
        size: int = DEFAULT_SIZE,
        name: Optional[str] = None,
        **options: Unpack[CreateOptions],
    ) -> Generator[Step, Any, None]:
        """Creates a pool of ``size`` warm sandboxes (default 1, 0 to 1000).

        ``name`` must be unique on the worker; without one the SDK picks
        ``sdk-`` and 12 random hex digits. The other arguments are those of
        :meth:`Sandbox.create <sandweave.Sandbox.create>` (but a member has no
        name) and apply to every member; a member's ttl and idle clocks start
        when it is acquired. More members than ``size`` are made on demand by
        :meth:`acquire`; :meth:`resize` changes the size.
        """
        name = name or _pool_name()
        conn, info = yield from create("pool.create", template, options, name=name, size=size)
        self._setup(conn, name, info, owned=True)

    __init__ = init_from(_create)

    def _setup(self, conn: Connection, name: str, info: Mapping[str, Any], owned: bool) -> None:
        self._conn = conn
        self._name = name
        self._info = dict(info)
        self._owned = owned
        self._closed = False

    @classmethod
    def _wrap(cls, conn: Connection, name: str, info: Mapping[str, Any], owned: bool) -> "Pool":
        obj = cls.__new__(cls)
        obj._setup(conn, name, info, owned)
        return obj

    @property
    def name(self) -> str:
        """The pool's name on the worker."""
        return self._name

    @property
    def size(self) -> int:
        """The size as of the last call that returned the pool."""
        return int(self._info.get("size", 0))

    @property
    def info(self) -> Dict[str, Any]:
        """The pool object as last returned (``size``, ``warm``, ``in_use``, ``starting``, ``options``, ``last_error``)."""
        return dict(self._info)

    @property
    def connection(self) -> Connection:
        return self._conn

    def __repr__(self) -> str:
        return f"Pool(name={self._name!r}, size={self.size})"

    #: ``Pool.create(...)`` is ``Pool(...)``; ``await Pool.create.aio(...)`` is its async form.
    create = create_from(_create)

    @twin_classmethod
    def from_name(
        cls: Any,
        name: str,
        *,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> Generator[Step, Any, "Pool"]:
        """An existing pool (not owned: :meth:`close` leaves it; ``close(remove=True)`` removes it)."""
        conn = resolve_connection(connection, state_dir)
        info = yield from _find(conn, name)
        found: Pool = cls._wrap(conn, name, info, owned=False)
        return found

    @twin
    def acquire(self) -> Generator[Step, Any, Sandbox]:
        """A running sandbox from the pool, now the caller's (a new one if none is warm).

        Its :attr:`Sandbox.info` ``["pool"]["acquired_audit_seq"]`` is the audit
        position at hand-over, where the episode starts in its audit log.
        """
        view = yield Call(self._conn, "pool.acquire", {"name": self._name})
        return Sandbox._wrap(self._conn, view, owned=True)

    @twin
    def resize(self, size: int) -> Generator[Step, Any, Dict[str, Any]]:
        """Sets the number of warm members (0-1000); returns the pool object."""
        info = yield Call(self._conn, "pool.resize", {"name": self._name, "size": size})
        self._info = dict(info)
        return dict(info)

    @twin
    def inspect(self) -> Generator[Step, Any, Dict[str, Any]]:
        """The pool object now (from ``pool.ls``)."""
        info = yield from _find(self._conn, self._name)
        self._info = dict(info)
        return dict(info)

    @twin
    def close(self, remove: Optional[bool] = None) -> Generator[Step, Any, None]:
        """Removes the pool and its idle members when this object created it
        (or with ``remove=True``). Acquired sandboxes stay: they are their
        owners'. Idempotent."""
        if self._closed:
            return
        if self._owned if remove is None else remove:
            try:
                yield Call(self._conn, "pool.rm", {"name": self._name})
            except NotFound:
                pass
        self._closed = True

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Pool":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close.aio()


def _find(conn: Connection, name: str) -> Generator[Step, Any, Dict[str, Any]]:
    # The protocol has no pool.inspect: pool.ls, then this name.
    res = yield Call(conn, "pool.ls")
    for info in res.get("pools", []):
        if info.get("name") == name:
            return dict(info)
    raise NotFound(f"no such pool: {name}")
