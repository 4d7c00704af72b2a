"""sandweave.batch: the binary's batch runner, sync, .aio and as an async iterator."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from pathlib import Path

import pytest

import sandweave
from sandweave import BatchResult, Episode, UsageError


def spec() -> list:
    return [
        {"id": "ok", "command": ["sh", "-c", "echo hi; id -u"], "user": "1001:1001", "hidepid": 2},
        {"id": "three", "script": "exit 3"},
        {"id": "slow", "command": ["sleep", "30"], "timeout": 1},
    ]


def test_batch_sync(state_dir: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = sandweave.batch(spec(), out=out, concurrency=3)
    assert isinstance(result, BatchResult)
    assert (result.exit_code, result.total, result.done, result.failed) == (6, 3, 1, 2)
    assert result.audit_complete == 3 and result.audit_incomplete == 0 and not result.ok
    by_id = {e.id: e for e in result.episodes}
    assert set(by_id) == {"ok", "three", "slow"}
    ok = by_id["ok"]
    assert ok.ok and ok.exit_code == 0 and ok.audit_complete is True and ok.tries == 1
    assert ok.stdout == "hi\n1001\n"
    assert Path(ok.dir or "") == out / "ok"
    assert json.loads((out / "ok" / "result.json").read_text())["status"] == "done"
    assert by_id["three"].exit_code == 3 and by_id["three"].status == "failed"
    assert by_id["slow"].timed_out and by_id["slow"].exit_code == 124
    # A rerun skips what finished.
    again = sandweave.batch(spec(), out=out)
    assert again.skipped == 3 and all(e.resumed for e in again.episodes)


def test_batch_aio_and_iterator(state_dir: str, tmp_path: Path) -> None:
    async def main() -> None:
        one = [{"id": "a", "command": ["true"]}, {"id": "b", "script": "echo b"}]
        result = await sandweave.batch.aio(one, out=tmp_path / "aio", retries=0, warm_pool=True)
        assert result.ok and result.done == 2
        assert all(e.result.get("pool") for e in result.episodes)
        seen = []
        async for ep in sandweave.batch.episodes.aio(one, out=tmp_path / "iter"):
            assert isinstance(ep, Episode)
            seen.append(ep.id)
        assert sorted(seen) == ["a", "b"]

    asyncio.run(main())
    assert [e.id for e in sandweave.batch.episodes([{"id": "s", "command": ["true"]}], out=tmp_path / "s")] == ["s"]


def test_batch_bad_spec_is_usage_error(state_dir: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError) as err:
        sandweave.batch([{"id": "a", "command": ["true"]}, {"id": "b", "comand": ["true"]}], out=tmp_path / "x")
    assert ":2: unknown key 'comand'" in err.value.message and err.value.code == 2
    assert not (tmp_path / "x").exists()


def test_batch_breaking_off_leaves_nothing(state_dir: str, tmp_path: Path) -> None:
    many = [{"id": f"e{i}", "command": ["sleep", "1" if i == 0 else "30"]} for i in range(4)]
    it = sandweave.batch.episodes(many, out=tmp_path / "b", concurrency=4)
    first = next(it)
    assert first.id == "e0"
    it.close()  # the runner gets SIGTERM and removes the rest; clean_state checks it
    assert not any((tmp_path / "b" / f"e{i}").exists() for i in range(1, 4))


@pytest.mark.unit
def test_batch_signatures() -> None:
    names = ["spec", "out", "concurrency", "retries", "output_limit", "warm_pool", "connection", "state_dir"]
    for fn in (sandweave.batch, sandweave.batch.aio, sandweave.batch.episodes, sandweave.batch.episodes.aio):
        assert list(inspect.signature(fn).parameters) == names
    assert inspect.signature(sandweave.batch).return_annotation == "BatchResult"
    assert inspect.iscoroutinefunction(sandweave.batch.aio)
    assert os.path.basename(sandweave.batch.__module__) == "sandweave.batches"
