#!/usr/bin/env python3
"""`sandweave batch run` throughput against raw runtime cycles, in the same run.

  raw cycle  `runsc run --bundle B ID` of /bin/true, a fresh ID each time
             (bench/episodes.py's Raw: the same bundle, runsc and flags), at
             the same concurrency.
  batch      `sandweave batch run` of N episodes `/bin/true` with hidepid 2
             and audit on, --concurrency C: each one create, run, terminate,
             audit export + verify, rm, its folder written and fsynced.

Prints episodes/s, raw cycles/s and their ratio for each repetition, and the
audit completeness of every episode (all must be complete).

With --warm-pool, each repetition also runs the batch with --warm-pool.

Usage: bench/batch.py [--episodes N] [--concurrency C] [--reps R] [--warm-pool]
(as root; SANDWEAVE_BIN or SANDWEAVE names the binary, default build/sandweave).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def load_episodes_bench():
    """bench/episodes.py, for its raw cycle (one way to measure it)."""
    spec = importlib.util.spec_from_file_location("bench_episodes", os.path.join(HERE, "episodes.py"))
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def batch_rate(binary: str, state: str, n: int, concurrency: int, rep: int, extra: tuple = ()) -> dict:
    work = tempfile.mkdtemp(prefix="sw-bench-batch.", dir="/var/tmp")
    try:
        spec = os.path.join(work, "spec.jsonl")
        with open(spec, "w") as f:
            for i in range(n):
                f.write(json.dumps({"id": f"e{i}", "hidepid": 2, "user": "1001:1001", "command": ["/bin/true"]}) + "\n")
        out = os.path.join(work, "out")
        t = time.perf_counter()
        r = subprocess.run(
            [binary, "--state-dir", state, "-q", "batch", "run", spec, "--out", out,
             "--concurrency", str(concurrency), "--json", *extra],
            capture_output=True, text=True)
        elapsed = time.perf_counter() - t
        if r.returncode != 0:
            sys.stderr.write(f"batch run (rep {rep}): exit {r.returncode}: {r.stderr[-500:]}\n")
        summary = json.loads(r.stdout) if r.stdout.strip() else {}
        return {"rate": n / elapsed, "seconds": elapsed, "summary": summary}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--warm-pool", action="store_true", help="also run each batch with --warm-pool")
    args = ap.parse_args()
    top = os.path.dirname(HERE)
    binary = os.environ.get("SANDWEAVE_BIN") or os.environ.get("SANDWEAVE") or os.path.join(top, "build", "sandweave")
    if not os.access(binary, os.X_OK):
        print(f"sandweave binary {binary} not found (set SANDWEAVE_BIN or SANDWEAVE)", file=sys.stderr)
        return 1
    ep = load_episodes_bench()
    state = tempfile.mkdtemp(prefix="sw-bench-batch-state.", dir="/var/tmp")
    doctor = json.loads(subprocess.run([binary, "--state-dir", state, "doctor", "--json"],
                                       capture_output=True, text=True).stdout)
    runsc = [c for c in doctor["checks"] if c["name"] == "runsc"][0]["detail"].split(":")[0]
    try:
        subprocess.run([binary, "--state-dir", state, "image", "build", "base"], check=True, capture_output=True)
        rootfs = os.path.join(state, "images", "base", "rootfs")
        raw = ep.Raw(runsc, state, ep.make_raw_bundle(runsc, state, rootfs))
        print(f"sandweave {binary}; runsc {runsc}; load {ep.loadavg()} on {os.cpu_count()} cpus", file=sys.stderr)
        raw.rate(4, 1)  # warm the page cache
        batch_rate(binary, state, 4, 1, 0)
        ratios = []
        for rep in range(1, args.reps + 1):
            r, fails, _ = raw.rate(args.episodes, args.concurrency)
            b = batch_rate(binary, state, args.episodes, args.concurrency, rep)
            s = b["summary"]
            ratios.append(b["rate"] / r)
            print(f"rep {rep}: concurrency {args.concurrency}: raw {r:.2f} cycles/s ({fails} failed), "
                  f"batch {b['rate']:.2f} episodes/s ({b['seconds']:.1f} s for {args.episodes}; "
                  f"done {s.get('done')}, audit complete {s.get('audit', {}).get('complete')}, "
                  f"infrastructure {s.get('infrastructure')}), ratio {b['rate'] / r:.2f} "
                  f"(load {ep.loadavg()})")
            if args.warm_pool:
                w = batch_rate(binary, state, args.episodes, args.concurrency, rep, ("--warm-pool",))
                print(f"rep {rep}: with --warm-pool {w['rate']:.2f} episodes/s ({w['seconds']:.1f} s; "
                      f"audit complete {w['summary'].get('audit', {}).get('complete')}), "
                      f"ratio to raw {w['rate'] / r:.2f}")
        print(f"batch / raw at concurrency {args.concurrency}: " + ", ".join(f"{x:.2f}" for x in ratios))
    finally:
        ep.remove_state(binary, state, runsc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
