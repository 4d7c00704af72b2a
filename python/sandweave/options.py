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
from typing import Any, Callable, Dict, Generator, Mapping, Optional, Sequence, Tuple, TypedDict, TypeVar, Union

from ._aio import Call, Step
from .client import Connection, resolve_connection
from .errors import NotFound, UsageError
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
    publish: Optional[Sequence[Union[int, str]]]
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


#: The largest template file the worker reads (and so the SDK sends).
MAX_TEMPLATE_BYTES = 1 << 20


def _is_inline(text: str) -> bool:
    """Inline template text, as the worker tells it: JSON or YAML of several lines."""
    stripped = text.lstrip(" \t\r\n")
    return stripped.startswith("{") or (bool(stripped) and "\n" in text)


def _is_template_file(text: str) -> bool:
    """A path rather than a template name, as the worker tells it."""
    return not _is_inline(text) and ("/" in text or text.endswith((".yaml", ".yml", ".json")))


def _read_template_file(path: str) -> Tuple[str, Optional[str]]:
    """A template file's text, read here, and the ``template_source`` naming it.

    A worker never reads a client's template files (not even through a local
    ``serve``): the file is read on this machine and sent as its content. Its
    ``extends`` may name an installed template, which resolves on the worker.
    """
    full = os.path.abspath(path)
    try:
        with open(full, "rb") as f:
            data = f.read(MAX_TEMPLATE_BYTES + 1)
    except FileNotFoundError:
        raise NotFound(f"template file {path}: not found") from None
    except OSError as e:
        raise UsageError(f"template file {path}: {e.strerror}") from None
    if len(data) > MAX_TEMPLATE_BYTES:
        raise UsageError(f"template file {path}: larger than {MAX_TEMPLATE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError(f"template file {path}: not UTF-8 (byte {e.start})") from None
    if not text.strip():
        raise UsageError(f"template file {path}: empty template")
    if not _is_inline(text):
        text += "\n"  # one line of YAML is inline text once it has a line break
    source = "client:" + full
    return text, (source if len(source) <= 4096 and "\n" not in source and "\r" not in source else None)


def template_param(template: Optional[Template], conn: Connection) -> Tuple[Optional[str], Optional[str]]:
    """The ``template`` and ``template_source`` request parameters.

    A mapping is sent as JSON text; a name or inline text goes as it is. A
    file (a ``pathlib.Path``, or a string the worker would take for a path:
    one with a ``/`` or ending in ``.yaml``, ``.yml`` or ``.json``) is read
    here and sent as its content, with ``template_source`` naming it, whatever
    the connection: a worker reads no template file its client names.
    """
    if template is None:
        return None, None
    if isinstance(template, Mapping):
        return json.dumps(template), None
    if isinstance(template, os.PathLike):
        return _read_template_file(os.fspath(template))
    if isinstance(template, str):
        if _is_template_file(template):
            return _read_template_file(template)
        return template, None
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
    tpl, source = template_param(template, conn)
    if tpl is not None:
        params["template"] = tpl
    if source is not None:
        params["template_source"] = source
    snapshot = options.get("snapshot")
    if snapshot is not None:
        params["from_snapshot"] = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
    for key in ("hidepid", "audit", "user", "cpus", "memory"):
        if options.get(key) is not None:
            params[key] = options[key]
    if options.get("labels") is not None:
        params["labels"] = dict(options["labels"])
    params.update(_network_params(options.get("network")))
    publish = options.get("publish")
    if publish is not None:
        if isinstance(publish, (str, int)) or not all(
            isinstance(p, str) or (isinstance(p, int) and not isinstance(p, bool)) for p in publish
        ):
            raise TypeError('publish: expected a list of ports or "HOST:GUEST" strings')
        params["publish"] = [str(p) for p in publish]
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
