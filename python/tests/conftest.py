"""Fixtures for the SDK tests: the real sandweave binary and runsc, a private state directory.

Environment:
  SANDWEAVE_BIN              the binary under test (ctest sets it to the build's);
                             else the SDK's own lookup (PATH, /usr/local/bin).
  SANDWEAVE_DESKTOP_STATE_DIR  where the desktop tests run (default
                             /var/tmp/sandweave-test-desktop, shared with
                             tests/integration/desktop.sh), the same way.
  SANDWEAVE_CODING_STATE_DIR where the seed examples run (default
                             /var/tmp/sandweave-test-coding): a persistent state
                             directory holding the `coding` image, built there
                             once (debootstrap, a few minutes) and kept, as
                             tests/integration/hidepid_coding.sh does.

Every test but those marked `unit` runs against a private state directory (SANDWEAVE_STATE_DIR, made
here and removed at the end) and must leave no sandbox, pool or snapshot
behind: the `clean_state` fixture checks that with `sandweave ls --json` after
each test, and fails the test that leaked.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, List

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the package under test, not an installed copy

import sandweave  # noqa: E402
from sandweave import client  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "coding: needs the coding image (the seed examples)")
    config.addinivalue_line("markers", "desktop: needs the desktop image (its own state directory)")
    config.addinivalue_line("markers", "unit: needs no worker (no binary, no root, no state directory)")


@pytest.fixture(scope="session")
def sw_bin() -> str:
    if os.geteuid() != 0:
        pytest.skip("the SDK tests drive runsc and overlay mounts: run them as root")
    return sandweave.find_binary()


def sw(binary: str, state_dir: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Runs the sandweave CLI on a state directory."""
    return subprocess.run(
        [binary, "--state-dir", state_dir, *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=check,
    )


def leftovers(binary: str, state_dir: str) -> List[str]:
    """What is left in a state directory: sandboxes, pools, snapshots."""
    out = []
    for verb, key in (("ls", "id"), ("pool", "name"), ("snapshot", "id")):
        args = ["--json", verb] if verb == "ls" else ["--json", verb, "ls"]
        res = sw(binary, state_dir, *args)
        for item in json.loads(res.stdout or "[]"):
            out.append(f"{verb if verb != 'ls' else 'sandbox'} {item[key]}")
    return out


def clean(binary: str, state_dir: str) -> None:
    """Removes every pool, sandbox and snapshot of a state directory."""
    for item in leftovers(binary, state_dir):
        kind, name = item.split(" ", 1)
        if kind == "pool":
            sw(binary, state_dir, "pool", "rm", name, check=False)
    for item in leftovers(binary, state_dir):
        kind, name = item.split(" ", 1)
        if kind == "sandbox":
            sw(binary, state_dir, "rm", name, check=False)
        elif kind == "snapshot":
            sw(binary, state_dir, "snapshot", "rm", name, check=False)


def processes_using(path: str) -> List[str]:
    """Processes whose command line names path (runtime or refill processes left behind)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if path in cmd:
            found.append(f"{pid}: {cmd[:200]}")
    return found


@pytest.fixture(scope="session")
def state_dir(sw_bin: str) -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="sandweave-pytest-", dir="/var/tmp")
    old = os.environ.get("SANDWEAVE_STATE_DIR")
    os.environ["SANDWEAVE_STATE_DIR"] = path
    try:
        yield path
    finally:
        for conn in list(client._all_connections):
            conn.close(timeout=10)
        clean(sw_bin, path)
        # No runtime, shim or pool refill process may outlive its sandbox.
        for _ in range(50):
            stray = processes_using(path + "/")
            if not stray:
                break
            time.sleep(0.1)
        if old is None:
            os.environ.pop("SANDWEAVE_STATE_DIR", None)
        else:
            os.environ["SANDWEAVE_STATE_DIR"] = old
        # Overlay mounts of sandboxes that failed to clean up would keep files busy.
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split()[4] for line in f if f" {path}/" in line]
        for m in sorted(mounts, reverse=True):
            subprocess.run(["umount", "-l", m], check=False)
        shutil.rmtree(path, ignore_errors=True)
        assert not stray, "processes left behind:\n" + "\n".join(stray)


@pytest.fixture(autouse=True)
def clean_state(request: pytest.FixtureRequest) -> Iterator[None]:
    if any(mark in request.keywords for mark in ("coding", "desktop", "unit")):
        yield
        return
    binary = request.getfixturevalue("sw_bin")
    path = request.getfixturevalue("state_dir")
    yield
    left = leftovers(binary, path)
    if left:
        clean(binary, path)
        pytest.fail("left behind: " + ", ".join(left))


@pytest.fixture(scope="session")
def coding_state_dir(sw_bin: str) -> str:
    """The persistent state directory with the coding image (built once, kept)."""
    path = os.environ.get("SANDWEAVE_CODING_STATE_DIR", "/var/tmp/sandweave-test-coding")
    os.makedirs(path, exist_ok=True)
    images = json.loads(sw(sw_bin, path, "--json", "image", "ls").stdout or "[]")
    if not any(i.get("name") == "coding" for i in images):
        sys.stderr.write(f"building the coding image in {path} (debootstrap, a few minutes)\n")
        res = sw(sw_bin, path, "image", "build", "coding", check=False)
        if res.returncode != 0:
            pytest.fail(f"sandweave image build coding failed ({res.returncode}): {res.stderr[-2000:]}")
    return path
