"""sandweave: run untrusted code in gVisor sandboxes, from Python.

>>> from sandweave import Sandbox
>>> env = Sandbox(template="coding", hidepid=2, audit=True)
>>> result = env.run("id; ls /proc", user="1001:1001")
>>> report = env.audit_log("episode.jsonl")
>>> env.terminate(); env.close()

The SDK drives a ``sandweave serve --stdio`` child process (one per
connection, shared by every object on it) and speaks the protocol of
``docs/protocol.md``; every semantic lives in the sandweave binary. Every call
has an async twin: ``await Sandbox.create.aio(...)``, ``await env.run.aio(...)``,
``await env.audit_log.aio(path)``, ``await pool.acquire.aio()``,
``await Image.import_.aio(name, source)``.

``batch(spec, out=...)`` runs many one-shot episodes through the binary's
batch runner (``sandweave batch run``); ``batch.episodes.aio(...)`` gives them
as they finish.

See ``python/README.md`` for the reference.
"""

from .batches import BatchResult, Episode, batch
from .client import Connection, connect, find_binary
from .desktop import Desktop
from .errors import (
    BinaryNotFound,
    Cancelled,
    ConnectionLost,
    NotFound,
    NotSupported,
    RuntimeUnavailable,
    SandweaveError,
    UsageError,
)
from .image import Image
from .options import CreateOptions
from .pool import Pool
from .process import Process
from .result import RunResult
from .sandbox import Sandbox
from .snapshot import Snapshot
from .stream import RunStream

__version__ = "0.1.0"

__all__ = [
    "Sandbox",
    "Pool",
    "batch",
    "Episode",
    "BatchResult",
    "Image",
    "Snapshot",
    "Desktop",
    "RunResult",
    "RunStream",
    "Process",
    "CreateOptions",
    "Connection",
    "connect",
    "find_binary",
    "SandweaveError",
    "UsageError",
    "NotFound",
    "RuntimeUnavailable",
    "BinaryNotFound",
    "ConnectionLost",
    "Cancelled",
    "NotSupported",
    "__version__",
]
