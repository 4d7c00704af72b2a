"""connection="ssh://...": the SDK's serve child runs with --host, and reaches a
worker over SSH. The worker here is this machine, through a private sshd on a
free loopback port (own host and client keys, a temporary directory), whose
sessions get the test's state directory by SetEnv, so the usual end-state check
covers what the remote side made.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator, List, Tuple

import pytest

import sandweave
from sandweave import ConnectionLost, Connection, Sandbox, SandweaveError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ssh_worker(sw_bin: str, state_dir: str, wrap: Callable[[List[str]], List[str]] = lambda argv: argv):
    """An sshd on a free loopback port (its argv through `wrap`), and a
    Connection to it: yields (connection, sshd process)."""
    sshd, keygen = shutil.which("sshd") or "/usr/sbin/sshd", shutil.which("ssh-keygen")
    if not os.path.exists(sshd) or not keygen:
        pytest.skip("openssh-server is not installed (scripts/setup.sh --test-deps installs it)")
    d = Path(tempfile.mkdtemp(prefix="sandweave-pytest-ssh-"))
    for key in ("host_key", "client_key"):
        subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
    shutil.copy(d / "client_key.pub", d / "authorized_keys")
    port = _free_port()
    (d / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\n"
        f"AuthorizedKeysFile {d}/authorized_keys\nPidFile {d}/sshd.pid\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
        f"SetEnv SANDWEAVE_STATE_DIR={state_dir}\n"
    )
    os.makedirs("/run/sshd", exist_ok=True)
    proc = subprocess.Popen(wrap([sshd, "-D", "-e", "-f", str(d / "sshd_config")]), stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        conn = sandweave.connect(
            f"ssh://root@127.0.0.1:{port}",
            args=[
                "--identity", str(d / "client_key"),
                "--known-hosts", str(d / "known_hosts"),
                "--accept-new-host-key",
                "--remote-binary", sw_bin,
            ],
        )
        yield conn, proc
        conn.close()
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def ssh_worker(sw_bin: str, state_dir: str) -> Iterator[Connection]:
    for conn, _ in _ssh_worker(sw_bin, state_dir):
        yield conn


@pytest.fixture()
def client_only_dir(sw_bin: str, state_dir: str) -> Iterator[Tuple[Connection, Path, Path]]:
    """A worker that cannot see a directory of the client: its sshd runs in a
    mount namespace of its own, with an empty tmpfs over that directory.
    Yields (connection, the directory, the same path as the worker sees it)."""
    if not shutil.which("unshare"):
        pytest.skip("unshare (util-linux) is not installed")
    here = Path(tempfile.mkdtemp(prefix="sandweave-pytest-client-only-"))
    script = 'mount -t tmpfs -o size=64m,mode=0700 sandweave-worker-side "$1" && shift && exec "$@"'
    wrap = lambda argv: ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", str(here), *argv]
    try:
        for conn, proc in _ssh_worker(sw_bin, state_dir, wrap):
            yield conn, here, Path(f"/proc/{proc.pid}/root") / here.relative_to("/")
    finally:
        shutil.rmtree(here, ignore_errors=True)


def test_ssh_sync(ssh_worker: Connection, tmp_path: Path) -> None:
    with Sandbox(template="base", hidepid=2, audit=True, connection=ssh_worker) as env:
        r = env.run("id -u; ls /proc | grep -qx 1 && echo pid1 listed || echo pid1 hidden", user="1001:1001")
        assert r.stdout == "1001\npid1 hidden\n"  # hidepid 2
        report = env.audit_log(tmp_path / "remote.jsonl")  # written on this (the client) side
        assert report["complete"] is True and report["dropped"] == 0
        assert (tmp_path / "remote.jsonl").stat().st_size == report["bytes"]
        assert (tmp_path / "remote.jsonl.status.json").exists()
        assert env.run("cat", stdin=b"over ssh").stdout == "over ssh"
        assert [s.id for s in Sandbox.list(connection=ssh_worker)] == [env.id]


def test_ssh_async(ssh_worker: Connection, tmp_path: Path) -> None:
    async def main() -> None:
        env = await Sandbox.create.aio("base", audit=True, connection=ssh_worker)
        try:
            rs = await asyncio.gather(*[env.run.aio(f"echo {k}") for k in range(10)])
            assert [r.stdout for r in rs] == [f"{k}\n" for k in range(10)]
            report = await env.audit_log.aio(tmp_path / "a.jsonl")
            assert report["complete"] is True
        finally:
            await env.terminate.aio()
            await env.close.aio()

    asyncio.run(main())


def test_ssh_unreachable_worker(state_dir: str) -> None:
    port = _free_port()  # nothing listens there
    with pytest.raises(ConnectionLost) as err:
        Sandbox(template="base", connection=f"ssh://nobody@127.0.0.1:{port}")
    assert f"127.0.0.1:{port}" in err.value.message and err.value.code == 255
    assert "\n" not in err.value.message


def test_ssh_state_dir_is_the_workers(state_dir: str) -> None:
    # SANDWEAVE_STATE_DIR (set for these tests) describes this machine: it is
    # not passed to a remote connection; an explicit state_dir= is, and the
    # binary refuses it in its own words.
    port = _free_port()
    with pytest.raises(SandweaveError) as err:
        Sandbox(template="base", connection=f"ssh://nobody@127.0.0.1:{port}", state_dir="/tmp/x")
    assert "state-dir" in err.value.message and err.value.code == 2


def test_ssh_audit_log_lands_on_the_client(client_only_dir: Tuple[Connection, Path, Path]) -> None:
    # The user's example over SSH: episode.jsonl must be on the machine that
    # ran Python, checked against the worker's sha256, and never on the worker.
    conn, here, worker_view = client_only_dir
    assert worker_view.is_dir() and not any(worker_view.iterdir()), "the worker sees its own empty directory there"
    target = here / "episode.jsonl"
    with Sandbox(template="base", audit=True, connection=conn) as env:
        env.run("echo hi")
        report = env.audit_log(target)
    assert report["complete"] is True
    assert target.is_file(), f"{target} must be written on the client; the worker side has {list(worker_view.iterdir())}"
    data = target.read_bytes()
    assert len(data) == report["bytes"] and hashlib.sha256(data).hexdigest() == report["sha256"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    sidecar = json.loads((here / "episode.jsonl.status.json").read_text())
    assert sidecar["sha256"] == report["sha256"] and sidecar["via"].startswith("ssh://")
    assert list(worker_view.iterdir()) == [], "nothing was written on the worker"
