#!/usr/bin/env python3
"""Audited episodes per second against the raw runtime's cycle rate, in one run,
and where an episode's wall time and CPU go.

  raw cycle     `runsc run --bundle B ID` of /bin/true in the foreground, a
                fresh ID each time, on a bundle made once: the base image
                read-only, `runsc spec` defaults otherwise. runsc creates,
                starts, waits for and destroys the sandbox itself, so a cycle
                leaves nothing behind. Same runsc binary and global flags as
                sandweave's (--root, --platform=ptrace, --network=none).
  raw agent     the same cycle running the episode's own agent script as uid
  cycle         1001 (a tmpfs on /tmp, the root read-only): the bare runtime
                doing the guest work an episode does, without hidepid, audit
                or anything of sandweave's.
  plain cycle   the raw cycle with plain gVisor (--plain-runsc, Debian's
                /usr/bin/runsc by default): what a user without sandweave
                runs. sandweave's runtime is patched (hidepid, audit, a
                cheaper start), so the raw cycle above is the cheaper one.
  episode       from the Python SDK, as examples/episodes.py: pool acquire ->
                the agent script as uid 1001 (hidepid 2, audit on) -> audit
                finish (one request: final barrier, stop, export of the whole
                log, complete must be true, rm).
                Pool of CONCURRENCY members, warmed before the clock starts.

Rates are taken at concurrency 1 and 8, raw and sandweave interleaved within
each rep, REPS times; printed as medians and as the ratios episodes / raw
cycle (the target) and episodes / raw agent cycle (like for like).
Warm `pool acquire` (SDK, pool of 4 settled before each acquire) p50/p99;
with --bystanders N, again with N other sandboxes alive on the host (an
acquire must not read their records).

Breakdown: one more batch per concurrency with a sampler process reading, every
10 ms, /proc/PID/stat of every process of this run (classified by cmdline) and
cpuacct.usage of each sandbox's host cgroup (named after its id); the bench and
everything it starts run in a cpuacct cgroup of their own, whose usage (exited
processes included) gives the totals. The window ends once the pool has
refilled, so it holds one create per episode. Wall time per step comes from
client-side timestamps.

CPU per step (--steps N, 0 for none): one operation at a time, N in a row, the
whole machine's busy time (/proc/stat) over them, median of REPS rounds: a raw
/bin/true cycle, a raw agent cycle, then a sandbox taken step by step (create
+ rm; + the agent script; + export and terminate) and a whole pool episode
with its refill. The differences between rows are what each step adds; the
first sandbox row against the /bin/true cycle is what a sandweave sandbox's
life costs over the bare runtime's.

Usage: bench/episodes.py [--episodes 40] [--cycles 40] [--reps 3] [--acquires 30]
                         [--breakdown 24] [--steps 8] [--bystanders 0] [--template base]
SW_BENCH_DEBUG=1 lists every sampled process with its CPU on stderr.
Needs root and a built tree (SANDWEAVE_BIN or SANDWEAVE, else build/sandweave). Uses a
private state directory, removed at the end. Not part of CI.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import importlib.util
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Tuple

top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(top, "python"))

CPUACCT = "/sys/fs/cgroup/cpuacct"
CONCURRENCY = (1, 8)
TICK_NS = 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def load_example():
    spec = importlib.util.spec_from_file_location("example_episodes", os.path.join(top, "examples", "episodes.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def pct(values: List[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def loadavg() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# --- the sampler (a process of its own, outside the bench's cgroup) -----------------------

PROCESS_ROWS = [
    ("sentry", "runsc-sandbox (the sentry)"),
    ("gofer", "runsc-gofer"),
    ("runsc", "runsc CLI (run --detach, kill, delete, ...)"),
    ("writer", "audit writer"),
    ("shim", "shim / agent relay"),
    ("serve", "serve child (JSON-RPC worker)"),
    ("refill", "pool refill (background creates)"),
    ("lifetime", "lifetime watcher"),
    ("cli", "other sandweave processes"),
    ("sdk", "SDK python (this bench)"),
]


def classify(args: List[str], state: str, bench_pid: int, pid: int, ppid: int, known: Dict[int, Optional[str]]):
    if pid == bench_pid:
        return "sdk"
    if pid == os.getpid():
        return None  # the sampler
    line = " ".join(args)
    mine = state in line or known.get(ppid) is not None or ppid == bench_pid
    if not mine or not args:
        return None
    a0 = os.path.basename(args[0])
    if a0 == "runsc-sandbox":
        return "sentry"
    if a0 == "runsc-gofer":
        return "gofer"
    if a0 == "runsc" or "runsc" in a0 or a0 == "exe":  # /proc/self/exe: runsc's helpers
        return "runsc"
    if "sandweave" in a0:
        verbs = {
            "__shim": "shim",
            "__audit-writer": "writer",
            "__pool-refill": "refill",
            "__lifetime": "lifetime",
            "serve": "serve",  # sandweave --host local serve --stdio
        }
        return next((verbs[a] for a in args[1:] if a in verbs), "cli")
    return "cli"


def proc_cpu(pid: int) -> Optional[Tuple[int, int]]:
    """(ppid, utime+stime in ns) of a process, exited threads included."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2 :].split()
    return int(rest[1]), (int(rest[11]) + int(rest[12])) * TICK_NS


def threads_ns(pid: int) -> int:
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def cgroup_usage(name: str) -> Optional[int]:
    try:
        with open(f"{CPUACCT}/{name}/cpuacct.usage") as f:
            return int(f.read())
    except OSError:
        return None


def sampler_main(state: str, bench_pid: int, out: str) -> int:
    """Samples until SIGTERM, then writes {category: ns, ...} to OUT."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    known: Dict[int, Optional[str]] = {}
    cmdlines: Dict[int, str] = {}
    first: Dict[int, int] = {}  # pid -> its CPU when first seen (pids alive at the start)
    last: Dict[int, int] = {}
    sb_first: Dict[str, int] = {}
    sb_last: Dict[str, int] = {}
    starting = True
    while True:
        done = stop.is_set()
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            if pid in known and known[pid] is None:
                continue
            pc = proc_cpu(pid)
            if pc is None:
                continue
            ppid, ns = pc
            # Read again while it lives: a child reads as its parent until it execs.
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
            except OSError:
                continue
            cat = classify(args, state, bench_pid, pid, ppid, known)
            if cat is not None:
                cmdlines[pid] = " ".join(args)
            if pid not in known:
                known[pid] = cat
                if cat is None:
                    continue
                first[pid] = ns if starting else 0
            elif cat is not None:
                known[pid] = cat
            if known[pid] not in ("sentry", "gofer"):
                # Few threads: their exact runtimes beat the 10 ms ticks of a short life.
                ns = max(ns, threads_ns(pid))
            last[pid] = max(last.get(pid, 0), ns)
        try:
            ids = os.listdir(os.path.join(state, "sandboxes"))
        except OSError:
            ids = []
        for sid in ids:
            u = cgroup_usage(sid)
            if u is None:
                continue
            if sid not in sb_first:
                sb_first[sid] = u if starting else 0
            sb_last[sid] = max(sb_last.get(sid, 0), u)
        starting = False
        if done:
            break
        stop.wait(0.01)
    by: Dict[str, int] = {}
    for pid, cat in known.items():
        if cat is None or pid not in last:
            continue
        by[cat] = by.get(cat, 0) + last[pid] - first.get(pid, 0)
    if os.environ.get("SW_BENCH_DEBUG"):
        for pid, cat in known.items():
            if cat is not None and pid in last:
                sys.stderr.write(f"{cat} {pid} {(last[pid] - first.get(pid, 0)) / 1e6:.1f} ms {cmdlines.get(pid, '')[-110:]}\n")
    by["sandbox_cgroups"] = sum(sb_last[s] - sb_first.get(s, 0) for s in sb_last)
    with open(out, "w") as f:
        json.dump(by, f)
    return 0


class Sampler:
    def __init__(self, state: str, cgroup: Optional[str]) -> None:
        self.out = tempfile.mktemp(prefix="sw-bench-sample.", dir="/var/tmp")
        self.cgroup = cgroup
        self.cg0 = cgroup_usage(cgroup) if cgroup else None

        def leave_cgroup() -> None:  # the sampler's own CPU is not the bench's
            if cgroup:
                with open(f"{CPUACCT}/cgroup.procs", "w") as f:
                    f.write(str(os.getpid()))

        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--sample", state, str(os.getpid()), self.out],
            preexec_fn=leave_cgroup,
        )
        time.sleep(0.3)  # its first pass records what every live process had used so far

    def stop(self) -> Dict[str, int]:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait()
        with open(self.out) as f:
            by = json.load(f)
        os.unlink(self.out)
        if self.cgroup:
            by["bench_cgroup"] = (cgroup_usage(self.cgroup) or 0) - (self.cg0 or 0)
        return by


# --- raw cycles -------------------------------------------------------------------------------


def make_raw_bundle(runsc: str, state: str, rootfs: str, agent: Optional[str] = None) -> str:
    """/bin/true, or the shell script `agent` as uid 1001 with a tmpfs on /tmp."""
    bundle = os.path.join(state, "raw-agent-bundle" if agent else "raw-bundle")
    os.makedirs(bundle)
    subprocess.run([runsc, "spec", "--", "/bin/true"], cwd=bundle, check=True)
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        c = json.load(f)
    c["root"] = {"path": rootfs, "readonly": True}
    c["process"]["terminal"] = False
    if agent:
        c["process"]["args"] = ["/bin/sh", "-c", agent]
        c["process"]["user"] = {"uid": 1001, "gid": 1001}
        c["process"]["env"].append("EPISODE=1")
        c["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]})
    with open(path, "w") as f:
        json.dump(c, f)
    return bundle


def remove_state(binary: str, state: str, runsc: str, plain: str = "") -> None:
    """Removes every sandbox of the state directory, the raw cycles' leftovers, and the directory."""
    subprocess.run([binary, "--state-dir", state, "prune"], capture_output=True)
    ids = subprocess.run([binary, "--state-dir", state, "ls", "--ids"], capture_output=True, text=True).stdout
    for sid in ids.split():
        subprocess.run([binary, "--state-dir", state, "rm", sid], capture_output=True)
    subprocess.run(f"{runsc} --root={state}/raw-runsc list -q 2>/dev/null | xargs -r -n1 "
                   f"{runsc} --root={state}/raw-runsc delete --force", shell=True, capture_output=True)
    if plain and os.access(plain, os.X_OK):
        subprocess.run(f"{plain} --root={state}/plain-runsc list -q 2>/dev/null | xargs -r -n1 "
                       f"{plain} --root={state}/plain-runsc delete --force", shell=True, capture_output=True)
    shutil.rmtree(state, ignore_errors=True)


def cgroup_ns(name: str) -> int:
    with open(f"{CPUACCT}/{name}/cpuacct.usage") as f:
        return int(f.read())


def self_ns() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


class Raw:
    """Raw cycles of one bundle. With `cgroup` (the bench's own), each cycle's
    sandbox gets a cgroup under it (a bundle per cycle naming it), so a cycle's
    CPU is all of it. Without one it is getrusage's, which misses what runsc
    never waits for (the guest's ptrace stubs that outlive the sentry): 15% of
    an agent-script cycle on a PVM guest, 357 against 421 ms."""

    def __init__(self, runsc: str, state: str, bundle: str, root: str = "raw-runsc",
                 cgroup: Optional[str] = None) -> None:
        self.runsc, self.state, self.bundle, self.root, self.cgroup = runsc, state, bundle, root, cgroup
        self.serial = 0
        self.lock = threading.Lock()

    def argv(self, bundle: str, cid: str) -> List[str]:
        return [self.runsc, f"--root={self.state}/{self.root}", "--platform=ptrace", "--network=none",
                "run", "--bundle", bundle, cid]

    def bundles(self, cycles: int) -> List[Tuple[str, str]]:
        """(bundle, id) per cycle, made before the clock starts."""
        out = []
        with open(os.path.join(self.bundle, "config.json")) as f:
            config = json.load(f)
        for _ in range(cycles):
            self.serial += 1
            cid = f"{os.path.basename(self.bundle)}-{self.serial}"
            if not self.cgroup:
                out.append((self.bundle, cid))
                continue
            d = os.path.join(self.state, "cycle-bundles", cid)
            os.makedirs(d)
            config["linux"]["cgroupsPath"] = f"/{self.cgroup}/{cid}"
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(config, f)
            out.append((d, cid))
        return out

    def rate(self, cycles: int, concurrency: int) -> Tuple[float, int, float]:
        """(cycles/s, failures, CPU ms per cycle)."""
        todo = self.bundles(cycles)
        failures = [0]

        def worker() -> None:
            while True:
                with self.lock:
                    if not todo:
                        return
                    bundle, cid = todo.pop()
                r = subprocess.run(self.argv(bundle, cid), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
                if r.returncode != 0:
                    with self.lock:
                        failures[0] += 1
                    sys.stderr.write(f"raw cycle {cid}: exit {r.returncode}: {r.stderr[-300:]!r}\n")

        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cg0, self0 = (cgroup_ns(self.cgroup), self_ns()) if self.cgroup else (0, 0)
        t = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        elapsed = time.perf_counter() - t
        if self.cgroup:  # the bench's own threads are in the cgroup too: not the cycles'
            cpu = (cgroup_ns(self.cgroup) - cg0 - (self_ns() - self0)) / 1e6 / cycles
            shutil.rmtree(os.path.join(self.state, "cycle-bundles"), ignore_errors=True)
        else:
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) * 1000 / cycles
        return cycles / elapsed, failures[0], cpu


# --- episodes ---------------------------------------------------------------------------------

STEPS = ("acquire", "run", "finish")


async def one_episode(ex, pool, n: int, out_dir: str) -> Dict[str, object]:
    t = [time.perf_counter()]
    rec: Dict[str, object] = {"ok": False, "complete": False, "hidden": False}
    env = await pool.acquire.aio()
    t.append(time.perf_counter())
    try:
        result = await env.run.aio(ex.AGENT, user="1001:1001", env={"EPISODE": str(n)}, timeout=60)
        t.append(time.perf_counter())
        log = os.path.join(out_dir, f"episode-{n:04d}.jsonl")
        report = await env.finish.aio(log)  # terminate, export, rm in one request
        t.append(time.perf_counter())
        rec.update(ok=result.exit_code == 0, hidden="pid1=hidden" in result.stdout,
                   complete=bool(report["complete"]), dropped=int(report.get("dropped", 0)))
        os.unlink(log)
    finally:
        await env.close.aio()  # a no-op after finish
    rec["steps"] = {s: t[i + 1] - t[i] for i, s in enumerate(STEPS) if i + 1 < len(t)}
    rec["total"] = t[-1] - t[0]
    return rec


async def wait_warm(pool, size: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while (await pool.inspect.aio()).get("warm", 0) < size:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the pool did not refill to {size} in {timeout:.0f} s")
        await asyncio.sleep(0.05)


async def episodes(ex, n: int, concurrency: int, template: str, out_dir: str,
                   sampled: Optional[Tuple[str, Optional[str]]] = None) -> Dict[str, object]:
    from sandweave import Pool

    pool = await Pool.create.aio(template, size=concurrency, hidepid=2, audit=True)
    sem = asyncio.Semaphore(concurrency)
    failures: List[str] = []

    async def one(i: int) -> Optional[Dict[str, object]]:
        async with sem:
            try:
                return await one_episode(ex, pool, i, out_dir)
            except Exception as e:  # counted, and the batch goes on
                failures.append(f"{type(e).__name__}: {e}")
                return None

    try:
        await wait_warm(pool, concurrency)
        await asyncio.sleep(0.3)
        sampler = Sampler(*sampled) if sampled else None
        t = time.perf_counter()
        results = await asyncio.gather(*[one(i) for i in range(n)])
        elapsed = time.perf_counter() - t
        cpu = None
        if sampler:
            await wait_warm(pool, concurrency)  # one create per episode in the window
            await asyncio.sleep(0.3)
            cpu = sampler.stop()
    finally:
        await pool.close.aio()
    done = [r for r in results if r]
    bad = [r for r in done if not (r["ok"] and r["complete"] and r["hidden"])]
    for f in failures[:3]:
        sys.stderr.write(f"episode failed: {f}\n")
    return {
        "rate": n / elapsed,
        "failures": len(failures) + len(bad),
        "incomplete": sum(1 for r in done if not r["complete"]),
        "dropped": sum(int(r.get("dropped", 0)) for r in done),
        "acquire": [r["steps"]["acquire"] for r in done],
        "steps": {s: [r["steps"][s] for r in done if s in r["steps"]] for s in STEPS},
        "total": [r["total"] for r in done],
        "cpu": cpu,
    }


def warm_acquires(template: str, k: int) -> List[float]:
    from sandweave import Pool

    out = []
    with Pool(template, size=4, hidepid=2, audit=True) as pool:
        for _ in range(k):
            asyncio.run(wait_warm(pool, 4))
            time.sleep(0.2)  # the last refilled member has finished booting
            t = time.perf_counter()
            env = pool.acquire()
            out.append(time.perf_counter() - t)
            env.close()
    return out


def with_bystanders(n: int, fn):
    """fn() while n other sandboxes (plain, not of the pool) are alive."""
    from sandweave import Sandbox

    others = [Sandbox.create("base") for _ in range(n)]
    try:
        return fn()
    finally:
        for o in others:
            o.close()


def creates(template: str, k: int) -> List[float]:
    from sandweave import Sandbox

    out = []
    for _ in range(k):
        t = time.perf_counter()
        env = Sandbox.create(template, hidepid=2, audit=True)
        out.append(time.perf_counter() - t)
        env.close()
    return out


def busy_ms() -> float:
    """The whole machine's CPU time so far, idle, iowait and steal left out."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4] - v[7]) * TICK_NS / 1e6


STEP_ROWS = [
    ("raw", "raw /bin/true cycle"),
    ("agent", "raw agent cycle"),
    ("life", "sandbox: create + rm"),
    ("run", "  + the agent script"),
    ("end", "  + export + terminate"),
    ("pool", "pool episode, its refill included"),
]


def step_costs(ex, raw: "Raw", raw_agent: "Raw", template: str, out_dir: str, n: int) -> Dict[str, float]:
    """CPU ms per operation of each STEP_ROWS row, one operation at a time."""
    from sandweave import Pool, Sandbox

    log = os.path.join(out_dir, "steps.jsonl")

    def episode_steps(env, upto: str) -> None:
        """The episode's steps up to `upto` ("life": none), then rm."""
        try:
            if upto in ("run", "end"):
                if env.run(ex.AGENT, user="1001:1001", env={"EPISODE": "1"}, timeout=60).exit_code != 0:
                    raise RuntimeError("the agent script failed")
            if upto == "end":
                if not env.audit_log(log)["complete"]:
                    raise RuntimeError("incomplete audit export")
                env.terminate()
        finally:
            env.close()

    def sandbox(upto: str) -> None:
        episode_steps(Sandbox.create(template, hidepid=2, audit=True), upto)

    def measure(op) -> float:
        op()  # warm
        time.sleep(0.3)
        t = busy_ms()
        for _ in range(n):
            op()
        time.sleep(0.3)  # what a teardown leaves running
        return (busy_ms() - t) / n

    def warm(pool) -> None:
        deadline = time.monotonic() + 120
        while pool.inspect().get("warm", 0) < 1:
            if time.monotonic() > deadline:
                raise RuntimeError("the pool did not refill in 120 s")
            time.sleep(0.05)  # an inspect costs the machine about 0.3 ms

    def pool_episodes() -> float:
        pool = Pool.create(template, size=1, hidepid=2, audit=True)
        try:
            warm(pool)

            def one() -> None:
                episode_steps(pool.acquire(), "end")
                warm(pool)

            return measure(one)
        finally:
            pool.close()

    return {
        "raw": measure(lambda: raw.rate(1, 1)),
        "agent": measure(lambda: raw_agent.rate(1, 1)),
        "life": measure(lambda: sandbox("life")),
        "run": measure(lambda: sandbox("run")),
        "end": measure(lambda: sandbox("end")),
        "pool": pool_episodes(),
    }


# --- main -------------------------------------------------------------------------------------


def enter_cgroup() -> Optional[str]:
    """Moves this process into a cpuacct cgroup of its own; its children follow."""
    name = f"sw-bench-episodes-{os.getpid()}"
    try:
        os.mkdir(f"{CPUACCT}/{name}")
        with open(f"{CPUACCT}/{name}/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
        return name
    except OSError as e:
        sys.stderr.write(f"no cpuacct cgroup ({e}): totals from sampling only\n")
        return None


def leave_cgroup(name: Optional[str]) -> None:
    if not name:
        return
    # Every process still in it goes back to the root: the SDK's serve child
    # lives until this interpreter exits, a refill may still be winding down.
    for _ in range(50):
        try:
            with open(f"{CPUACCT}/{name}/cgroup.procs") as f:
                pids = f.read().split()
        except OSError:
            return
        for pid in pids:
            try:
                with open(f"{CPUACCT}/cgroup.procs", "w") as f:
                    f.write(pid)
            except OSError:
                pass  # exited meanwhile
        try:
            os.rmdir(f"{CPUACCT}/{name}")
            break
        except OSError:
            time.sleep(0.1)
    # The raw cycles' cgroups were made under it in every hierarchy runsc uses;
    # runsc removed each cycle's own, the parents are left.
    for parent in glob.glob(f"{os.path.dirname(CPUACCT)}/*/{name}"):
        try:
            os.rmdir(parent)
        except OSError as e:
            sys.stderr.write(f"{parent}: not removed: {e}\n")


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--sample":
        return sampler_main(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--episodes", type=int, default=40, help="episodes per rate sample (default 40)")
    ap.add_argument("--cycles", type=int, default=40, help="raw cycles per rate sample (default 40)")
    ap.add_argument("--reps", type=int, default=3, help="rate samples per concurrency (default 3)")
    ap.add_argument("--acquires", type=int, default=30, help="timed warm acquires (default 30)")
    ap.add_argument("--breakdown", type=int, default=24, help="episodes per breakdown batch (default 24)")
    ap.add_argument("--steps", type=int, default=8,
                    help="operations per row of the CPU-per-step table, one at a time (default 8; 0: no table)")
    ap.add_argument("--bystanders", type=int, default=0,
                    help="time the warm acquires again with this many other sandboxes alive (default 0: not)")
    ap.add_argument("--template", default="base")
    ap.add_argument("--plain-runsc", default="/usr/bin/runsc",
                    help="plain gVisor, what a user without sandweave runs: its /bin/true cycles are a second "
                         "baseline (default /usr/bin/runsc, Debian's; '' for none)")
    args = ap.parse_args()
    binary = os.environ.get("SANDWEAVE_BIN") or os.environ.get("SANDWEAVE") or os.path.join(top, "build", "sandweave")
    if not os.access(binary, os.X_OK):
        print(f"sandweave binary {binary} not found (set SANDWEAVE_BIN or SANDWEAVE)", file=sys.stderr)
        return 1
    os.environ["SANDWEAVE_BIN"] = binary
    state = tempfile.mkdtemp(prefix="sw-bench-ep.", dir="/var/tmp")
    os.environ["SANDWEAVE_STATE_DIR"] = state
    doctor = json.loads(subprocess.run([binary, "doctor", "--json"], capture_output=True, text=True).stdout)
    runsc = [c for c in doctor["checks"] if c["name"] == "runsc"][0]["detail"].split(":")[0]
    ex = load_example()
    cgroup = enter_cgroup()
    out_dir = tempfile.mkdtemp(prefix="sw-bench-ep-logs.", dir="/var/tmp")
    load0 = loadavg()
    try:
        subprocess.run([binary, "image", "build", args.template], check=True, capture_output=True)
        rootfs = os.path.join(state, "images", args.template, "rootfs")
        raw = Raw(runsc, state, make_raw_bundle(runsc, state, rootfs), cgroup=cgroup)
        raw_agent = Raw(runsc, state, make_raw_bundle(runsc, state, rootfs, ex.AGENT), cgroup=cgroup)
        plain = None
        if args.plain_runsc and os.access(args.plain_runsc, os.X_OK) and \
                not os.path.samefile(args.plain_runsc, runsc):
            plain = Raw(args.plain_runsc, state, os.path.join(state, "raw-bundle"), "plain-runsc", cgroup)
            plain.rate(2, 1)
        print(f"sandweave {binary}; runsc {runsc}; plain runsc {plain.runsc if plain else 'none'}; "
              f"template {args.template}", file=sys.stderr)
        print(f"load average at start: {load0} on {os.cpu_count()} cpus", file=sys.stderr)
        raw.rate(4, 1)  # warm: the runtime's binary and the image in the page cache
        raw_agent.rate(2, 1)
        asyncio.run(episodes(ex, 4, 1, args.template, out_dir))

        rates: Dict[int, Dict[str, list]] = {
            c: {"raw": [], "ep": [], "rawcpu": [], "agent": [], "agentcpu": [], "plain": [], "plaincpu": []}
            for c in CONCURRENCY}
        fails = {"raw": 0, "ep": 0, "incomplete": 0, "dropped": 0}
        acq_in_episode: List[float] = []
        for rep in range(args.reps):
            for c in CONCURRENCY:
                r, rf, rc = raw.rate(args.cycles, c)
                a, af, ac = raw_agent.rate(args.cycles, c)
                if plain:
                    p, pf, pc = plain.rate(args.cycles, c)
                    rates[c]["plain"].append(p)
                    rates[c]["plaincpu"].append(pc)
                    fails["raw"] += pf
                e = asyncio.run(episodes(ex, args.episodes, c, args.template, out_dir))
                rates[c]["raw"].append(r)
                rates[c]["rawcpu"].append(rc)
                rates[c]["agent"].append(a)
                rates[c]["agentcpu"].append(ac)
                rates[c]["ep"].append(e["rate"])
                fails["raw"] += rf + af
                fails["ep"] += e["failures"]
                fails["incomplete"] += e["incomplete"]
                fails["dropped"] += e["dropped"]
                acq_in_episode += e["acquire"]
                print(f"rep {rep + 1} concurrency {c}: raw {r:.2f}/s, raw agent {a:.2f}/s, episodes {e['rate']:.2f}/s "
                      f"(load {loadavg()})", file=sys.stderr)

        print("warm acquires...", file=sys.stderr)
        acq = warm_acquires(args.template, args.acquires)
        acq_by: List[float] = []
        if args.bystanders:
            print(f"warm acquires, {args.bystanders} other sandboxes alive...", file=sys.stderr)
            acq_by = with_bystanders(args.bystanders, lambda: warm_acquires(args.template, args.acquires))
        print("creates, measured alone...", file=sys.stderr)
        cr = creates(args.template, 5)
        print("breakdown batches...", file=sys.stderr)
        brk = {c: asyncio.run(episodes(ex, args.breakdown, c, args.template, out_dir, (state, cgroup)))
               for c in CONCURRENCY}
        raw_brk: Dict[int, Dict[str, int]] = {}
        for c in CONCURRENCY:  # the same script on the bare runtime, process by process
            sampler = Sampler(state, cgroup)
            _, _, cycle_cpu = raw_agent.rate(args.breakdown, c)
            time.sleep(0.1)
            raw_brk[c] = sampler.stop()
            # The cycles' cgroups under the bench's (getrusage without one: it misses the stubs).
            raw_brk[c]["total_ns"] = int(cycle_cpu * 1e6 * args.breakdown) + raw_brk[c].get("sdk", 0)
        steps: Dict[str, List[float]] = {k: [] for k, _ in STEP_ROWS}
        for rep in range(args.reps if args.steps else 0):
            print(f"CPU per step, round {rep + 1}...", file=sys.stderr)
            for k, v in step_costs(ex, raw, raw_agent, args.template, out_dir, args.steps).items():
                steps[k].append(v)
        load1 = loadavg()
    finally:
        remove_state(binary, state, runsc, args.plain_runsc)
        shutil.rmtree(out_dir, ignore_errors=True)
        leave_cgroup(cgroup)

    med = statistics.median
    ms = lambda v: f"{v * 1000:.1f}"  # noqa: E731
    print(f"load average: {load0} at start, {load1} at end, {os.cpu_count()} cpus")
    print()
    print(f"rates, median of {args.reps} (raw: {args.cycles} cycles, episodes: {args.episodes} per sample)")
    print(f"{'concurrency':<12} {'raw cycles/s':>13} {'episodes/s':>11} {'ratio':>6} {'target':>7}  per-rep ratios"
          f"   {'raw agent/s':>12} {'ratio':>6}")
    for c in CONCURRENCY:
        r, e, a = med(rates[c]["raw"]), med(rates[c]["ep"]), med(rates[c]["agent"])
        per = " ".join(f"{x / y:.2f}" for x, y in zip(rates[c]["ep"], rates[c]["raw"]))
        print(f"{c:<12} {r:>13.2f} {e:>11.2f} {e / r:>6.2f} {'>= 0.90':>7}  {per:<14} {a:>12.2f} {e / a:>6.2f}")
    if rates[CONCURRENCY[0]]["plain"]:
        print(f"against plain gVisor ({args.plain_runsc}, /bin/true cycles):")
        for c in CONCURRENCY:
            p, e = med(rates[c]["plain"]), med(rates[c]["ep"])
            per = " ".join(f"{x / y:.2f}" for x, y in zip(rates[c]["ep"], rates[c]["plain"]))
            print(f"{c:<12} {p:>13.2f} {e:>11.2f} {e / p:>6.2f} {'>= 0.90':>7}  {per:<14}")
    print(f"raw cycle failures: {fails['raw']}; episode failures: {fails['ep']} "
          f"(audit export incomplete: {fails['incomplete']}, dropped events: {fails['dropped']})")
    print(f"pool acquire, warm (settled pool of 4, {len(acq)}): p50 {ms(med(acq))} ms, p99 {ms(pct(acq, 99))} ms "
          f"(target p50 < 2 ms, p99 < 10 ms)")
    if acq_by:
        print(f"pool acquire, warm, {args.bystanders} other sandboxes alive ({len(acq_by)}): "
              f"p50 {ms(med(acq_by))} ms, p99 {ms(pct(acq_by, 99))} ms")
    print(f"pool acquire inside the episode runs ({len(acq_in_episode)}): p50 {ms(med(acq_in_episode))} ms, "
          f"p99 {ms(pct(acq_in_episode, 99))} ms")
    print(f"create (hidepid 2, audit), measured alone: median {ms(med(cr))} ms")
    print()
    print(f"wall time per step, breakdown batches of {args.breakdown} episodes (client side, ms)")
    hdr = "".join(f"{'c=' + str(c) + ' median':>14}{'mean':>8}{'share':>7}" for c in CONCURRENCY)
    print(f"{'step':<22}{hdr}")
    for s in STEPS + ("episode",):
        row = f"{s:<22}"
        for c in CONCURRENCY:
            v = brk[c]["total"] if s == "episode" else brk[c]["steps"][s]
            share = statistics.mean(v) / statistics.mean(brk[c]["total"])
            row += f"{ms(med(v)):>14}{ms(statistics.mean(v)):>8}{share * 100:>6.0f}%"
        print(row)
    print(f"{'create (background)':<22}{ms(med(cr)):>14}  (measured alone; the pool refill makes one per episode)")
    print()
    print("CPU per episode by process, breakdown batches (ms; window = batch + pool refilled), "
          "and per raw agent cycle (the same script on the bare runtime)")
    print(f"{'process':<46}" + "".join(f"{'c=' + str(c):>10}{'share':>7}{'raw agent':>11}" for c in CONCURRENCY))

    def per_process(cpu: Optional[Dict[str, int]], n: int) -> Dict[str, float]:
        cpu = cpu or {}
        rows = {k: cpu.get(k, 0) / 1e6 / n for k, _ in PROCESS_ROWS}
        sandbox_cg = cpu.get("sandbox_cgroups", 0) / 1e6 / n
        bench_cg = cpu.get("bench_cgroup", 0) / 1e6 / n
        sampled = sum(rows.values())
        if "total_ns" in cpu:
            total = cpu["total_ns"] / 1e6 / n
        else:
            total = sandbox_cg + bench_cg if cgroup else sampled
        rows["unattributed"] = max(0.0, total - sampled)
        rows["total"] = total
        return rows

    per = {c: per_process(brk[c]["cpu"], args.breakdown) for c in CONCURRENCY}
    per_raw = {c: per_process(raw_brk[c], args.breakdown) for c in CONCURRENCY}
    labels = PROCESS_ROWS + [("unattributed", "short-lived / exited between samples"),
                             ("total", "total (cgroups)" if cgroup else "total (getrusage; no cgroup)")]
    for k, label in labels:
        row = f"{label:<46}"
        for c in CONCURRENCY:
            v = per[c][k]
            row += f"{v:>10.1f}{v / per[c]['total'] * 100 if per[c]['total'] else 0:>6.0f}%{per_raw[c][k]:>11.1f}"
        print(row)
    rc = {c: med(rates[c]["rawcpu"]) for c in CONCURRENCY}
    ac = {c: med(rates[c]["agentcpu"]) for c in CONCURRENCY}
    print(f"{'raw runsc run cycle, for comparison':<46}" + "".join(f"{rc[c]:>10.1f}{'':>7}" for c in CONCURRENCY))
    print(f"{'raw agent cycle (the same script, bare runsc)':<46}" + "".join(f"{ac[c]:>10.1f}{'':>7}" for c in CONCURRENCY))
    if rates[CONCURRENCY[0]]["plaincpu"]:
        pc = {c: med(rates[c]["plaincpu"]) for c in CONCURRENCY}
        print(f"{'plain gVisor /bin/true cycle':<46}" + "".join(f"{pc[c]:>10.1f}{'':>7}" for c in CONCURRENCY))
    if args.steps:
        print()
        print(f"CPU per step, one at a time (whole machine, ms; median of {args.reps} rounds of {args.steps})")
        m = {k: med(v) for k, v in steps.items()}
        adds = {"agent": ("raw", "the script as PID 1"), "life": ("raw", "a sandbox's life"),
                "run": ("life", "the script as a command"), "end": ("run", "export + terminate"),
                "pool": ("end", "the pool instead of create")}
        print(f"{'':<40}{'median':>8}{'rounds':>12}{'adds':>8}")
        for k, label in STEP_ROWS:
            spread = f"{min(steps[k]):.0f}-{max(steps[k]):.0f}"
            extra = f"{m[k] - m[adds[k][0]]:>+8.0f}  {adds[k][1]}" if k in adds else ""
            print(f"{label:<40}{m[k]:>8.0f}{spread:>12}{extra}")
        print("(a step's figure is the difference of two medians: read it against the rounds' spread)")
    return 0 if fails["ep"] == 0 and fails["raw"] == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
