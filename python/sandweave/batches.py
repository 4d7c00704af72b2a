"""Batch episodes: :func:`batch` runs ``sandweave batch run SPEC --out DIR --events``.

The runner is the sandweave binary's (``man sandweave-batch``): its concurrency
cap, retries of infrastructure failures, per-episode folders, audit export and
verification, resumption and cleanup all live there. This module starts it
(on the connection's host settings: ``--host``, ``--state-dir``, the binary),
reads its event lines, and gives each finished episode as an :class:`Episode`.

>>> result = sandweave.batch([{"id": "a", "command": ["true"]}], out="runs/1")
>>> result.ok, result.done, result.episodes[0].exit_code
(True, 1, 0)
>>> async for ep in sandweave.batch.episodes.aio("spec.jsonl", out="runs/2"):
...     print(ep.id, ep.status)
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, Generator, List, Mapping, Optional, Sequence, Tuple, Union

from ._aio import Emit, ReadLine, Reap, Spawn, Step, function_from, iterator_from
from .client import resolve_connection
from .errors import Cancelled, ConnectionLost, NotFound, RuntimeUnavailable, SandweaveError, UsageError

__all__ = ["batch", "Episode", "BatchResult"]

#: Exit statuses of ``sandweave batch run`` that come with a summary.
EXIT_EPISODES_FAILED = 6
EXIT_INFRASTRUCTURE = 7

Spec = Union[str, "os.PathLike[str]", Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class Episode:
    """One finished episode, as the runner reported it.

    ``status`` is ``"done"`` (exit 0), ``"failed"`` (a non-zero exit, a
    timeout or a missing file out) or ``"infrastructure"`` (create, runtime or
    connection failures outlasted the retries; ``error`` says the last, and
    there is no folder). ``audit_complete`` is None for an episode without
    audit. ``dir`` is the episode's folder (``stdout``, ``stderr``, ``exit``,
    ``files/``, ``audit.jsonl`` and its ``.status.json``, ``result.json``).
    ``resumed``: finished by an earlier run with the same ``out``.
    ``result`` is the whole event (result.json's content).
    """

    id: str
    status: str
    exit_code: Optional[int] = None
    timed_out: bool = False
    audit_complete: Optional[bool] = None
    audit_reasons: Tuple[str, ...] = ()
    tries: int = 0
    dir: Optional[str] = None
    resumed: bool = False
    error: Optional[str] = None
    result: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """Exit 0 and, with audit, a complete audit log."""
        return self.status == "done" and self.audit_complete is not False

    def _read(self, name: str) -> bytes:
        if self.dir is None:
            raise SandweaveError(f"episode {self.id}: no folder ({self.status}: {self.error})")
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()

    @property
    def stdout(self) -> str:
        """The kept stdout (see ``result["stdout"]["truncated"]``), decoded as UTF-8."""
        return self._read("stdout").decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """The kept stderr, decoded as UTF-8."""
        return self._read("stderr").decode("utf-8", "replace")

    @classmethod
    def from_event(cls, ev: Mapping[str, Any]) -> "Episode":
        audit = ev.get("audit") if isinstance(ev.get("audit"), dict) else {}
        enabled = bool(audit.get("enabled"))
        tries = ev.get("tries")
        return cls(
            id=str(ev.get("id")),
            status=str(ev.get("status")),
            exit_code=ev.get("exit_code") if isinstance(ev.get("exit_code"), int) else None,
            timed_out=bool(ev.get("timed_out", False)),
            audit_complete=bool(audit.get("complete")) if enabled else None,
            audit_reasons=tuple(str(r) for r in audit.get("reasons", ())) if enabled else (),
            tries=len(tries) if isinstance(tries, list) else 0,
            dir=ev.get("dir") if isinstance(ev.get("dir"), str) else None,
            resumed=bool(ev.get("resumed", False)),
            error=ev.get("error") if isinstance(ev.get("error"), str) else None,
            result=dict(ev),
        )


@dataclass(frozen=True)
class BatchResult:
    """What a batch run did: the summary's counts and every episode.

    ``exit_code`` is the runner's: 0 when every episode exited 0 with a
    complete audit, 6 when some failed, timed out or have an incomplete
    audit, 7 when infrastructure failures remained after the retries.
    """

    exit_code: int
    total: int
    done: int
    failed: int
    infrastructure: int
    audit_complete: int
    audit_incomplete: int
    skipped: int
    episodes: List[Episode] = field(repr=False)
    summary: Mapping[str, Any] = field(repr=False)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


def _spec_file(spec: Spec) -> Tuple[str, bool]:
    """A path to the spec, and whether it is a temporary file of ours."""
    if isinstance(spec, (str, os.PathLike)):
        return os.fspath(spec), False
    if isinstance(spec, Mapping) or not isinstance(spec, Sequence):
        raise TypeError("spec: expected a path or a list of episode dicts")
    fd, path = tempfile.mkstemp(prefix="sandweave-batch-", suffix=".jsonl")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        for ep in spec:
            if not isinstance(ep, Mapping):
                os.unlink(path)
                raise TypeError(f"spec: expected dicts, got {type(ep).__name__}")
            f.write(json.dumps(dict(ep), ensure_ascii=False) + "\n")
    return path, True


def _error(code: int, stderr: str) -> SandweaveError:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    last = lines[-1] if lines else f"sandweave batch run ended with status {code}"
    message = last[len("sandweave: ") :] if last.startswith("sandweave: ") else last
    if code < 0:
        return SandweaveError(f"sandweave batch run was killed by signal {-code}: {message}")
    if code in (130, 143):
        return Cancelled(message, code)
    cls = {2: UsageError, 4: NotFound, 5: RuntimeUnavailable, 255: ConnectionLost}.get(code, SandweaveError)
    return cls(message, code)


def _run(
    spec: Spec,
    out: Union[str, "os.PathLike[str]"],
    *,
    concurrency: Optional[int] = None,
    retries: Optional[int] = None,
    output_limit: Optional[str] = None,
    warm_pool: bool = False,
    connection: Any = None,
    state_dir: Optional[str] = None,
) -> Generator[Step, Any, BatchResult]:
    """Runs the episodes of ``spec`` (a JSONL path, or a list of episode dicts
    with the keys of ``man sandweave-batch``), each leaving its folder under
    ``out``; returns the :class:`BatchResult`.

    ``concurrency`` episodes run at a time (default 4); an infrastructure
    failure is tried again ``retries`` times (default 2); ``output_limit``
    (e.g. ``"1MiB"``) caps what is kept of stdout and stderr; ``warm_pool``
    takes alike episodes' sandboxes from a warm pool (local connection; see
    ``man sandweave-batch``). ``connection``:
    ``"local"``, ``"ssh://…"``, ``"weave://…"`` or a :class:`Connection`
    (its host, state directory, binary and options are used). A rerun with the
    same ``out`` skips finished episodes (``Episode.resumed``).

    A bad spec raises :class:`UsageError` (naming the line) before anything
    runs; a lost connection :class:`ConnectionLost`. Episodes that failed are
    results, not errors.
    """
    conn = resolve_connection(connection, state_dir)
    path, owned = _spec_file(spec)
    argv = [conn.binary, "--host", conn.host]
    if conn.state_dir:
        argv += ["--state-dir", conn.state_dir]
    if conn.runsc:
        argv += ["--runsc", conn.runsc]
    argv += list(conn.args) + ["-q", "batch", "run", path, "--out", os.fspath(out), "--events"]
    if concurrency is not None:
        argv += ["--concurrency", str(int(concurrency))]
    if retries is not None:
        argv += ["--retries", str(int(retries))]
    if output_limit is not None:
        argv += ["--output-limit", str(output_limit)]
    if warm_pool:
        argv += ["--warm-pool"]
    episodes: List[Episode] = []
    summary: Optional[Dict[str, Any]] = None
    try:
        proc = yield Spawn(argv, conn._child_env())
        while True:
            line = yield ReadLine(proc)
            if not line:
                break
            try:
                ev = json.loads(line)
            except ValueError:
                raise SandweaveError(f"sandweave batch run: not a JSON event line: {line[:200]!r}") from None
            if not isinstance(ev, dict):
                continue
            if ev.get("event") == "episode":
                ep = Episode.from_event(ev)
                episodes.append(ep)
                yield Emit(ep)
            elif ev.get("event") == "summary":
                summary = ev
        code, stderr = yield Reap(proc)
    finally:
        if owned:
            os.unlink(path)
    if summary is None or code not in (0, EXIT_EPISODES_FAILED, EXIT_INFRASTRUCTURE):
        raise _error(code, stderr)
    audit = summary.get("audit", {})
    return BatchResult(
        exit_code=code,
        total=int(summary.get("total", 0)),
        done=int(summary.get("done", 0)),
        failed=int(summary.get("failed", 0)),
        infrastructure=int(summary.get("infrastructure", 0)),
        audit_complete=int(audit.get("complete", 0)),
        audit_incomplete=int(audit.get("incomplete", 0)),
        skipped=int(summary.get("skipped", 0)),
        episodes=episodes,
        summary=summary,
    )


_run.__name__ = _run.__qualname__ = "batch"
batch = function_from(_run)
batch.episodes = iterator_from(  # type: ignore[attr-defined]
    _run,
    "batch.episodes",
    "The finished episodes of a batch as they come (same arguments as :func:`batch`): "
    "an iterator, or with ``.aio`` an async iterator. Ends after the last one; "
    "raises as :func:`batch` does. Breaking off stops the runner (SIGTERM), which "
    "removes the running episodes' sandboxes.",
    Episode,
)
