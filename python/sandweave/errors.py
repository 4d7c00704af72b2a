"""Exceptions of the sandweave SDK.

They mirror sandweave's exit statuses (the README's "Exit status" table): each
carries ``code`` (the exit status the CLI would have ended with) and
``message`` (the one line the CLI prints, without its ``sandweave:`` prefix).
``rpc_code`` is the JSON-RPC error code the worker sent, when it sent one
(``docs/protocol.md``, "Errors").

An audit export that is not complete is *not* an error: ``audit_log`` returns
the status with ``complete`` false, exactly as the worker reports it.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

__all__ = [
    "SandweaveError",
    "UsageError",
    "NotFound",
    "RuntimeUnavailable",
    "BinaryNotFound",
    "ConnectionLost",
    "Cancelled",
    "NotSupported",
    "error_from_rpc",
]


class SandweaveError(Exception):
    """Base of every sandweave error (exit status 1 unless a subclass says)."""

    default_code = 1

    def __init__(
        self,
        message: str,
        code: Optional[int] = None,
        *,
        rpc_code: Optional[int] = None,
        data: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(message)
        self.message: str = message
        self.code: int = self.default_code if code is None else code
        self.rpc_code: Optional[int] = rpc_code
        self.data: Mapping[str, Any] = dict(data or {})

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, code={self.code})"


class UsageError(SandweaveError):
    """A refused request: bad template, bad value, an option that does not apply (2)."""

    default_code = 2


class NotFound(SandweaveError):
    """No such sandbox, pool, snapshot, template or image (4)."""

    default_code = 4


class RuntimeUnavailable(SandweaveError):
    """The runtime is missing or lacks a requested feature (5)."""

    default_code = 5


class BinaryNotFound(RuntimeUnavailable):
    """No sandweave binary to run: see ``sandweave.find_binary``."""


class ConnectionLost(SandweaveError):
    """The connection failed: the ``sandweave serve`` process ended while this
    request was in flight, or could not reach its worker (``ssh://``).

    When it was in flight its outcome on the worker is unknown (a command may
    have run, a sandbox may have been created); the message says which. The
    next call starts a new ``serve`` process. The code is 255, as for a lost
    connection on the command line.
    """

    default_code = 255


class Cancelled(SandweaveError):
    """The command was cancelled (``run.cancel``); ``exit_code`` is how it ended."""

    @property
    def exit_code(self) -> Optional[int]:
        value = self.data.get("exit_code")
        return value if isinstance(value, int) else None


class NotSupported(SandweaveError, NotImplementedError):
    """The SDK or the worker does not offer this (yet)."""

    default_code = 2


_BY_STATUS = {2: UsageError, 4: NotFound, 5: RuntimeUnavailable}


def error_from_rpc(error: Mapping[str, Any]) -> SandweaveError:
    """The exception for a JSON-RPC error object received from ``sandweave serve``."""
    rpc_code = error.get("code")
    message = str(error.get("message") or "error without a message")
    data = error.get("data")
    data = data if isinstance(data, dict) else {}
    status = data.get("exit_status")
    if not isinstance(rpc_code, int):
        return SandweaveError(message, status if isinstance(status, int) else 1, data=data)
    if rpc_code >= 0:
        cls = _BY_STATUS.get(rpc_code, SandweaveError)
        return cls(message, rpc_code, rpc_code=rpc_code, data=data)
    code = status if isinstance(status, int) else None
    if rpc_code == -32602:  # invalid params
        return UsageError(message, code, rpc_code=rpc_code, data=data)
    if rpc_code == -32601:  # unknown method: an older worker
        return NotSupported(
            f"the worker does not serve this method ({message})", code, rpc_code=rpc_code, data=data
        )
    if rpc_code == -32800:
        return Cancelled(message, code, rpc_code=rpc_code, data=data)
    return SandweaveError(message, code, rpc_code=rpc_code, data=data)
