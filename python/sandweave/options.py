"""The options of a new sandbox, declared once for :class:`~sandweave.Sandbox` and :class:`~sandweave.Pool`.

:class:`CreateOptions` lists them; an operation taking
``**options: Unpack[CreateOptions]`` and decorated with :func:`takes_create_options`
shows each of them in its signature, and :func:`create` is the one path by
which a sandbox or a pool is made from them.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
from typing import Any, Callable, Dict, Generator, Mapping, Optional, Tuple, TypedDict, TypeVar, Union

from ._aio import Call, Step
from .client import Connection, resolve_connection
from .snapshot import Snapshot

__all__ = ["CreateOptions", "Template", "takes_create_options", "create"]

Template = Union[str, "os.PathLike[str]", Mapping[str, Any]]


class CreateOptions(TypedDict, total=False):
    """The keyword options every new sandbox takes, alone (``Sandbox``) or as a pool member (``Pool``).

    Only the options given are sent: every default is the worker's. See
    :class:`~sandweave.Sandbox` for what each one means.
    """

    hidepid: Optional[int]
    audit: Optional[bool]
    user: Optional[str]
    labels: Optional[Mapping[str, str]]
    snapshot: Union[None, str, Snapshot]
    ttl: Optional[float]
    idle_timeout: Optional[float]
    cpus: Optional[float]
    memory: Optional[int]
    network: Union[None, str, Mapping[str, Any]]
    connection: Union[None, str, Connection]
    state_dir: Optional[str]


def _option_parameters() -> Tuple[inspect.Parameter, ...]:
    return tuple(
        inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=getattr(ann, "__forward_arg__", ann))
        for key, ann in CreateOptions.__annotations__.items()
    )


F = TypeVar("F", bound=Callable[..., Any])


def takes_create_options(op: F) -> F:
    """Spells out ``op``'s ``**options`` as the keywords of :class:`CreateOptions`.

    The signature ``help()`` and ``inspect`` show lists each option; a keyword
    that is not one is a ``TypeError``, as it would be for a written-out signature.
    """
    sig = inspect.signature(op)
    params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    full = sig.replace(parameters=params + list(_option_parameters()))
    where = op.__qualname__.rsplit(".", 1)[0]

    @functools.wraps(op)
    def checked(*args: Any, **kwargs: Any) -> Any:
        try:
            full.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{where}: {e}") from None
        return op(*args, **kwargs)

    checked.__signature__ = full  # type: ignore[attr-defined]
    return checked  # type: ignore[return-value]


def template_param(template: Optional[Template], conn: Connection) -> Optional[str]:
    """The ``template`` request parameter: a name, a path, or inline JSON.

    A mapping is sent as JSON text; a path object (``pathlib.Path``) is made
    absolute for a local worker, whose working directory is not this process's
    once this process changes directory. A string goes as it is: the worker
    tells a name from a path from inline text.
    """
    if template is None:
        return None
    if isinstance(template, Mapping):
        return json.dumps(template)
    if isinstance(template, os.PathLike):
        path = os.fspath(template)
        return os.path.abspath(path) if conn.host == "local" else path
    if isinstance(template, str):
        return template
    raise TypeError(f"template: expected a name, a path or a dict, got {type(template).__name__}")


def _params(conn: Connection, template: Optional[Template], options: Mapping[str, Any]) -> Dict[str, Any]:
    """The request fields of the options given; ``ttl`` and ``idle_timeout`` are seconds, sent as ms."""
    params: Dict[str, Any] = {}
    for key in ("ttl", "idle_timeout"):
        seconds = options.get(key)
        if seconds is not None:
            if seconds <= 0:
                raise ValueError(f"{key}: must be positive, got {seconds!r}")
            params[key + "_ms"] = max(1, int(round(seconds * 1000)))
    tpl = template_param(template, conn)
    if tpl is not None:
        params["template"] = tpl
    snapshot = options.get("snapshot")
    if snapshot is not None:
        params["from_snapshot"] = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
    for key in ("hidepid", "audit", "user", "cpus", "memory"):
        if options.get(key) is not None:
            params[key] = options[key]
    if options.get("labels") is not None:
        params["labels"] = dict(options["labels"])
    params.update(_network_params(options.get("network")))
    return params


def _network_params(network: Any) -> Dict[str, Any]:
    """``"none"``, or ``{"allow": [...], "deny": [...]}`` added to the template's policy."""
    if network is None:
        return {}
    if network == "none":
        return {"network": "none"}
    if isinstance(network, Mapping):
        unknown = set(network) - {"allow", "deny"}
        if unknown:
            raise ValueError(f"network: unknown key(s) {sorted(unknown)}: expected allow and deny")
        out: Dict[str, Any] = {}
        for key in ("allow", "deny"):
            entries = network.get(key)
            if entries is None:
                continue
            if isinstance(entries, str) or not all(isinstance(e, str) for e in entries):
                raise TypeError(f"network: {key}: expected a list of destination strings")
            out[key] = list(entries)
        return out
    raise TypeError(f'network: expected "none" or {{"allow": [...], "deny": [...]}}, got {network!r}')


def create(
    method: str, template: Optional[Template], options: Mapping[str, Any], **fields: Any
) -> Generator[Step, Any, Tuple[Connection, Dict[str, Any]]]:
    """Makes a sandbox (``sandbox.create``) or a pool of them (``pool.create``).

    The request carries the request's own ``fields`` that are not None and
    the options given; returns the connection and the worker's answer.
    """
    conn = resolve_connection(options.get("connection"), options.get("state_dir"))
    params = {key: value for key, value in fields.items() if value is not None}
    params.update(_params(conn, template, options))
    answer = yield Call(conn, method, params)
    return conn, dict(answer)
