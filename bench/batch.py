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

With --weave, each repetition also runs the same batch through weave:// on
the one-machine cluster (scripts/weave-controller.sh: three workers on this
host, 4 sandbox slots each, started in a scratch folder and stopped at the
end): its episodes are one Slurm job array, --concurrency at once. The same
host's CPUs serve the workers, so the ratio to raw is what the controller,
Slurm and the extra hops cost.

Usage: bench/batch.py [--episodes N] [--concurrency C] [--reps R] [--warm-pool] [--weave]
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


class Weave:
    """The one-machine cluster and its controller, in a scratch folder of their own."""

    PORT, PORT_BASE = "7893", "17800"

    def __init__(self, binary: str):
        top = os.path.dirname(HERE)
        # Short: a worker's audit socket path must stay under 100 bytes.
        self.dir = tempfile.mkdtemp(prefix="swb", dir="/var/tmp")
        os.chmod(self.dir, 0o711)  # munged wants every directory above its socket searchable
        self.ctl = [os.path.join(top, "scripts", "weave-controller.sh"), "--dir", os.path.join(self.dir, "c"),
                    "--port", self.PORT, "--port-base", self.PORT_BASE, "--sandweave", binary]
        r = subprocess.run(self.ctl + ["start"], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("starting the one-machine cluster: " + r.stderr[-500:])
        out = subprocess.run(self.ctl + ["env"], capture_output=True, text=True, check=True).stdout
        self.env = dict(os.environ)
        for line in out.splitlines():
            if line.startswith("export ") and "=" in line:
                k, v = line[len("export "):].split("=", 1)
                self.env[k] = v.strip("'\"")

    def stop(self):
        subprocess.run(self.ctl + ["stop"], stdin=subprocess.DEVNULL, capture_output=True)
        shutil.rmtree(self.dir, ignore_errors=True)


def batch_rate(binary: str, state: str, n: int, concurrency: int, rep: int, extra: tuple = (),
               env: dict | None = None) -> dict:
    work = tempfile.mkdtemp(prefix="sw-bench-batch.", dir="/var/tmp")
    try:
        spec = os.path.join(work, "spec.jsonl")
        with open(spec, "w") as f:
            for i in range(n):
                f.write(json.dumps({"id": f"e{i}", "hidepid": 2, "user": "1001:1001", "command": ["/bin/true"]}) + "\n")
        out = os.path.join(work, "out")
        t = time.perf_counter()
        # Through a controller the workers use their own state.
        where = [] if env else ["--state-dir", state]
        r = subprocess.run(
            [binary, *where, "-q", "batch", "run", spec, "--out", out,
             "--concurrency", str(concurrency), "--json", *extra],
            capture_output=True, text=True, env=env)
        elapsed = time.perf_counter() - t
        if r.returncode != 0:
            sys.stderr.write(f"batch run (rep {rep}): exit {r.returncode}: {r.stderr[-500:]}\n")
        if not r.stdout.strip():
            raise RuntimeError(f"batch run (rep {rep}) wrote no summary: {r.stderr[-500:]}")
        summary = json.loads(r.stdout)
        return {"rate": n / elapsed, "seconds": elapsed, "summary": summary}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--warm-pool", action="store_true", help="also run each batch with --warm-pool")
    ap.add_argument("--weave", action="store_true", help="also run each batch through weave:// (job arrays)")
    args = ap.parse_args()
    top = os.path.dirname(HERE)
    binary = os.environ.get("SANDWEAVE_BIN") or os.environ.get("SANDWEAVE") or os.path.join(top, "build", "sandweave")
    if not os.access(binary, os.X_OK):
        print(f"sandweave binary {binary} not found (set SANDWEAVE_BIN or SANDWEAVE)", file=sys.stderr)
        return 1
    ep = load_episodes_bench()
    state = tempfile.mkdtemp(prefix="sw-bench-batch-state.", dir="/var/tmp")
    weave = None
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
        if args.weave:
            weave = Weave(binary)
            batch_rate(binary, state, 6, 3, 0, env=weave.env)  # each worker builds its image once
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
            if weave:
                w = batch_rate(binary, state, args.episodes, args.concurrency, rep, env=weave.env)
                s = w["summary"]
                print(f"rep {rep}: through weave:// {w['rate']:.2f} episodes/s ({w['seconds']:.1f} s; "
                      f"done {s.get('done')}, audit complete {s.get('audit', {}).get('complete')}, "
                      f"infrastructure {s.get('infrastructure')}), ratio to raw {w['rate'] / r:.2f}, "
                      f"to local {w['rate'] / b['rate']:.2f} (load {ep.loadavg()})")
        print(f"batch / raw at concurrency {args.concurrency}: " + ", ".join(f"{x:.2f}" for x in ratios))
    finally:
        if weave:
            weave.stop()
        ep.remove_state(binary, state, runsc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
