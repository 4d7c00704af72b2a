#!/usr/bin/env bash
# create and `run -- true` through weave:// against the same verbs locally,
# interleaved, each a whole CLI invocation (process start, connection and
# handshake included); then `pool acquire` from a warm pool of two on each
# side, over one open SDK connection and as a whole CLI invocation (each rep
# removes what it got and waits, untimed, until the pool is warm again). Starts the one-machine Weave (scripts/weave-controller.sh)
# in a directory of its own and stops it at the end.
# Usage: bench/weave.sh [REPS]   (default 10; acquire 2 x REPS; needs root; a few minutes)
# SANDWEAVE_BENCH_PORT and SANDWEAVE_BENCH_PORT_BASE move the controller
# (7743) and Slurm's daemons (17700) away from a cluster already there.
set -euo pipefail
reps="${1:-10}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
work="$(mktemp -d /tmp/sw-bench-weave.XXXXXX)"
chmod 0711 "$work"
ctl=("$top/scripts/weave-controller.sh" --dir "$work/cluster" --port "${SANDWEAVE_BENCH_PORT:-7743}"
    --port-base "${SANDWEAVE_BENCH_PORT_BASE:-17700}" --sandweave "$sw")
local_state="$work/local"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio, weave_bench_cleanup
cleanup() { weave_bench_cleanup "$work" "$sw" "$local_state" "${ctl[@]}"; }
trap cleanup EXIT
# A start that failed must not leave "weave" measuring the local host.
settings="$("${ctl[@]}" start 2>"$work/start.err")" || { cat "$work/start.err" >&2; exit 1; }
eval "$settings"
now() { date +%s%N; }
ms() { echo $((($(now) - $1) / 1000000)); }
locally() { env -u SANDWEAVE_HOST SANDWEAVE_STATE_DIR="$local_state" "$sw" "$@"; }
# Warm up: the first create on each side builds the base image.
locally create --template base >/dev/null
for _ in 1 2 3; do "$sw" rm -f "$("$sw" create --template base)" >/dev/null; done
: >"$work/cw"; : >"$work/cl"; : >"$work/rw"; : >"$work/rl"
for _ in $(seq "$reps"); do
    t=$(now); wid=$("$sw" create --template base); ms "$t" >>"$work/cw"
    t=$(now); lid=$(locally create --template base); ms "$t" >>"$work/cl"
    t=$(now); "$sw" run "$wid" -- true; ms "$t" >>"$work/rw"
    t=$(now); locally run "$lid" -- true; ms "$t" >>"$work/rl"
    "$sw" rm -f "$wid" >/dev/null  # 12 slots: each rep gives its own back
    locally rm -f "$lid" >/dev/null
done
printf 'load: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-22s %8s %8s\n' "median of $reps, ms" local weave
printf '%-22s %8s %8s\n' "create --template base" "$(median <"$work/cl")" "$(median <"$work/cw")"
printf '%-22s %8s %8s\n' "run ID -- true" "$(median <"$work/rl")" "$(median <"$work/rw")"

PYTHONPATH="$top/python" SANDWEAVE_BIN="$sw" python3 - "$SANDWEAVE_HOST" "$local_state" $((reps * 2)) <<'PY'
import os, subprocess, sys, time
from sandweave import Pool
host, local_state, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
sw = os.environ["SANDWEAVE_BIN"]
local_env = {k: v for k, v in os.environ.items() if k != "SANDWEAVE_HOST"}
local_env["SANDWEAVE_STATE_DIR"] = local_state
sides = {"local": (Pool("base", size=2, connection="local", state_dir=local_state), local_env),
         "weave": (Pool("base", size=2, connection=host), dict(os.environ))}
sdk = {k: [] for k in sides}
cli = {k: [] for k in sides}
def warm(p):
    deadline = time.time() + 60
    while p.inspect()["warm"] < p.size and time.time() < deadline:
        time.sleep(0.05)
for _ in range(reps):
    for k, (p, env) in sides.items():
        warm(p)
        t = time.perf_counter()
        s = p.acquire()
        sdk[k].append((time.perf_counter() - t) * 1000)
        s.close()
        warm(p)
        t = time.perf_counter()
        got = subprocess.run([sw, "pool", "acquire", p.name], env=env, capture_output=True, text=True, check=True)
        cli[k].append((time.perf_counter() - t) * 1000)
        subprocess.run([sw, "rm", "-f", got.stdout.strip()], env=env, capture_output=True, check=True)
for p, _ in sides.values():
    p.close()
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]
for what, t in (("pool acquire, SDK", sdk), ("pool acquire, CLI", cli)):
    print(f"{what} ({reps} reps) p50/p99 ms: local {pct(t['local'], .5):.1f}/{pct(t['local'], .99):.1f}, "
          f"weave {pct(t['weave'], .5):.1f}/{pct(t['weave'], .99):.1f}")
PY
