#!/usr/bin/env python3
"""The Python SDK against the CLI, measured in the same run:

  run("true")   SDK `env.run("true")` (one shared serve child, no process per
                call) vs CLI `sandweave run ID -- true` (a process per call) on
                the same sandbox, interleaved, RUNS times each: medians, p90,
                and the ratio. Target: the SDK faster than the CLI.
  episodes/s    examples/episodes.py (pool acquire -> agent script as uid 1001,
                hidepid 2, audit -> audit_log -> terminate -> close) with
                EPISODES episodes at concurrency 1 and 8.

Usage: bench/sdk.py [--runs 100] [--episodes 50] [--template base]
Needs root and a built tree (SANDWEAVE_BIN, else build/sandweave). Uses a
private state directory, removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(top, "python"))
sys.path.insert(0, os.path.join(top, "examples"))

import episodes  # noqa: E402

from sandweave import Sandbox  # noqa: E402


def pct(values: list, p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--episodes", type=int, default=50)
    ap.add_argument("--template", default="base")
    args = ap.parse_args()
    binary = os.environ.get("SANDWEAVE_BIN") or os.path.join(top, "build", "sandweave")
    if not os.access(binary, os.X_OK):
        print(f"sandweave binary {binary} not found (set SANDWEAVE_BIN)", file=sys.stderr)
        return 1
    os.environ["SANDWEAVE_BIN"] = binary
    state = tempfile.mkdtemp(prefix="sw-bench-sdk.", dir="/var/tmp")
    os.environ["SANDWEAVE_STATE_DIR"] = state
    try:
        with Sandbox(template=args.template) as env:
            env.run("true")  # warm: the serve child, the runtime's caches
            subprocess.run([binary, "run", env.id, "--", "true"], check=True)
            sdk, cli = [], []
            for _ in range(args.runs):
                t = time.perf_counter()
                r = env.run("true")
                sdk.append(time.perf_counter() - t)
                assert r.exit_code == 0
                t = time.perf_counter()
                subprocess.run([binary, "run", env.id, "--", "true"], check=True, stdin=subprocess.DEVNULL)
                cli.append(time.perf_counter() - t)

            async def burst(n: int) -> float:
                t = time.perf_counter()
                rs = await asyncio.gather(*[env.run.aio("true") for _ in range(n)])
                assert all(r.exit_code == 0 for r in rs)
                return n / (time.perf_counter() - t)

            par = asyncio.run(burst(args.runs))

        ms = lambda v: f"{v * 1000:.1f} ms"  # noqa: E731
        print(f'run("true"), {args.runs} each, interleaved, template {args.template}:')
        print(f"  SDK env.run        median {ms(statistics.median(sdk))}  p90 {ms(pct(sdk, 90))}")
        print(f"  CLI sandweave run  median {ms(statistics.median(cli))}  p90 {ms(pct(cli, 90))}")
        print(f"  SDK / CLI          {statistics.median(sdk) / statistics.median(cli):.2f}")
        print(f"  SDK, {args.runs} at once from one event loop: {par:.1f} runs/s")
        figures = {}
        for c in (1, 8):
            with tempfile.TemporaryDirectory(prefix="sw-bench-ep.") as out:
                figures[c] = asyncio.run(episodes.run(args.episodes, c, args.template, out))
        print(
            f"episodes/s: concurrency 1: {figures[1]['episodes_per_s']:.2f}, "
            f"concurrency 8: {figures[8]['episodes_per_s']:.2f} "
            f"({figures[8]['episodes_per_s'] / figures[1]['episodes_per_s']:.2f}x)"
        )
    finally:
        subprocess.run([binary, "--state-dir", state, "prune"], capture_output=True)
        ids = subprocess.run([binary, "--state-dir", state, "ls", "--ids"], capture_output=True, text=True).stdout
        for sid in ids.split():
            subprocess.run([binary, "--state-dir", state, "rm", sid], capture_output=True)
        shutil.rmtree(state, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
