"""Warm pools: sandboxes started ahead of time, handed out by ``acquire``."""

from __future__ import annotations

import secrets
from typing import Any, Dict, Generator, Mapping, Optional, Union

from ._aio import Call, Step, twin, twin_classmethod
from .client import Connection, resolve_connection
from .errors import NotFound
from .sandbox import Sandbox, Snapshot, Template, create_params

__all__ = ["Pool"]


def _pool_name() -> str:
    return "sdk-" + secrets.token_hex(6)


class Pool:
    """A warm pool of ``size`` sandboxes on a worker.

    ``Pool(template="coding", size=8, hidepid=2, audit=True)`` creates it and
    starts every member before it returns (``await Pool.create.aio(...)`` is
    the async form). The create options (``template``, ``hidepid``,
    ``audit``, ``user``, ``labels``, ``snapshot``, ``ttl``, ``idle_timeout``)
    apply to every member, as for :class:`~sandweave.Sandbox`; a member's ttl
    and idle clocks start when it is acquired. ``name`` must be unique on the worker;
    without one the SDK picks ``sdk-`` and 12 random hex digits.

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

    def __init__(
        self,
        template: Optional[Template] = None,
        *,
        size: int,
        hidepid: Optional[int] = None,
        audit: Optional[bool] = None,
        user: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        snapshot: Union[None, str, Snapshot] = None,
        ttl: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        name: Optional[str] = None,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> None:
        conn = resolve_connection(connection, state_dir)
        name = name or _pool_name()
        params = {"name": name, "size": size}
        options = create_params(
            conn, template, hidepid, audit, user, None, labels, snapshot, ttl=ttl, idle_timeout=idle_timeout
        )
        params.update(options)
        info = conn.call("pool.create", params)
        self._setup(conn, name, info, owned=True)

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

    @twin_classmethod
    def create(
        cls: Any,
        template: Optional[Template] = None,
        *,
        size: int,
        hidepid: Optional[int] = None,
        audit: Optional[bool] = None,
        user: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        snapshot: Union[None, str, Snapshot] = None,
        ttl: Optional[float] = None,
        idle_timeout: Optional[float] = None,
        name: Optional[str] = None,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> Generator[Step, Any, "Pool"]:
        """Creates a pool: the same as ``Pool(...)``, with an async form."""
        conn = resolve_connection(connection, state_dir)
        name = name or _pool_name()
        params: Dict[str, Any] = {"name": name, "size": size}
        options = create_params(
            conn, template, hidepid, audit, user, None, labels, snapshot, ttl=ttl, idle_timeout=idle_timeout
        )
        params.update(options)
        info = yield Call(conn, "pool.create", params)
        created: Pool = cls._wrap(conn, name, info, owned=True)
        return created

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
