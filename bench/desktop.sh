#!/usr/bin/env bash
# Desktops, as medians and as ratios against figures measured in the same run:
#   create        `create --template desktop` (the X server and window manager
#                 started and answering) vs `create --template base`
#   screenshot    `desktop screenshot ID FILE` of a 1280x800 screen showing a
#                 terminal, vs `run ID -- true` (the cost of one guest command)
#   input         `desktop click` and `desktop key` vs `run ID -- true`
# The desktop image must be built (it is, on first use, into the state dir:
# SANDWEAVE_DESKTOP_STATE_DIR, default /var/tmp/sandweave-test-desktop, shared
# with the tests).
# Usage: bench/desktop.sh [REPS]   (default 10)
# Needs root, jq and a built tree (SANDWEAVE, else build/sandweave).
set -euo pipefail
reps="${1:-10}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
[[ -x "$sw" ]] || { echo "sandweave binary $sw not found (set SANDWEAVE)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is needed" >&2; exit 1; }
export SANDWEAVE_STATE_DIR="${SANDWEAVE_DESKTOP_STATE_DIR:-/var/tmp/sandweave-test-desktop}"
mkdir -p "$SANDWEAVE_STATE_DIR"
scratch="$(mktemp -d /tmp/sw-bench-desktop.XXXXXX)"
ids=()
cleanup() {
  set +e
  local id
  for id in "${ids[@]}"; do "$sw" rm "$id" >/dev/null 2>&1; done
  rm -rf "$scratch"
}
trap cleanup EXIT

now_ns() { date +%s%N; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio
ms() { awk -v ns="$1" 'BEGIN {printf "%.1f", ns/1e6}'; }
timed() {  # COMMAND...: prints the ns it took; stdout to $scratch/out
  local t0 t1
  t0=$(now_ns)
  "$@" >"$scratch/out" 2>"$scratch/err" </dev/null || { cat "$scratch/err" >&2; return 1; }
  t1=$(now_ns)
  echo $((t1 - t0))
}

"$sw" image build desktop >&2
"$sw" image build base >&2

desk=() base=()
for _ in $(seq "$reps"); do
  desk+=("$(timed "$sw" create --template desktop)"); ids+=("$(cat "$scratch/out")")
  "$sw" rm "${ids[-1]}" >/dev/null
  base+=("$(timed "$sw" create --template base)"); ids+=("$(cat "$scratch/out")")
  "$sw" rm "${ids[-1]}" >/dev/null
done
id=$("$sw" create --template desktop)
ids+=("$id")
"$sw" run "$id" -c 'stterm -g 80x24+0+0 -e sh </dev/null >/dev/null 2>&1 &'
sleep 2
shot=() run=() click=() key=()
for _ in $(seq "$reps"); do
  shot+=("$(timed "$sw" desktop screenshot "$id" "$scratch/s.png")")
  run+=("$(timed "$sw" run "$id" -- true)")
  click+=("$(timed "$sw" desktop click "$id" 200 150)")
  key+=("$(timed "$sw" desktop key "$id" shift)")
done
m() { printf '%s\n' "$@" | median; }
cd_=$(m "${desk[@]}") cb=$(m "${base[@]}") s=$(m "${shot[@]}") r=$(m "${run[@]}")
c=$(m "${click[@]}") k=$(m "${key[@]}")
printf 'create --template desktop   %8s ms  (%sx create --template base, %s ms)\n' "$(ms "$cd_")" "$(ratio "$cd_" "$cb")" "$(ms "$cb")"
printf 'desktop screenshot          %8s ms  (%sx run -- true, %s ms; PNG %s bytes)\n' "$(ms "$s")" "$(ratio "$s" "$r")" "$(ms "$r")" "$(stat -c %s "$scratch/s.png")"
printf 'desktop click               %8s ms  (%sx run -- true)\n' "$(ms "$c")" "$(ratio "$c" "$r")"
printf 'desktop key                 %8s ms  (%sx run -- true)\n' "$(ms "$k")" "$(ratio "$k" "$r")"
