#!/usr/bin/env bash
# `sandweave serve` latency: medians over REPS runs (after a warm-up) of
#   sandbox.inspect          over one `serve --stdio` connection
#                            vs `sandweave inspect ID` (a CLI process per call)
#                            vs `runsc state ID` (the runtime's own cheapest query)
#   sandbox.run -- true      over the same connection
#                            vs `sandweave run ID -- true`
#                            vs `runsc exec ID /bin/true` with sandweave's flags
# all on one running sandbox, interleaved in the same run, with ratios.
# The serve side is driven from Python (tests/integration/rpc_client.py).
# Usage: bench/serve.sh [REPS]   (default 50; needs root and a built tree)
set -euo pipefail
reps="${1:-50}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
py=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
[[ -x "$py" ]] || py="$(command -v python3)"
state="$(mktemp -d /tmp/sw-bench-serve.XXXXXX)"
export SANDWEAVE_STATE_DIR="$state"
cleanup() {
  "$sw" ls --ids 2>/dev/null | xargs -r "$sw" rm >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT

"$sw" image build base >/dev/null 2>&1
id="$("$sw" create)"

"$py" - "$sw" "$state" "$id" "$reps" "$top/tests/integration" <<'PY'
import json, os, statistics, subprocess, sys, time

sw, state, sid, reps, libdir = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
sys.path.insert(0, libdir)
from rpc_client import Client

rec = json.loads(subprocess.run([sw, "--json", "inspect", sid], check=True, capture_output=True).stdout)
runsc = [rec["runsc"], *rec["runsc_flags"]]
c = Client.spawn(sw, state_dir=state)


def serve_inspect():
    c.call("sandbox.inspect", {"id": sid})


def serve_run():
    code, _, err, _ = c.run(sid, ["true"])
    assert code == 0, err


def proc(*argv):
    def f():
        subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)
    return f


cases = [
    ("inspect", "serve", serve_inspect),
    ("inspect", "cli", proc(sw, "inspect", sid)),
    ("inspect", "runsc", proc(*runsc, "state", sid)),
    ("run", "serve", serve_run),
    ("run", "cli", proc(sw, "run", sid, "--", "true")),
    ("run", "runsc", proc(*runsc, "exec", sid, "/bin/true")),
]
print("warming up...", file=sys.stderr)
for _ in range(5):
    for _, _, f in cases:
        f()
times = {(op, side): [] for op, side, _ in cases}
for _ in range(reps):  # interleaved, so drift hits every column alike
    for op, side, f in cases:
        t0 = time.perf_counter_ns()
        f()
        times[(op, side)].append(time.perf_counter_ns() - t0)
c.check()
c.close()


def med(op, side):
    return statistics.median(times[(op, side)]) / 1e6


print(f"{'median over %d runs (ms)' % reps:<28} {'serve':>8} {'CLI':>8} {'runsc':>8} {'serve/CLI':>10} {'serve/runsc':>12}")
for op, label, runsc_label in (("inspect", "sandbox.inspect", "state"), ("run", "sandbox.run -- true", "exec")):
    s, cl, r = med(op, "serve"), med(op, "cli"), med(op, "runsc")
    print(f"{label:<28} {s:8.2f} {cl:8.2f} {r:8.2f} {s / cl:10.2f} {s / r:12.2f}   (runsc {runsc_label})")
PY
