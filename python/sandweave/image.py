"""Root filesystem images on a worker: built ones (``base``, ``coding``, ``desktop``) and imported ones."""

from __future__ import annotations

import os
from typing import Any, Dict, Generator, List, Optional, Union

from ._aio import Call, Step, twin, twin_classmethod
from .client import Connection, resolve_connection
from .errors import NotFound

__all__ = ["Image"]

PathLike = Union[str, "os.PathLike[str]"]


class Image:
    """An image on a worker, as ``image.inspect`` last described it.

    ``Image.import_("web", "docker-archive:/tmp/web.tar")`` brings one in
    (``docker-archive:FILE`` from ``docker save``, ``oci-archive:FILE`` or
    ``oci:DIR``, paths on the worker); ``Image.build("coding")`` builds a
    built-in recipe; ``Image.ls()`` lists them and ``Image.inspect(name)``
    finds one. Each is also ``await Image.import_.aio(...)`` and so on. A
    sandbox whose template names an imported image
    (``Sandbox(template={"image": "web"})``) gets its Env, WorkingDir and User
    as defaults, and ``run()`` with no command runs its Entrypoint and Cmd.

    Attributes: ``name``, ``source``, ``bytes``, ``built_at``, ``created``,
    ``digest``, ``layers``, ``platform``, ``config`` (a dict with ``env``,
    ``working_dir``, ``user``, ``uid_gid``, ``entrypoint``, ``cmd``; None for
    built images) and ``info``, the whole object of ``docs/protocol.md``.
    """

    _conn: Connection
    _info: Dict[str, Any]

    @classmethod
    def _wrap(cls, conn: Connection, info: Dict[str, Any]) -> "Image":
        obj = cls.__new__(cls)
        obj._conn = conn
        obj._info = dict(info)
        return obj

    @property
    def name(self) -> str:
        return str(self._info["name"])

    @property
    def source(self) -> Optional[str]:
        """``recipe NAME`` for a built image, the import's source otherwise."""
        return self._info.get("source")

    @property
    def bytes(self) -> int:
        return int(self._info.get("bytes", 0))

    @property
    def built_at(self) -> str:
        return str(self._info.get("built_at", ""))

    @property
    def created(self) -> Optional[str]:
        """The image's own creation time (imported images)."""
        return self._info.get("created")

    @property
    def digest(self) -> Optional[str]:
        return self._info.get("digest")

    @property
    def layers(self) -> Optional[int]:
        return self._info.get("layers")

    @property
    def platform(self) -> Optional[str]:
        return self._info.get("platform")

    @property
    def config(self) -> Optional[Dict[str, Any]]:
        c = self._info.get("config")
        return dict(c) if c is not None else None

    @property
    def info(self) -> Dict[str, Any]:
        return dict(self._info)

    @property
    def connection(self) -> Connection:
        return self._conn

    def __repr__(self) -> str:
        return f"Image(name={self.name!r}, source={self.source!r})"

    @twin_classmethod
    def import_(
        cls: Any,
        name: str,
        source: PathLike,
        *,
        force: bool = False,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> Generator[Step, Any, "Image"]:
        """Imports ``source`` (``docker-archive:FILE``, ``oci-archive:FILE`` or ``oci:DIR``, on the worker) as ``name``.

        ``force=True`` replaces an image of that name. Bad input (a corrupt
        archive, a missing file, an unknown transport, a member escaping the
        root) raises :class:`~sandweave.UsageError` and leaves nothing.
        """
        conn = resolve_connection(connection, state_dir)
        params = {"name": name, "source": os.fspath(source), "force": bool(force)}
        info = yield Call(conn, "image.import", params)
        image: Image = cls._wrap(conn, info)
        return image

    @twin_classmethod
    def build(
        cls: Any,
        name: str,
        *,
        force: bool = False,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> Generator[Step, Any, "Image"]:
        """Builds the built-in recipe ``name`` (``base``, ``coding``, ``desktop``); ``force=True`` rebuilds it."""
        conn = resolve_connection(connection, state_dir)
        info = yield Call(conn, "image.build", {"name": name, "force": bool(force)})
        image: Image = cls._wrap(conn, info)
        return image

    @twin_classmethod
    def ls(
        cls: Any,
        *,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> Generator[Step, Any, List["Image"]]:
        """Every image on the worker."""
        conn = resolve_connection(connection, state_dir)
        res = yield Call(conn, "image.ls")
        images: List[Image] = [cls._wrap(conn, i) for i in res.get("images", [])]
        return images

    @twin_classmethod
    def inspect(
        cls: Any,
        name: str,
        *,
        connection: Union[None, str, Connection] = None,
        state_dir: Optional[str] = None,
    ) -> Generator[Step, Any, "Image"]:
        """The image ``name``; :class:`~sandweave.NotFound` when there is none."""
        conn = resolve_connection(connection, state_dir)
        info = yield Call(conn, "image.inspect", {"name": name})
        image: Image = cls._wrap(conn, info)
        return image

    @twin
    def rm(self, missing_ok: bool = False) -> Generator[Step, Any, None]:
        """Removes the image (refused while sandboxes run on it). ``missing_ok`` ignores one already gone."""
        try:
            yield Call(self._conn, "image.rm", {"name": self.name})
        except NotFound:
            if not missing_ok:
                raise
