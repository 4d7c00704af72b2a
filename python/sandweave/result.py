"""What a command did: :class:`RunResult`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = ["RunResult"]


@dataclass(frozen=True)
class RunResult:
    """What a command did: ``exit_code``, its output, and whether it timed out.

    ``exit_code`` follows Docker: the command's status, 128+N when killed by
    signal N, 124 when ``timed_out``, 126 not executable, 127 not found.
    ``message`` is the one line the CLI would print about it (for example
    ``command not found in sandbox ...``), or None. ``running`` is True only
    in :meth:`Process.output <sandweave.Process.output>` of a command that has
    not ended: its output so far, ``exit_code`` 0 and ``ok`` False.
    """

    exit_code: int
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    timed_out: bool = False
    message: Optional[str] = None
    running: bool = False

    @property
    def stdout(self) -> str:
        """stdout decoded as UTF-8 (invalid bytes replaced)."""
        return self.stdout_bytes.decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        """stderr decoded as UTF-8 (invalid bytes replaced)."""
        return self.stderr_bytes.decode("utf-8", "replace")

    @property
    def ok(self) -> bool:
        """True when the command has ended with exit 0."""
        return self.exit_code == 0 and not self.running

    def __repr__(self) -> str:
        def short(b: bytes) -> str:
            return repr(b if len(b) <= 60 else b[:57] + b"...")

        extra = ", timed_out=True" if self.timed_out else ""
        extra += f", message={self.message!r}" if self.message else ""
        extra += ", running=True" if self.running else ""
        return (
            f"RunResult(exit_code={self.exit_code}, stdout_bytes={short(self.stdout_bytes)}, "
            f"stderr_bytes={short(self.stderr_bytes)}{extra})"
        )
