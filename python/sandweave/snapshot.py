"""Snapshots of sandboxes: :class:`Snapshot`."""

from __future__ import annotations

from typing import Any, Dict, Generator, List, Mapping, Optional, Union

from ._aio import Call, Step, twin, twin_classmethod
from .client import Connection, resolve_connection

__all__ = ["Snapshot"]

#: ``Sandbox.snapshot``'s kinds, by the seed's names for them.
KINDS = {"auto": "auto", "filesystem": "fs", "fs": "fs", "memory": "memory"}


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
