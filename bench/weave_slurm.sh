#!/usr/bin/env bash
# The Slurm facts Weave's design rests on, measured on the one-machine cluster
# (scripts/weave-cluster.sh) in a directory of its own:
#   - seconds from `weave-cluster.sh start` to three idle nodes (cold, then warm)
#   - `salloc --no-shell --gres=sbx:1` grant latency, `scancel` latency
#   - `srun --jobid J --overlap true` latency
#   - `sandweave serve --stdio` through `srun --overlap` vs started locally:
#     time to the hello answer, sandbox.ls and `sandbox.run -- true` round trips
#   - where 13 one-slot allocations land, and how soon the 13th starts after
#     one of the others is cancelled
#   - what `squeue --json` carries (22.05: scontrol has no --json)
#   - whether processes started by a step survive the step and `scancel`
#     (a child, a double-forked daemon, a sandweave sandbox)
#   - how long after `kill -9` of a slurmd its node shows not responding / DOWN,
#     what becomes of the job on it, and how soon `start` brings it back
#   - a job whose time limit passes: when --signal, TERM and KILL arrive
# Usage: bench/weave_slurm.sh [REPS]   (default 20; needs root; about 2.5 minutes)
set -euo pipefail
reps="${1:-20}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
cluster="$top/scripts/weave-cluster.sh"
py=/usr/bin/python3
[[ -x "$py" ]] || py="$(command -v python3)"
export PYTHONDONTWRITEBYTECODE=1
dir="$(mktemp -d /tmp/sw-bench-weave.XXXXXX)"
base="${WEAVE_BENCH_PORT_BASE:-17200}"
cleanup() {
    "$cluster" --dir "$dir" --port-base "$base" stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT

secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
t0="$(date +%s.%N)"
"$cluster" --dir "$dir" --port-base "$base" --slurmd-timeout 10 start >/dev/null 2>&1
cold="$(secs "$t0")"
t0="$(date +%s.%N)"
"$cluster" --dir "$dir" --port-base "$base" --slurmd-timeout 10 start >/dev/null 2>&1
warm="$(secs "$t0")"
printf 'start to 3 idle nodes: cold %ss, already running %ss (load %s)\n' "$cold" "$warm" "$(cut -d' ' -f1-3 /proc/loadavg)"
eval "$("$cluster" --dir "$dir" env)"

"$py" - "$sw" "$dir" "$reps" "$top/tests/integration" "$cluster" "$base" <<'PY'
import json, os, re, signal, statistics, subprocess, sys, time

sw, cdir, reps, libdir, cluster, base = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
sys.path.insert(0, libdir)
from rpc_client import Client

scratch = os.path.join(cdir, "bench")
os.makedirs(scratch, exist_ok=True)


def sh(*argv, check=True):
    return subprocess.run(argv, capture_output=True, text=True, check=check)


def ms(f):
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1000


def summary(name, xs):
    xs = sorted(xs)
    p90 = xs[min(len(xs) - 1, int(len(xs) * 0.9))]
    print(f"{name}: median {statistics.median(xs):.1f} ms, p90 {p90:.1f} ms, min {xs[0]:.1f} ms (n={len(xs)})")


def salloc(*extra, gres="--gres=sbx:1"):
    out = sh("salloc", "--no-shell", gres, "-n1", "--mem=256M", "--time=10", *extra).stderr
    return int(re.search(r"Granted job allocation (\d+)", out).group(1))


def job(jid):
    # Slurm 22.05: scontrol has no --json, and squeue --json ignores -j (it lists every job).
    return next((x for x in json.loads(sh("squeue", "--json").stdout)["jobs"] if x["job_id"] == jid),
                {"job_state": "gone (purged after MinJobAge)", "nodes": ""})


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


# --- a background job that runs into its time limit -----------------------------
# 1 minute is the smallest limit Slurm keeps (it stores minutes); --signal asks
# for USR1 20 s before the end.
limit_log = os.path.join(scratch, "limit.log")
lj = salloc("--time=1", "--signal=USR1@20", "-J", "limit", "-w", "w1", gres="--gres=none")
lj_start = time.time()
logger = (f'log() {{ echo "$1 $(date +%s.%N)" >>{limit_log}; }}; '
          'trap "log USR1" USR1; trap "log TERM" TERM; trap "log CONT" CONT; '
          'log start; while :; do sleep 0.2; done')
limit_srun = subprocess.Popen(["srun", "--jobid", str(lj), "--overlap", "bash", "-c", logger],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

# --- allocation and step latency ------------------------------------------------
grant, cancel = [], []
for _ in range(reps):
    box = {}
    grant.append(ms(lambda: box.setdefault("j", salloc("-J", "lat"))))
    cancel.append(ms(lambda: sh("scancel", str(box["j"]))))
summary("salloc --no-shell --gres=sbx:1 -n1 --mem=256M (granted)", grant)
summary("scancel of an allocation", cancel)

j = salloc("-J", "steps")
summary("srun --jobid J --overlap true", [ms(lambda: sh("srun", "--jobid", str(j), "--overlap", "true")) for _ in range(reps)])
summary("srun --jobid J --overlap -u true", [ms(lambda: sh("srun", "--jobid", str(j), "--overlap", "-u", "true")) for _ in range(reps)])
summary("scontrol show job -o J", [ms(lambda: sh("scontrol", "show", "job", "-o", str(j))) for _ in range(reps)])
summary("squeue --json", [ms(lambda: sh("squeue", "--json")) for _ in range(reps)])

# --- sandweave serve --stdio through srun vs locally ----------------------------
node = job(j)["nodes"]
state = os.environ[f"SANDWEAVE_WEAVE_STATE_{node}"]
have_runtime = sh(sw, "--state-dir", state, "image", "build", "base", check=False).returncode == 0


def spawn(prefix):
    cmd = [*prefix, sw, "--state-dir", state, "serve", "--stdio"]
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return Client(p.stdout, p.stdin, " ".join(prefix) or "local", proc=p)


srun_prefix = ["srun", "--jobid", str(j), "--overlap", "-u"]
for name, prefix in (("local", []), ("srun --overlap -u", srun_prefix)):
    hello, conns = [], []
    for _ in range(max(5, reps // 2)):
        box = {}
        hello.append(ms(lambda: box.setdefault("c", spawn(prefix)).hello()))
        conns.append(box["c"])
    summary(f"serve --stdio {name}: spawn to hello answer", hello)
    c = conns[0]
    summary(f"serve --stdio {name}: sandbox.ls round trip", [ms(lambda: c.call("sandbox.ls")) for _ in range(reps)])
    for x in conns:
        x.close()

if have_runtime:
    sid = sh(sw, "--state-dir", state, "create").stdout.strip()
    local, remote = spawn([]), spawn(srun_prefix)
    local.hello()
    remote.hello()
    a, b = [], []
    for _ in range(reps):  # interleaved
        a.append(ms(lambda: local.run(sid, ["true"])))
        b.append(ms(lambda: remote.run(sid, ["true"])))
    summary("sandbox.run -- true over local serve --stdio", a)
    summary("sandbox.run -- true over srun --overlap serve --stdio", b)
    print(f"  difference of medians: {statistics.median(b) - statistics.median(a):+.1f} ms")
    local.close()
    remote.close()
    sh(sw, "--state-dir", state, "rm", "-f", sid, check=False)
else:
    print("sandbox.run through srun: not measured (no runtime or base image here)")
sh("scancel", str(j))

# --- what outlives a step and scancel ---------------------------------------------
j = salloc("-J", "escape")
node = job(j)["nodes"]
state = os.environ[f"SANDWEAVE_WEAVE_STATE_{node}"]
pidfile = os.path.join(scratch, "pids")
starter = (f"sleep 1000 & echo child $! >>{pidfile}; "
           f"setsid -f sh -c 'echo daemon $$ >>{pidfile}; exec sleep 1000'; "
           "sleep 0.3; wait")
step = subprocess.Popen(["srun", "--jobid", str(j), "--overlap", "bash", "-c", starter],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(1.5)
pids = dict(line.split() for line in open(pidfile))
pids = {k: int(v) for k, v in pids.items()}
sid = None
if have_runtime:
    sid = sh("srun", "--jobid", str(j), "--overlap", sw, "--state-dir", state, "create", check=False).stdout.strip() or None
step.send_signal(signal.SIGINT)  # srun: cancels the step
time.sleep(0.5)
step.send_signal(signal.SIGINT)
step.wait()
time.sleep(1)


def sandbox_state():
    if not sid:
        return "n/a"
    out = sh(sw, "--state-dir", state, "--json", "inspect", sid, check=False).stdout
    try:
        return json.loads(out).get("state", "?")
    except ValueError:
        return "gone"


print(f"after the step is cancelled: child {'alive' if alive(pids['child']) else 'killed'}, "
      f"double-forked daemon {'alive' if alive(pids['daemon']) else 'killed'}, "
      f"sandbox created by a step: {sandbox_state()}")
sh("scancel", str(j))
time.sleep(2)
print(f"after scancel of the allocation: double-forked daemon {'alive' if alive(pids['daemon']) else 'killed'}, "
      f"sandbox: {sandbox_state()}")
for p in pids.values():
    if alive(p):
        os.kill(p, signal.SIGKILL)
if sid:
    sh(sw, "--state-dir", state, "rm", "-f", sid, check=False)

# --- 13 one-slot allocations on 3 x 4 slots --------------------------------------
procs = [subprocess.Popen(["salloc", "--no-shell", "--gres=sbx:1", "-n1", "--mem=256M", "--time=10", "-J", f"slot{i}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(13)]
deadline = time.time() + 20
while time.time() < deadline and sum(p.poll() is not None for p in procs) < 12:
    time.sleep(0.05)
q = json.loads(sh("squeue", "--json").stdout)["jobs"]
slots = [x for x in q if x["name"].startswith("slot")]
per_node = {}
for x in slots:
    if x["job_state"] == "RUNNING":
        per_node[x["nodes"]] = per_node.get(x["nodes"], 0) + 1
pending = [x for x in slots if x["job_state"] == "PENDING"]
print(f"13 allocations: running per node {dict(sorted(per_node.items()))}, pending {len(pending)} "
      f"(reason {pending[0]['state_reason'] if pending else '-'})")
keys = sorted(slots[0].keys())
print(f"squeue --json: {len(keys)} fields per job, among them " + ", ".join(
    k for k in ("job_id", "name", "comment", "job_state", "state_reason", "nodes", "tres_per_node",
                "time_limit", "start_time", "end_time", "user_name", "partition") if k in keys))
print(f"  e.g. tres_per_node={slots[0].get('tres_per_node')!r} time_limit={slots[0].get('time_limit')!r}")
waiting = next(p for p in procs if p.poll() is None)
victim = next(x for x in slots if x["job_state"] == "RUNNING")["job_id"]
t = time.perf_counter()
sh("scancel", str(victim))
waiting.wait(timeout=30)
print(f"13th allocation granted {(time.perf_counter() - t) * 1000:.0f} ms after scancel of a running one")
for p in procs:
    p.wait()
sh("scancel", *(str(x["job_id"]) for x in slots))

# --- a comment carries the sandbox id -----------------------------------------
j = salloc("-J", "sbx-0123abcd", "--comment", "sandweave:sbx-0123abcd")
rec = job(j)
print(f"squeue --json: name={rec['name']!r} comment={rec.get('comment')!r} nodes={rec['nodes']!r}")
sh("scancel", str(j))

# --- kill one slurmd ----------------------------------------------------------------
victim_node = "w3"
j = salloc("-J", "onw3", "-w", victim_node)
pid = int(open(os.path.join(cdir, "run", f"slurmd-{victim_node}.pid")).read())
t = time.time()
os.kill(pid, signal.SIGKILL)
seen = {}
while time.time() - t < 60 and "down" not in seen:
    st = sh("sinfo", "-h", "-n", victim_node, "-o", "%t").stdout.strip()
    if st.endswith("*") and "nr" not in seen:
        seen["nr"] = time.time() - t
    if st.startswith("down"):
        seen["down"] = time.time() - t
    time.sleep(0.2)
jst = job(j)
print(f"slurmd of {victim_node} killed (SlurmdTimeout=10): not responding after {seen.get('nr', float('nan')):.1f} s, "
      f"DOWN after {seen.get('down', float('nan')):.1f} s; its job: {jst['job_state']} ({jst.get('state_reason')})")
t = time.time()
sh(cluster, "--dir", cdir, "--port-base", base, "--slurmd-timeout", "10", "start")
print(f"start again: {victim_node} idle after {time.time() - t:.1f} s")

# --- the time limit ---------------------------------------------------------------
limit_srun.wait(timeout=240)
ev = [line.split() for line in open(limit_log)]
t0 = float(next(v for k, v in ev if k == "start"))
print("a 1-minute allocation (--signal=USR1@20, KillWait=5), seconds after its step started: "
      + ", ".join(f"{k} {float(v) - t0:.1f}" for k, v in ev if k != "start")
      + f"; srun exited {limit_srun.returncode}; job state {job(lj)['job_state']}")
PY

t0="$(date +%s.%N)"
"$cluster" --dir "$dir" --port-base "$base" stop >/dev/null 2>&1
printf 'stop: %ss\n' "$(secs "$t0")"
