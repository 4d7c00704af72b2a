"""The display of a desktop sandbox (``template="desktop"``), for computer-use agents.

``env.desktop.screenshot()`` returns the screen as PNG bytes; ``click``,
``move``, ``type`` and ``key`` send input, each with an ``.aio`` twin:
``await env.desktop.screenshot.aio()``. The worker runs them in the guest as
the desktop user and checks the guest's PNG; the SDK checks it again on
arrival (byte count, sha256, signature and size).
"""

from __future__ import annotations

import base64
import hashlib
import struct
from typing import TYPE_CHECKING, Any, Dict, Generator, Sequence, Tuple, Union

from ._aio import Call, Step, twin
from .client import _Pending
from .errors import SandweaveError

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import Sandbox

__all__ = ["Desktop"]

#: The worker's limit on one screenshot (lib/sandbox/desktop.hpp).
MAX_SCREENSHOT_BYTES = 32 << 20


def png_size(png: bytes) -> Tuple[int, int]:
    """(width, height) from a PNG's IHDR; raises SandweaveError for anything else."""
    if png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR" or len(png) < 45:
        raise SandweaveError("the screenshot is not a PNG")
    width, height = struct.unpack(">II", png[16:24])
    return int(width), int(height)


class _Collect:
    def __init__(self) -> None:
        self.data = bytearray()
        self.overflow = False

    def notify(self, p: _Pending, method: str, params: Dict[str, Any]) -> None:
        if method != "desktop.data":
            return
        chunk = base64.b64decode(params.get("data") or "")
        if len(self.data) + len(chunk) > MAX_SCREENSHOT_BYTES:
            self.overflow = True
        else:
            self.data += chunk


class Desktop:
    """Screenshots and input of one sandbox's display (``Sandbox.desktop``)."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sandbox = sandbox

    def __repr__(self) -> str:
        return f"<Desktop of {self._sandbox.id}>"

    def _call(self, method: str, params: Dict[str, Any], **kw: Any) -> Call:
        self._sandbox._check_open()
        return Call(self._sandbox.connection, method, dict(params, id=self._sandbox.id), **kw)

    @twin
    def screenshot(self) -> Generator[Step, Any, bytes]:
        """The screen now, as PNG bytes of the template's screen size."""
        got = _Collect()
        res = yield self._call("desktop.screenshot", {}, on_notify=got.notify)
        png = bytes(got.data)
        if got.overflow:
            raise SandweaveError(f"the screenshot is over {MAX_SCREENSHOT_BYTES} bytes")
        if len(png) != int(res.get("bytes", -1)) or hashlib.sha256(png).hexdigest() != res.get("sha256"):
            raise SandweaveError("the screenshot's bytes do not match the worker's count and sha256")
        if png_size(png) != (int(res.get("width", -1)), int(res.get("height", -1))):
            raise SandweaveError("the screenshot's size is not the worker's")
        return png

    @twin
    def click(self, x: int, y: int, button: int = 1) -> Generator[Step, Any, None]:
        """Moves the pointer to (x, y) and clicks ``button`` (1 left, 2 middle, 3 right, 4/5 wheel)."""
        yield self._call("desktop.click", {"x": int(x), "y": int(y), "button": int(button)})

    @twin
    def move(self, x: int, y: int) -> Generator[Step, Any, None]:
        """Moves the pointer to (x, y), pixels from the top left."""
        yield self._call("desktop.move", {"x": int(x), "y": int(y)})

    @twin
    def type(self, text: str) -> Generator[Step, Any, None]:
        """Types ``text`` into the focused window (a newline is Return)."""
        yield self._call("desktop.type", {"text": str(text)})

    @twin
    def key(self, *keys: Union[str, Sequence[str]]) -> Generator[Step, Any, None]:
        """Presses X key names one after another: ``key("ctrl+l")``, ``key("Return")``,
        ``key("ctrl+a", "BackSpace")`` or ``key("ctrl+a BackSpace")``."""
        names = []
        for k in keys:
            for item in [k] if isinstance(k, str) else list(k):
                names += str(item).split()
        yield self._call("desktop.key", {"keys": names})
