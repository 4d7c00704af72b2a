"""The seed's two Python examples, verbatim, with template "coding".

They run in the persistent coding state directory (SANDWEAVE_CODING_STATE_DIR,
default /var/tmp/sandweave-test-coding), where the `coding` image is built
once (a few minutes with debootstrap) and kept between runs, as
tests/integration/hidepid_coding.sh does; the examples name no state
directory, so it is given to them through SANDWEAVE_STATE_DIR. The check
afterwards: no sandbox there that was not there before.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Dict, Set

import pytest

SEED_EXAMPLE_1 = '''\
from sandweave import Sandbox

env = Sandbox(template="coding", hidepid=2, audit=True)
try:
    result = env.run("id; ls /proc", user="1001:1001")
    report = env.audit_log("episode.jsonl")
    print(report["complete"], report["dropped"])
finally:
    env.terminate()
    env.close()
'''

SEED_EXAMPLE_2 = '''\
env = Sandbox(
    template={"extends": "coding", "runtime_options": {"audit_max_bytes": 8 * 1024**3}},
    audit=True,
)
'''


def sandbox_ids(sw_bin: str, state_dir: str) -> Set[str]:
    """The sandboxes the seed examples could have made: the shared state
    directory also holds other tests' sandboxes, which carry a
    `sandweave-test` label and are theirs to remove."""
    out = subprocess.run(
        [sw_bin, "--state-dir", state_dir, "--json", "ls"], capture_output=True, text=True, check=True
    ).stdout
    return {
        s["id"]
        for s in json.loads(out or "[]")
        if "sandweave-test" not in (s.get("spec", {}).get("labels") or {})
    }


@pytest.fixture
def in_coding_dir(coding_state_dir: str, sw_bin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SANDWEAVE_STATE_DIR", coding_state_dir)
    monkeypatch.chdir(tmp_path)
    before = sandbox_ids(sw_bin, coding_state_dir)
    yield tmp_path
    left = sandbox_ids(sw_bin, coding_state_dir) - before
    for sid in left:
        subprocess.run([sw_bin, "--state-dir", coding_state_dir, "rm", sid], capture_output=True)
    assert not left, f"left behind in {coding_state_dir}: {sorted(left)}"


@pytest.mark.coding
def test_seed_example_1(in_coding_dir: Path, capsys: pytest.CaptureFixture) -> None:
    scope: Dict[str, object] = {}
    exec(compile(SEED_EXAMPLE_1, "seed-example-1", "exec"), scope)
    assert capsys.readouterr().out == "True 0\n"
    result = scope["result"]
    lines = result.stdout.splitlines()  # type: ignore[attr-defined]
    assert lines[0].startswith("uid=1001 gid=1001")
    pids = [l for l in lines[1:] if l.isdigit()]
    assert "1" not in pids  # hidepid=2: root's init is not listed for uid 1001
    assert (in_coding_dir / "episode.jsonl").stat().st_size > 0
    status = json.loads((in_coding_dir / "episode.jsonl.status.json").read_text())
    assert status["complete"] is True and status["dropped"] == 0
    assert scope["env"].closed  # type: ignore[attr-defined]


@pytest.mark.coding
def test_seed_example_2(in_coding_dir: Path) -> None:
    from sandweave import Sandbox

    scope: Dict[str, object] = {"Sandbox": Sandbox}
    exec(compile(SEED_EXAMPLE_2, "seed-example-2", "exec"), scope)
    env = scope["env"]
    try:
        opts = env.spec["runtime_options"]  # type: ignore[attr-defined]
        assert opts["audit_max_bytes"] == 8 * 1024**3 and opts["audit"] is True
        assert env.spec["origin"]["/runtime_options/audit_max_bytes"] != "default"  # type: ignore[attr-defined]
        r = env.run(["python3", "-c", "print(6 * 7)"], user="1001:1001")  # type: ignore[attr-defined]
        assert r.stdout == "42\n"
        report = env.audit_log("big.jsonl")  # type: ignore[attr-defined]
        assert report["complete"] is True
    finally:
        env.terminate()  # type: ignore[attr-defined]
        env.close()  # type: ignore[attr-defined]
