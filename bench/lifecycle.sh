#!/usr/bin/env bash
# Sandbox lifecycle latency, as medians over repeated runs and as ratios against
# the raw runtime measured in the same run:
#   create-to-first-command:  `sandweave create` + `sandweave run ID -- /bin/true`
#                             vs `runsc run` of /bin/true on an equivalent bundle
#   the same, first via PATH: `sandweave run ID -- true`, the command found by
#                             the PATH search (five failed execve first, cold)
#   run:                      `sandweave run ID -- true` vs `runsc exec ID true`
#                             on the same running sandbox
# Each row also gives both sides' quartiles: the raw `runsc run` has a long
# tail of its own (its teardown), which moves its median from run to run.
# Usage: bench/lifecycle.sh [REPS]   (default 20; needs root and a built tree)
set -euo pipefail
reps="${1:-20}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
state="$(mktemp -d /tmp/sw-bench.XXXXXX)"
export SANDWEAVE_STATE_DIR="$state"
runsc="$("$sw" doctor --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print([c for c in d["checks"] if c["name"]=="runsc"][0]["detail"].split(":")[0])')"
rawroot="$state/raw-runsc"
flags=(--root="$rawroot" --platform=ptrace --network=none)
cleanup() {
  "$sw" ls --ids 2>/dev/null | xargs -r "$sw" rm >/dev/null 2>&1 || true
  "$runsc" --root="$rawroot" list -q 2>/dev/null | xargs -r -n1 "$runsc" --root="$rawroot" delete --force >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT

# The time in ns into variable $1, from bash's own clock: no fork, so a sample
# is not the command plus a `$(date)` subshell (about 1 ms here).
stamp() { printf -v "$1" '%s000' "${EPOCHREALTIME//[!0-9]/}"; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio
# "p25-p75" in ms of the samples on stdin (nearest rank).
quartiles() {
  sort -n | awk '{a[NR]=$1} END {q1=int((NR+3)/4); q3=int((3*NR+3)/4); printf "%.0f-%.0f", a[q1]/1e6, a[q3]/1e6}'
}
ms() { awk -v ns="$1" 'BEGIN {printf "%.1f", ns/1e6}'; }

"$sw" image build base >/dev/null 2>&1
# The raw bundle: the same base image (read-only, no overlay) running /bin/true.
bundle="$state/raw-bundle"
mkdir -p "$bundle"
(cd "$bundle" && "$runsc" spec -- /bin/true)
python3 - "$bundle/config.json" "$state/images/base/rootfs" <<'PY'
import json, sys
path, rootfs = sys.argv[1], sys.argv[2]
c = json.load(open(path))
c["root"] = {"path": rootfs, "readonly": True}
c["process"]["terminal"] = False
json.dump(c, open(path, "w"))
PY

echo "warming up..." >&2
id=$("$sw" create); "$sw" run "$id" -- true; "$sw" rm "$id" >/dev/null
"$runsc" "${flags[@]}" run --bundle "$bundle" warm </dev/null >/dev/null 2>&1 || true
"$runsc" "${flags[@]}" delete --force warm >/dev/null 2>&1 || true

raw_start=(); sw_start=(); sw_start_path=()
for i in $(seq "$reps"); do
  stamp t0
  "$runsc" "${flags[@]}" run --bundle "$bundle" "raw$i" </dev/null >/dev/null 2>&1
  stamp t1
  raw_start+=($((t1 - t0)))
  "$runsc" "${flags[@]}" delete --force "raw$i" >/dev/null 2>&1 || true

  # The same command as the raw side runs: the figure is what sandweave adds.
  stamp t0
  "$sw" create >"$state/id"  # not $(...): a subshell's fork would be timed too
  read -r id <"$state/id"
  "$sw" run "$id" -- /bin/true
  stamp t1
  sw_start+=($((t1 - t0)))
  "$sw" rm "$id" >/dev/null

  stamp t0
  "$sw" create >"$state/id"
  read -r id <"$state/id"
  "$sw" run "$id" -- true
  stamp t1
  sw_start_path+=($((t1 - t0)))
  "$sw" rm "$id" >/dev/null
done

id=$("$sw" create)
swflags=(--root="$state/runsc" --platform=ptrace --network=none)
raw_exec=(); sw_run=()
for i in $(seq "$reps"); do
  stamp t0; "$runsc" "${swflags[@]}" exec "$id" /bin/true </dev/null; stamp t1
  raw_exec+=($((t1 - t0)))
  stamp t0; "$sw" run "$id" -- /bin/true </dev/null; stamp t1
  sw_run+=($((t1 - t0)))
done

rs=$(printf '%s\n' "${raw_start[@]}" | median); ss=$(printf '%s\n' "${sw_start[@]}" | median)
sp=$(printf '%s\n' "${sw_start_path[@]}" | median)
re=$(printf '%s\n' "${raw_exec[@]}" | median); sr=$(printf '%s\n' "${sw_run[@]}" | median)
q() { printf '%s\n' "$@" | quartiles; }
printf '%-28s %10s %10s %7s %14s %14s\n' "median over $reps runs" "runsc ms" "sandweave" "ratio" \
  "runsc p25-p75" "sandweave p25-p75"
printf '%-28s %10s %10s %7s %14s %14s\n' "create-to-first-command" "$(ms "$rs")" "$(ms "$ss")" \
  "$(ratio "$ss" "$rs")" "$(q "${raw_start[@]}")" "$(q "${sw_start[@]}")"
printf '%-28s %10s %10s %7s %14s %14s\n' "  the same, first via PATH" "$(ms "$rs")" "$(ms "$sp")" \
  "$(ratio "$sp" "$rs")" "$(q "${raw_start[@]}")" "$(q "${sw_start_path[@]}")"
printf '%-28s %10s %10s %7s %14s %14s\n' "run (vs runsc exec)" "$(ms "$re")" "$(ms "$sr")" \
  "$(ratio "$sr" "$re")" "$(q "${raw_exec[@]}")" "$(q "${sw_run[@]}")"
