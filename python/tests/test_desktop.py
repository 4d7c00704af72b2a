"""env.desktop: screenshots (PNG bytes) and input, sync and .aio, over serve --stdio."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from typing import Iterator

import pytest

import sandweave
from sandweave import Sandbox, UsageError
from sandweave.desktop import png_size

pytestmark = pytest.mark.desktop


@pytest.fixture(scope="module")
def desktop_state_dir(sw_bin: str) -> str:
    """The persistent state directory with the desktop image (built once, kept)."""
    path = os.environ.get("SANDWEAVE_DESKTOP_STATE_DIR", "/var/tmp/sandweave-test-desktop")
    os.makedirs(path, exist_ok=True)
    res = subprocess.run([sw_bin, "--state-dir", path, "--json", "image", "ls"], capture_output=True, text=True)
    if not any(i.get("name") == "desktop" for i in json.loads(res.stdout or "[]")):
        sys.stderr.write(f"building the desktop image in {path} (debootstrap, a minute or two)\n")
        res = subprocess.run([sw_bin, "--state-dir", path, "image", "build", "desktop"], capture_output=True, text=True)
        if res.returncode != 0:
            pytest.fail(f"sandweave image build desktop failed ({res.returncode}): {res.stderr[-2000:]}")
    return path


@pytest.fixture(scope="module")
def env(desktop_state_dir: str) -> Iterator[Sandbox]:
    with Sandbox(template="desktop", hidepid=2, audit=True, state_dir=desktop_state_dir) as sb:
        yield sb


def wait_until(fn, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(0.2)
    return False


def test_screenshot_is_a_png_of_the_screen(env: Sandbox) -> None:
    png = env.desktop.screenshot()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert png_size(png) == (1280, 800)


def test_input_types_into_a_terminal(env: Sandbox) -> None:
    empty = env.desktop.screenshot()
    assert env.run("stterm -g 80x24+0+0 -e sh </dev/null >/dev/null 2>&1 &").exit_code == 0
    assert wait_until(lambda: env.desktop.screenshot() != empty), "no window appeared"
    env.desktop.move(100, 100)
    env.desktop.click(200, 150)
    env.desktop.type("echo sdk-typed >/tmp/sdk")
    env.desktop.key("Return")
    assert wait_until(lambda: env.run("cat /tmp/sdk").stdout.strip() == "sdk-typed", 15)


def test_aio_twins(env: Sandbox) -> None:
    async def go() -> bytes:
        await env.desktop.move.aio(5, 5)
        await env.desktop.key.aio("ctrl+u")
        return await env.desktop.screenshot.aio()

    assert png_size(asyncio.run(go())) == (1280, 800)


def test_bad_input_is_a_usage_error(env: Sandbox) -> None:
    with pytest.raises(UsageError, match="off the 1280x800 screen"):
        env.desktop.click(1280, 0)
    with pytest.raises(UsageError, match="expected an X key name"):
        env.desktop.key("Return;rm")
    assert isinstance(env.desktop, sandweave.Desktop)
