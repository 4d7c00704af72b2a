"""Sandbox calls, each sync and through .aio, against the real binary and runsc (template base)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import stat
import time
from pathlib import Path

import pytest

from sandweave import (
    Cancelled,
    NotFound,
    Process,
    RunResult,
    Sandbox,
    SandweaveError,
    Snapshot,
    UsageError,
)


def test_create_run_terminate_close_sync(state_dir: str) -> None:
    env = Sandbox(template="base", hidepid=2, audit=True, user="1001:1001", labels={"t": "sync"})
    try:
        assert env.id.startswith("sw-") and len(env.id) == 15
        opts = env.spec["runtime_options"]
        assert opts["hidepid"] == 2 and opts["audit"] is True
        assert env.labels == {"t": "sync"}
        assert env.info["state"] == "running"

        r = env.run("id -u; echo err >&2; exit 3")
        assert isinstance(r, RunResult)
        assert (r.exit_code, r.stdout, r.stderr) == (3, "1001\n", "err\n")
        assert r.stdout_bytes == b"1001\n" and r.stderr_bytes == b"err\n"
        assert not r.ok and not r.timed_out

        r = env.run(["/bin/echo", "a b", "$HOME"], user="0:0")
        assert r.stdout == "a b $HOME\n" and r.ok
        assert env.run("pwd; echo $A$B", cwd="/tmp", env={"A": "1", "B": "2"}).stdout == "/tmp\n12\n"
        assert env.run("echo $A", env=["A=x"]).stdout == "x\n"
        assert env.run("printf '\\377\\376'").stdout_bytes == b"\xff\xfe"

        r = env.run("sleep 20", timeout=0.5)
        assert r.exit_code == 124 and r.timed_out and r.message

        r = env.run(["nosuch-program"])
        assert r.exit_code == 127 and "nosuch-program" in (r.message or "")

        env.terminate()
        assert env.info["state"] == "stopped"
        env.terminate()  # idempotent
    finally:
        env.close()
    assert env.closed
    env.close()  # idempotent
    with pytest.raises(SandweaveError, match="closed"):
        env.run("true")


def test_create_run_terminate_close_async(state_dir: str) -> None:
    async def main() -> None:
        env = await Sandbox.create.aio("base", hidepid=1, audit=False)
        try:
            assert env.spec["runtime_options"]["hidepid"] == 1
            assert env.spec["runtime_options"]["audit"] is False
            r = await env.run.aio("id -u; echo err >&2; exit 4", user="1001:1001")
            assert (r.exit_code, r.stdout, r.stderr) == (4, "1001\n", "err\n")
            r = await env.run.aio(["/bin/echo", "x"], cwd="/tmp", env={"A": "1"}, timeout=10)
            assert r.stdout == "x\n"
            r = await env.run.aio("sleep 20", timeout=0.3)
            assert r.timed_out and r.exit_code == 124
            info = await env.inspect.aio()
            assert info["state"] == "running"
            await env.terminate.aio()
            assert env.info["state"] == "stopped"
        finally:
            await env.close.aio()
        assert env.closed

    asyncio.run(main())


def test_with_terminates_and_closes(state_dir: str, sw_bin: str) -> None:
    with Sandbox(template="base") as env:
        assert env.run("echo in").stdout == "in\n"
        sid = env.id
    assert env.closed
    with pytest.raises(NotFound):
        Sandbox.from_id(sid)

    async def main() -> str:
        async with await Sandbox.create.aio(template="base") as env:
            assert (await env.run.aio("echo in")).stdout == "in\n"
        assert env.closed
        return env.id

    sid = asyncio.run(main())
    with pytest.raises(NotFound):
        Sandbox.from_id(sid)


def test_with_closes_on_error(state_dir: str) -> None:
    with pytest.raises(ZeroDivisionError):
        with Sandbox(template="base") as env:
            1 / 0
    assert env.closed


def test_stdin_forms(state_dir: str) -> None:
    big = os.urandom(300 * 1024)  # several 64 KiB chunks
    with Sandbox(template="base") as env:
        assert env.run("cat", stdin="hello\n").stdout == "hello\n"
        assert env.run(["md5sum"], stdin=big).stdout.split()[0] == __import__("hashlib").md5(big).hexdigest()
        assert env.run("wc -c", stdin=io.BytesIO(big)).stdout.strip() == str(len(big))
        assert env.run("cat", stdin=[b"a", "b", b"c\n"]).stdout == "abc\n"
        assert env.run("cat", stdin=b"").stdout == ""
        # The command stops reading early: the rest is dropped, no error.
        r = env.run("head -c 10", stdin=big)
        assert r.stdout_bytes == big[:10] and r.exit_code == 0

        async def main() -> None:
            async def chunks():
                for part in (b"x", b"y", b"z\n"):
                    await asyncio.sleep(0)
                    yield part

            assert (await env.run.aio("cat", stdin=chunks())).stdout == "xyz\n"
            assert (await env.run.aio("wc -c", stdin=big)).stdout.strip() == str(len(big))

        asyncio.run(main())
        with pytest.raises(TypeError, match="async"):

            async def agen():
                yield b"x"

            env.run("cat", stdin=agen())


def test_streaming_callbacks_and_iterator(state_dir: str) -> None:
    with Sandbox(template="base") as env:
        out: list = []
        r = env.run("for i in 1 2 3; do echo $i; done; echo e >&2", on_stdout=out.append)
        assert b"".join(out) == b"1\n2\n3\n"
        assert r.stdout_bytes == b"" and r.stderr == "e\n"

        s = env.stream("for i in 1 2 3; do echo $i; sleep 0.05; done; echo e >&2; exit 2")
        items = list(s)
        assert b"".join(d for n, d in items if n == "stdout") == b"1\n2\n3\n"
        assert ("stderr", b"e\n") in items
        assert s.result is not None and s.result.exit_code == 2

        s = env.stream("echo w; exit 1")
        r = s.wait()
        assert r.exit_code == 1 and r.stdout == "w\n"  # not iterated: in the result

        s = env.stream("cat; echo done", stdin=True)
        s.write("to cat\n")
        s.close_stdin()
        assert s.wait().stdout == "to cat\ndone\n"

        s = env.stream("trap 'echo got TERM; exit 5' TERM; sleep 30 & wait")
        s.signal("TERM")
        assert s.wait().exit_code in (5, 143)

        s = env.stream("sleep 30")
        assert s.cancel() is True
        with pytest.raises(Cancelled):
            s.wait()

        async def main() -> None:
            seen = []
            r = await env.run.aio("echo a; echo b >&2", on_stdout=seen.append, on_stderr=seen.append)
            assert sorted(seen) == [b"a\n", b"b\n"] and r.exit_code == 0
            s = await env.stream.aio("echo x; echo y")
            got = [d async for _, d in s]
            assert b"".join(got) == b"x\ny\n" and s.result and s.result.exit_code == 0
            s = await env.stream.aio("cat", stdin=True)
            await s.write.aio(b"q")
            await s.close_stdin.aio()
            assert (await s.wait.aio()).stdout == "q"
            s = await env.stream.aio("sleep 30")
            await s.signal.aio("KILL")
            assert (await s.wait.aio()).exit_code == 137
            s = await env.stream.aio("sleep 30")
            assert await s.cancel.aio() is True
            with pytest.raises(Cancelled):
                async for _ in s:
                    pass

        asyncio.run(main())


def test_callback_error_is_raised(state_dir: str) -> None:
    def boom(_data: bytes) -> None:
        raise ValueError("from the callback")

    with Sandbox(template="base") as env:
        with pytest.raises(ValueError, match="from the callback"):
            env.run("echo x", on_stdout=boom)
        assert env.run("echo still").stdout == "still\n"


def test_cancelled_task_kills_the_command(state_dir: str) -> None:
    with Sandbox(template="base") as env:

        async def main() -> None:
            task = asyncio.ensure_future(env.run.aio("sleep 3; touch /tmp/ran"))
            await asyncio.sleep(0.5)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        r = env.run("sleep 4; test -e /tmp/ran && echo ran || echo killed")
        assert r.stdout == "killed\n"


def test_audit_log_sync_and_async(state_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with Sandbox(template="base", hidepid=2, audit=True) as env:
        env.run("id; ls /proc", user="1001:1001")
        report = env.audit_log("episode.jsonl")  # relative: this process's directory
        assert report["complete"] is True and report["dropped"] == 0
        assert report["events"] > 0 and report["last_sequence"] > 0 and report["bytes"] > 0
        # docs/protocol.md names this field "sandbox"; the worker sends "sandbox_id".
        assert report["sandbox_id"] == env.id and report["barrier"] is True
        log = tmp_path / "episode.jsonl"
        sidecar = tmp_path / "episode.jsonl.status.json"
        assert log.stat().st_size == report["bytes"]
        assert stat.S_IMODE(log.stat().st_mode) == 0o600 and stat.S_IMODE(sidecar.stat().st_mode) == 0o600
        assert '"process_name":"ls"' in log.read_text()  # the command's own syscalls
        # The compact coverage: context fields once, each point with its optional fields.
        assert isinstance(report["context_fields"], list) and report["context_fields"]
        assert isinstance(report["points"], dict) and "container/start" in report["points"]
        assert all(isinstance(v, list) for v in report["points"].values())
        assert len(report["chain"]) == 32 and report["chain"] == json.loads(sidecar.read_text())["chain"]
        live = env.audit_status()
        assert live["complete"] is False

        async def main() -> None:
            report = await env.audit_log.aio(tmp_path / "again.jsonl")
            assert report["complete"] is True
            assert (await env.audit_status.aio())["complete"] is False

        asyncio.run(main())
        assert (tmp_path / "again.jsonl.status.json").exists()


def test_finish_ends_an_episode_in_one_call(state_dir: str, tmp_path: Path) -> None:
    env = Sandbox(template="base", hidepid=2, audit=True)
    env.run("id -u", user="1001:1001")
    report = env.finish(audit_log=tmp_path / "episode.jsonl")
    assert report is not None and report["complete"] is True and report["dropped"] == 0
    log = tmp_path / "episode.jsonl"
    assert log.stat().st_size == report["bytes"] and stat.S_IMODE(log.stat().st_mode) == 0o600
    assert '"process_name":"id"' in log.read_text()  # the command's own syscalls
    assert env.closed
    with pytest.raises(NotFound):
        Sandbox.from_id(env.id)
    # Without a log; and with one that cannot be written: an error, and the
    # sandbox is left stopped with its log, to export again.
    plain = Sandbox(template="base")
    assert plain.finish() is None and plain.closed
    audited = Sandbox(template="base", audit=True)
    try:
        with pytest.raises(SandweaveError):
            audited.finish(audit_log=tmp_path / "missing" / "x.jsonl")
        assert not audited.closed
        assert Sandbox.from_id(audited.id).info["state"] == "stopped"
        assert audited.audit_log(tmp_path / "again.jsonl")["complete"] is True

        async def main() -> None:
            assert (await audited.finish.aio(tmp_path / "third.jsonl"))["complete"] is True

        asyncio.run(main())
        assert audited.closed
    finally:
        audited.close()


def test_incomplete_export_is_a_status(state_dir: str, tmp_path: Path) -> None:
    tpl = {"extends": "base", "runtime_options": {"audit_max_bytes": 4096}}
    with Sandbox(template=tpl, audit=True) as env:
        assert env.spec["runtime_options"]["audit_max_bytes"] == 4096
        env.run("for i in 1 2 3 4 5 6 7 8 9 10; do ls / >/dev/null; done")
        report = env.audit_log(tmp_path / "small.jsonl")
        assert report["complete"] is False
        assert "byte_limit" in report["reasons"]


def test_audit_log_without_audit(state_dir: str, tmp_path: Path) -> None:
    with Sandbox(template="base") as env:
        with pytest.raises(SandweaveError) as err:
            env.audit_log(tmp_path / "none.jsonl")
        assert "\n" not in err.value.message


def test_snapshots(state_dir: str) -> None:
    with Sandbox(template="base", hidepid=2, audit=True) as env:
        env.run("echo ready > /root/state")
        snap = env.snapshot(state="auto", name="ready")
        assert isinstance(snap, Snapshot) and snap.kind == "fs" and snap.name == "ready"
        with pytest.raises(UsageError):
            env.snapshot(state="memory")  # audit refuses memory snapshots
        fs = env.snapshot("filesystem")
        assert fs.kind == "fs"
    try:
        with Sandbox(snapshot=snap) as restored:
            assert restored.run("cat /root/state").stdout == "ready\n"
            opts = restored.spec["runtime_options"]
            assert opts["hidepid"] == 2 and opts["audit"] is True
        with Sandbox(snapshot="ready", hidepid=0, audit=False) as restored:
            assert restored.spec["runtime_options"]["hidepid"] == 0
            assert restored.spec["runtime_options"]["audit"] is False
        assert {s.id for s in Snapshot.list()} == {snap.id, fs.id}
    finally:
        snap.remove()
        fs.remove()

    async def main() -> None:
        env = await Sandbox.create.aio("base", hidepid=1)
        try:
            mem = await env.snapshot.aio("memory")
            assert mem.kind == "memory"
            restored = await Sandbox.create.aio(snapshot=mem)
            assert (await restored.run.aio("echo back")).stdout == "back\n"
            await restored.close.aio()
            assert [s.id for s in await Snapshot.list.aio()] == [mem.id]
            await mem.remove.aio()
        finally:
            await env.close.aio()

    asyncio.run(main())


def test_from_id_and_list(state_dir: str) -> None:
    with Sandbox(template="base", name="found-me", labels={"team": "a", "k": "1"}) as env:
        with Sandbox(template="base", labels={"team": "b"}) as other:
            same = Sandbox.from_id("found-me")
            assert same.id == env.id and same.name == "found-me"
            assert Sandbox.from_id(env.id[:8]).id == env.id
            assert same.run("echo via from_id").stdout == "via from_id\n"
            same.close()  # not owned: only lets go
            assert env.run("echo alive").ok
            assert {s.id for s in Sandbox.list()} == {env.id, other.id}
            assert [s.id for s in Sandbox.list(labels={"team": "a"})] == [env.id]
            assert Sandbox.list(labels={"team": "c"}) == []

            async def main() -> None:
                s = await Sandbox.from_id.aio(other.id)
                assert s.labels == {"team": "b"}
                assert [x.id for x in await Sandbox.list.aio(labels={"team": "b"})] == [other.id]

            asyncio.run(main())


def test_one_serve_child_for_all(state_dir: str) -> None:
    with Sandbox(template="base") as a, Sandbox(template="base") as b:
        assert a.connection is b.connection
        pid = a.connection.pid
        a.run("true")
        b.run("true")
        assert a.connection.pid == pid
        info = a.connection.server_info()
        assert "sandbox.run" in info["methods"] and info["protocol"] == 1


def output_once_written(proc: Process, text: str) -> RunResult:
    """proc.output() once its stdout is `text` (the shell may not have written it yet), or after 10 s."""
    deadline = time.monotonic() + 10
    so_far = proc.output()
    while so_far.stdout != text and time.monotonic() < deadline:
        time.sleep(0.05)
        so_far = proc.output()
    return so_far


def test_detached_command_runs_on_until_killed(state_dir: str) -> None:
    with Sandbox(template="base") as env:
        started = time.monotonic()
        proc = env.start("echo start; sleep 30; echo never")
        assert time.monotonic() - started < 10  # not the sleep's 30 s
        assert isinstance(proc, Process)
        assert proc.handle > 0 and proc.pid > 0 and proc.sandbox_id == env.id
        assert repr(proc) == f"Process(sandbox_id={env.id!r}, handle={proc.handle}, pid={proc.pid})"

        so_far = output_once_written(proc, "start\n")
        assert so_far.stdout == "start\n" and so_far.running and not so_far.ok
        assert proc.is_running()

        assert proc.kill() is True
        r = proc.wait()
        assert (r.exit_code, r.stdout, r.stderr) == (143, "start\n", "")  # 128 + SIGTERM
        assert not r.running and not r.timed_out
        assert proc.kill() is False
        assert not proc.is_running()
        assert proc.output() == r  # once it has ended, output() is what wait() returned


def test_detached_command_that_ends_by_itself(state_dir: str) -> None:
    with Sandbox(template="base") as env:
        proc = env.start(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert isinstance(proc, Process)
        r = proc.wait()
        assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
        assert not r.running and not r.ok
        r = env.start("sleep 30", timeout=0.5).wait()
        assert (r.exit_code, r.timed_out, r.message) == (124, True, "command timed out and was killed")


def test_detached_command_async(state_dir: str) -> None:
    async def main() -> None:
        env = await Sandbox.create.aio("base")
        try:
            proc = await env.start.aio("echo start; sleep 30; echo never")
            assert isinstance(proc, Process) and proc.handle > 0 and proc.pid > 0
            deadline = time.monotonic() + 10
            so_far = await proc.output.aio()
            while so_far.stdout != "start\n" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
                so_far = await proc.output.aio()
            assert so_far.stdout == "start\n" and so_far.running
            assert await proc.is_running.aio()
            assert await proc.kill.aio(9) is True  # a number, or a name
            r = await proc.wait.aio()
            assert (r.exit_code, r.stdout) == (137, "start\n")  # 128 + SIGKILL
            assert await proc.kill.aio() is False
            assert not await proc.is_running.aio()
        finally:
            await env.close.aio()

    asyncio.run(main())


def test_start_takes_no_stdin_and_run_has_no_detach(state_dir: str) -> None:
    with Sandbox(template="base") as env:
        with pytest.raises(TypeError, match="stdin"):
            env.start("touch /tmp/ran", stdin="x")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="detach"):
            env.run("touch /tmp/ran", detach=True)  # type: ignore[call-arg]
        assert env.run("test -e /tmp/ran").exit_code == 1  # nothing ran


def test_over_long_request_is_refused_here(state_dir: str) -> None:
    with Sandbox(template="base") as env:
        with pytest.raises(UsageError, match="limit"):
            env.run(["echo", "x" * (1 << 20)])
        assert env.run("echo fine").ok


def test_close_keep_and_remove(state_dir: str) -> None:
    env = Sandbox(template="base")
    env.close(remove=False)  # owned, but kept on request
    kept = Sandbox.from_id(env.id)
    assert kept.run("echo kept").stdout == "kept\n"
    kept.remove()
    assert kept.closed
    with pytest.raises(NotFound):
        Sandbox.from_id(env.id)

    async def main() -> None:
        env = await Sandbox.create.aio("base")
        await env.close.aio(remove=False)
        handle = await Sandbox.from_id.aio(env.id)
        await handle.remove.aio()
        with pytest.raises(NotFound):
            await Sandbox.from_id.aio(env.id)

    asyncio.run(main())


def test_ttl_and_idle_timeout(state_dir: str) -> None:
    """The worker ends the sandbox itself when its ttl passes; time_left shows it coming."""
    # A ttl long enough that a loaded CI machine still gets the command in
    # before it passes (create alone has taken 3 s at load 13).
    sb = Sandbox(ttl=8, idle_timeout=600, state_dir=state_dir)
    try:
        left = sb.time_left
        assert 0 < left["ttl_ms"] <= 8000
        assert 0 < left["idle_ms"] <= 600000 and left["busy"] is False
        assert sb.run(["true"]).exit_code == 0
        deadline = time.monotonic() + 30
        while sb.inspect()["state"] != "stopped" and time.monotonic() < deadline:
            time.sleep(0.2)
        view = sb.inspect()
        assert view["state"] == "stopped" and view["ended_by"] == "ttl"
        with pytest.raises(ValueError):
            Sandbox(ttl=0, state_dir=state_dir)
    finally:
        sb.close()
