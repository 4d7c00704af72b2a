#!/usr/bin/env python3
"""Batch episodes with asyncio, the way an RL or eval runner drives sandweave.

Each episode: acquire a warm sandbox from a pool (hidepid 2, audit on) -> run
an agent-like script as uid 1001 -> finish: the final audit barrier, the stop,
the export of its whole audit log and the removal, in one request. Prints episodes per second and how many audit
exports were complete.

    python3 examples/episodes.py                       # 50 episodes, 8 at a time
    python3 examples/episodes.py -n 100 -c 16 --template coding --out /tmp/ep

Needs root, the sandweave binary (SANDWEAVE_BIN, PATH or /usr/local/bin) and
the SDK (scripts/setup.sh installs both). SANDWEAVE_STATE_DIR picks the state
directory.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from sandweave import Pool, SandweaveError  # noqa: E402

# What an agent does in an episode: write code, run it, look around. `ls
# /proc` shows which processes uid 1001 can see (hidepid 2: only its own).
AGENT = r"""
set -e
mkdir -p /tmp/work && cd /tmp/work
printf 'x = %s\nprint(x * 2)\n' "$EPISODE" > solution.txt
for step in 1 2 3 4 5; do echo "step $step" >> log.txt; done
grep -c step log.txt
wc -c < solution.txt
echo "uid=$(id -u)"
echo "visible=$(ls /proc | grep -c '^[0-9]')"
test ! -e /proc/1/status && echo "pid1=hidden" || echo "pid1=visible"
"""


async def episode(pool: Pool, n: int, out_dir: str) -> Dict[str, object]:
    env = await pool.acquire.aio()
    try:
        result = await env.run.aio(AGENT, user="1001:1001", env={"EPISODE": str(n)}, timeout=60)
        report = await env.finish.aio(os.path.join(out_dir, f"episode-{n:04d}.jsonl"))
    finally:
        await env.close.aio()  # a no-op after finish; removes it after an error
    return {
        "ok": result.exit_code == 0,
        "pid1_hidden": "pid1=hidden" in result.stdout,
        "complete": bool(report["complete"]),
        "dropped": int(report.get("dropped", 0)),
        "events": int(report.get("events", 0)),
    }


async def run(episodes: int, concurrency: int, template: str, out_dir: str) -> Dict[str, float]:
    t0 = time.monotonic()
    pool = await Pool.create.aio(template, size=concurrency, hidepid=2, audit=True)
    warm = time.monotonic() - t0
    sem = asyncio.Semaphore(concurrency)

    async def one(n: int) -> Dict[str, object]:
        async with sem:
            return await episode(pool, n, out_dir)

    try:
        t1 = time.monotonic()
        results: List[Dict[str, object]] = await asyncio.gather(*[one(n) for n in range(episodes)])
        elapsed = time.monotonic() - t1
    finally:
        await pool.close.aio()
    complete = sum(1 for r in results if r["complete"])
    print(
        f"{episodes} episodes, {concurrency} at a time, template {template}: "
        f"{elapsed:.2f} s, {episodes / elapsed:.2f} episodes/s "
        f"(pool of {concurrency} warmed in {warm:.2f} s, not counted)"
    )
    print(
        f"audit exports complete: {complete}/{episodes}; dropped events: "
        f"{sum(int(r['dropped']) for r in results)}; events per episode: "
        f"{sum(int(r['events']) for r in results) // max(1, episodes)}"
    )
    print(
        f"agent exited 0: {sum(1 for r in results if r['ok'])}/{episodes}; "
        f"PID 1 hidden from uid 1001: {sum(1 for r in results if r['pid1_hidden'])}/{episodes}"
    )
    return {"episodes_per_s": episodes / elapsed, "complete": complete, "episodes": episodes}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--episodes", type=int, default=50)
    ap.add_argument("-c", "--concurrency", type=int, default=8)
    ap.add_argument("--template", default="base", help="template name (default base; coding for a Debian guest)")
    ap.add_argument("--out", help="directory for the audit logs (default: a temporary one, removed)")
    args = ap.parse_args()
    try:
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            summary = asyncio.run(run(args.episodes, args.concurrency, args.template, args.out))
        else:
            with tempfile.TemporaryDirectory(prefix="sandweave-episodes-") as out:
                summary = asyncio.run(run(args.episodes, args.concurrency, args.template, out))
    except SandweaveError as e:
        print(f"episodes: {e}", file=sys.stderr)
        return e.code
    return 0 if summary["complete"] == summary["episodes"] else 3


if __name__ == "__main__":
    sys.exit(main())
