#!/usr/bin/env bash
# Where the ptrace platform's threads run (runtime/ptrace-colocate.patch):
# each guest system call is a round trip between a sentry thread and the stub
# thread it traces, cheap on one CPU and expensive across two. Two sandboxes,
# one free to use every CPU and one pinned to CPU 0 (`taskset -c 0` at
# create: its sentry, gofer and stubs inherit it), run the same commands
# ROUNDS times, interleaved; medians of the wall time, and the ratios:
#   syscalls:   `dd bs=1 count=DD_COUNT` (two system calls a byte), free vs
#               pinned. Near 1 when the tracer and its stub share a CPU; 3.2
#               on a 2-vCPU VM with stock gVisor's placement; below 1 on a
#               host where the sentry measures spreading them to be faster.
#   parallel:   PARALLEL busy loops at once vs one, in the free sandbox. Near
#               1 while the guest keeps its parallelism (needs that many CPUs).
#   dd x2:      PARALLEL of the dd at once vs one, in the free sandbox.
# Usage: bench/cpu_placement.sh [ROUNDS]   (default 5; needs root and a built tree)
# Env:   SANDWEAVE (binary), DD_COUNT (default 100000), LOOPS (busy loop
#        iterations, default 10000000), PARALLEL (default 2)
set -euo pipefail
rounds=${1:-5}
dd_count=${DD_COUNT:-100000}
loops=${LOOPS:-10000000}
parallel=${PARALLEL:-2}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sw=${SANDWEAVE:-$top/build/sandweave}
export SANDWEAVE_STATE_DIR=$(mktemp -d /tmp/sw-placement.XXXXXX)
cleanup() {
  "$sw" ls --ids 2>/dev/null | xargs -r "$sw" rm >/dev/null 2>&1 || true
  rm -rf "$SANDWEAVE_STATE_DIR"
}
trap cleanup EXIT
if (($(nproc) < 2)); then
  echo "cpu_placement: $(nproc) CPU here; the figures need at least 2" >&2
  exit 2
fi

"$sw" image build base >/dev/null
free=$("$sw" create)
pinned=$(taskset -c 0 "$sw" create)

dd="dd if=/dev/zero of=/dev/null bs=1 count=$dd_count 2>/dev/null"
loop="awk 'BEGIN { for (i = 0; i < $loops; i++); }'"
many() {  # N copies of command $2 at once
  local s="" i
  for ((i = 0; i < $1; i++)); do s+="$2 & "; done
  echo "${s}wait"
}
# Wall time in ms of `sandweave run ID -c CMD`, from bash's own clock.
timed() {
  local t0=$EPOCHREALTIME
  "$sw" run "$1" -c "$2" >/dev/null
  awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", (b - a) * 1000 }'
}

samples=$(mktemp)
echo "warming up..." >&2
timed "$free" "$dd" >/dev/null
timed "$pinned" "$dd" >/dev/null
for ((r = 1; r <= rounds; r++)); do
  {
    echo "dd_free $(timed "$free" "$dd")"
    echo "dd_pinned $(timed "$pinned" "$dd")"
    echo "loop_one $(timed "$free" "$loop")"
    echo "loop_many $(timed "$free" "$(many "$parallel" "$loop")")"
    echo "dd_many $(timed "$free" "$(many "$parallel" "$dd")")"
  } >>"$samples"
  echo "round $r/$rounds: $(tail -5 "$samples" | tr '\n' ' ')" >&2
done

python3 - "$samples" "$rounds" "$parallel" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, ms = line.split()
    rows.setdefault(name, []).append(float(ms))
m = {k: statistics.median(v) for k, v in rows.items()}
n, par = sys.argv[2], sys.argv[3]
print(f"median over {n} rounds (ms)      baseline    measured   ratio")
for label, base, got in (
    ("syscalls: free vs pinned", "dd_pinned", "dd_free"),
    (f"parallel: {par} loops vs one", "loop_one", "loop_many"),
    (f"dd x{par}: at once vs one", "dd_free", "dd_many"),
):
    print(f"{label:<30} {m[base]:>10.0f} {m[got]:>11.0f} {m[got] / m[base]:>7.2f}")
PY
rm -f "$samples"
