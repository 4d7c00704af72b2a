"""Bad input and faults: each raises the exception of its exit status and leaves nothing behind
(the clean_state fixture checks `sandweave ls --json` after every test)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest

import sandweave
from sandweave import (
    BinaryNotFound,
    ConnectionLost,
    NotFound,
    RuntimeUnavailable,
    Sandbox,
    SandweaveError,
    UsageError,
    client,
)


def one_line(e: SandweaveError) -> None:
    assert e.message and "\n" not in e.message and str(e) == e.message


def test_unknown_template(state_dir: str) -> None:
    with pytest.raises(NotFound) as err:
        Sandbox(template="no-such-template")
    assert err.value.code == 4 and "no-such-template" in err.value.message
    one_line(err.value)
    with pytest.raises(NotFound):
        asyncio.run(Sandbox.create.aio(template="no-such-template"))


def test_template_file_is_read_here(state_dir: str, tmp_path: Path) -> None:
    """A template file is read by the SDK and sent as content: the worker reads none."""
    f = tmp_path / "mine.yaml"
    f.write_text("extends: base\nlabels: {origin: client-file}")  # one line, no newline
    for tpl in (f, str(f)):
        with Sandbox(template=tpl) as env:
            assert env.spec["labels"]["origin"] == "client-file"
            assert env.spec["template"] == f"client:{f}"
    secret = tmp_path / "secret"
    secret.write_text("root:$6$T0PS3CRET$x:20228:0:99999:7:::\n")
    for tpl in (secret, str(secret), "/etc/shadow"):
        with pytest.raises(UsageError) as err:
            Sandbox(template=tpl)
        assert "T0PS3CRET" not in err.value.message and "root:" not in err.value.message
        one_line(err.value)
    with pytest.raises(NotFound) as missing:
        Sandbox(template=tmp_path / "missing.yaml")
    assert str(tmp_path / "missing.yaml") in missing.value.message


def test_bad_user(state_dir: str) -> None:
    with pytest.raises(UsageError) as err:
        Sandbox(template="base", user="abc")
    assert err.value.code == 2 and "abc" in err.value.message
    one_line(err.value)
    with pytest.raises(UsageError):
        asyncio.run(Sandbox.create.aio(template="base", user="abc"))
    with Sandbox(template="base") as env:
        with pytest.raises(UsageError):
            env.run("id", user="abc")
        with pytest.raises(UsageError):
            asyncio.run(env.run.aio("id", user="abc"))
        with pytest.raises(UsageError):
            env.run("pwd", cwd="relative")
        assert env.run("true").ok


def test_bad_hidepid(state_dir: str) -> None:
    with pytest.raises(UsageError) as err:
        Sandbox(template="base", hidepid=3)
    assert err.value.code == 2 and "hidepid" in err.value.message
    one_line(err.value)
    with pytest.raises(UsageError):
        asyncio.run(Sandbox.create.aio(template="base", hidepid=3))
    # A wrong type is the worker's invalid-params error, also a UsageError.
    with pytest.raises(UsageError) as err:
        Sandbox(template="base", hidepid="2")  # type: ignore[arg-type]
    assert err.value.rpc_code == -32602 and err.value.code == 2


def test_template_and_snapshot_together(state_dir: str) -> None:
    with pytest.raises(UsageError):
        Sandbox(template="base", snapshot="whatever")


def test_no_such_sandbox(state_dir: str) -> None:
    with pytest.raises(NotFound) as err:
        Sandbox.from_id("sw-000000000000")
    assert err.value.code == 4
    with pytest.raises(NotFound):
        asyncio.run(Sandbox.from_id.aio("nope-nope"))


def test_missing_binary(state_dir: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SANDWEAVE_BIN", str(tmp_path / "no-such-sandweave"))
    with pytest.raises(BinaryNotFound) as err:
        Sandbox(template="base")
    assert isinstance(err.value, RuntimeUnavailable) and err.value.code == 5
    assert "SANDWEAVE_BIN" in err.value.message
    with pytest.raises(BinaryNotFound):
        asyncio.run(Sandbox.create.aio(template="base"))

    # Nothing anywhere: the message says where it looked.
    monkeypatch.delenv("SANDWEAVE_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(client, "INSTALLED_LOCATIONS", (str(tmp_path / "installed"),))
    with pytest.raises(BinaryNotFound) as err:
        sandweave.find_binary()
    assert "SANDWEAVE_BIN" in err.value.message and "PATH" in err.value.message
    one_line(err.value)

    # The installed link outlived the build it pointed at: the message says so.
    gone = tmp_path / "old-tree" / "build" / "sandweave"
    (tmp_path / "installed").symlink_to(gone)
    with pytest.raises(BinaryNotFound) as err:
        sandweave.find_binary()
    assert str(tmp_path / "installed") in err.value.message and str(gone) in err.value.message
    assert "setup.sh" in err.value.message and "SANDWEAVE_BIN" in err.value.message
    one_line(err.value)


def test_binary_lookup_order(sw_bin: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "sandweave"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("SANDWEAVE_BIN", sw_bin)
    monkeypatch.setenv("PATH", str(fake.parent))
    assert sandweave.find_binary() == sw_bin  # SANDWEAVE_BIN first
    monkeypatch.delenv("SANDWEAVE_BIN")
    assert sandweave.find_binary() == str(fake)  # then PATH
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(client, "INSTALLED_LOCATIONS", (sw_bin,))
    assert sandweave.find_binary() == sw_bin  # then the installed location


def _serve_pid(env: Sandbox) -> int:
    pid = env.connection.pid
    assert pid is not None
    return pid


def test_killed_serve_child_mid_run_sync(state_dir: str) -> None:
    with Sandbox(template="base") as env:
        env.run("true")
        pid = _serve_pid(env)
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["result"] = env.run("sleep 30")
            except SandweaveError as e:
                outcome["error"] = e

        t = threading.Thread(target=run)
        t.start()
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)
        t.join(15)
        assert not t.is_alive()
        err = outcome.get("error")
        assert isinstance(err, ConnectionLost), outcome
        assert err.code == 255 and "signal 9" in err.message and "sandbox.run" in err.message
        one_line(err)
        # The next call starts a new serve child; the sandbox is still there.
        assert env.run("echo again").stdout == "again\n"
        assert _serve_pid(env) != pid


def test_killed_serve_child_mid_run_async(state_dir: str) -> None:
    async def main() -> None:
        env = await Sandbox.create.aio("base")
        try:
            runs = [asyncio.ensure_future(env.run.aio("sleep 30")) for _ in range(3)]
            await asyncio.sleep(1.0)
            pid = _serve_pid(env)
            os.kill(pid, signal.SIGKILL)
            results = await asyncio.wait_for(asyncio.gather(*runs, return_exceptions=True), 15)
            assert all(isinstance(r, ConnectionLost) for r in results), results
            assert (await env.run.aio("echo again")).stdout == "again\n"
            assert _serve_pid(env) != pid
        finally:
            await env.terminate.aio()
            await env.close.aio()

    asyncio.run(main())


def test_killed_serve_child_during_create(state_dir: str) -> None:
    # A create in flight when the child dies: the caller learns it, and the
    # next create works. (Whatever the killed create left is the worker's to
    # clean up; it is removed here so the state check sees only the SDK's part.)
    conn = sandweave.connect()
    conn.call("version")
    pid = conn.pid
    assert pid is not None

    async def main() -> None:
        task = asyncio.ensure_future(Sandbox.create.aio("base"))
        await asyncio.sleep(0.05)
        os.kill(pid, signal.SIGKILL)
        try:
            env = await task
        except ConnectionLost as e:
            one_line(e)
        else:
            await env.close.aio()  # it finished before the kill

    asyncio.run(main())
    with Sandbox(template="base") as env:
        assert env.run("true").ok
    for s in Sandbox.list():
        s.close(remove=True)


def test_older_worker_without_a_method(state_dir: str) -> None:
    # SANDWEAVE_SERVE_WITHOUT makes the worker serve as an older one would:
    # the method is missing from hello and answered -32601.
    base = sandweave.connect()
    env = dict(os.environ, SANDWEAVE_SERVE_WITHOUT="snapshot.create")
    older = sandweave.Connection(base.host, state_dir=base.state_dir, binary=base.binary, env=env)
    try:
        assert "snapshot.create" not in older.server_info()["methods"]
        with Sandbox(template="base", connection=older) as sb:
            with pytest.raises(sandweave.NotSupported) as err:
                sb.snapshot()
            assert err.value.rpc_code == -32601
            assert sb.run("echo still served").ok
    finally:
        older.close()


def test_the_sdks_create_options_are_the_workers(state_dir: str) -> None:
    # The worker's one codec of create options (lib/options/create_options.hpp)
    # lists its keys in hello: every option the SDK can send is one of them,
    # and every one of them can be given through the SDK.
    from sandweave.options import _params

    conn = sandweave.connect()
    advertised = set(conn.server_info()["create_options"])
    everything = {
        "hidepid": 2,
        "audit": True,
        "user": "1001:1001",
        "labels": {"a": "b"},
        "ttl": 60,
        "idle_timeout": 30,
        "cpus": 1,
        "memory": 1 << 30,
        "publish": [8080],
    }
    sent = set(_params(conn, None, everything))
    sent |= set(_params(conn, None, {"network": "none"}))
    sent |= set(_params(conn, None, {"network": {"allow": ["10.0.0.1"], "deny": ["10.0.0.2"]}}))
    assert sent == advertised
