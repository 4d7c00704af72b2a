#!/usr/bin/env bash
# sandweave cp of one file in and out of a sandbox against the baselines a
# user would otherwise use, in the same run: `cat` through `sandweave run`
# (the agent's stdin/stdout), `tar | runsc exec tar` (what docker cp does,
# needing tar in the image), and `runsc exec cat`. Median of RUNS each.
# Usage: bench/cp.sh [MIB] [RUNS]   (defaults 100 and 5)
set -eu
BUILD=${SANDWEAVE_BUILD_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
SW=$BUILD/sandweave
MIB=${1:-100}
RUNS=${2:-5}
T=$(mktemp -d /tmp/sw-cp-bench.XXXXXX)
export SANDWEAVE_STATE_DIR=$T/state
RUNSC=${SANDWEAVE_RUNSC:-/usr/local/lib/sandweave/runsc}
cleanup() {
    [[ -n "${ID:-}" ]] && { "$SW" terminate "$ID"; "$SW" rm "$ID"; } >/dev/null 2>&1 || true
    rm -rf "$T"
}
trap cleanup EXIT
ID=$("$SW" create)
head -c $((MIB << 20)) /dev/urandom >"$T/file"
RX="'$RUNSC' --root='$T/state/runsc' --platform=ptrace --network=none exec"

now() { date +%s.%N; }
declare -A samples
measure() {  # NAME COMMAND...
    local name=$1
    shift
    local t0 t1
    t0=$(now)
    "$@" >/dev/null
    t1=$(now)
    samples[$name]+="$(echo "$t1 - $t0" | bc -l) "
}
for ((i = 0; i < RUNS; i++)); do
    rm -f "$T/out"
    measure cp_in "$SW" cp "$T/file" "$ID:/tmp/file"
    measure cp_out "$SW" cp "$ID:/tmp/file" "$T/out"
    rm -f "$T/out"
    measure run_cat_in sh -c "'$SW' run '$ID' -- sh -c 'cat >/tmp/cat' <'$T/file'"
    measure run_cat_out sh -c "'$SW' run '$ID' -- cat /tmp/file >'$T/out'"
    rm -f "$T/out"
    measure runsc_tar_in sh -c "tar -C '$T' -cf - file | $RX '$ID' tar -C /tmp -xf -"
    measure runsc_tar_out sh -c "$RX '$ID' tar -C /tmp -cf - file | tar -C '$T' -xf - -O >/dev/null"
    measure runsc_cat_in sh -c "$RX '$ID' sh -c 'cat >/tmp/rcat' <'$T/file'"
    measure runsc_cat_out sh -c "$RX '$ID' cat /tmp/file >'$T/out'"
done
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio
declare -A m
for k in "${!samples[@]}"; do m[$k]=$(echo "${samples[$k]}" | median); done
jq -n --argjson mib "$MIB" --argjson runs "$RUNS" \
    --argjson ci "${m[cp_in]}" --argjson co "${m[cp_out]}" \
    --argjson rci "${m[run_cat_in]}" --argjson rco "${m[run_cat_out]}" \
    --argjson ti "${m[runsc_tar_in]}" --argjson to "${m[runsc_tar_out]}" \
    --argjson xi "${m[runsc_cat_in]}" --argjson xo "${m[runsc_cat_out]}" '
    def r: . * 1000 | round / 1000;
    { mib: $mib, runs: $runs,
      cp_in_s: ($ci | r), cp_out_s: ($co | r),
      run_cat_in_s: ($rci | r), run_cat_out_s: ($rco | r),
      runsc_tar_in_s: ($ti | r), runsc_tar_out_s: ($to | r),
      runsc_cat_in_s: ($xi | r), runsc_cat_out_s: ($xo | r),
      cp_in_vs_run_cat: ($ci / $rci | r), cp_out_vs_run_cat: ($co / $rco | r),
      cp_in_vs_runsc_tar: ($ci / $ti | r), cp_out_vs_runsc_tar: ($co / $to | r) }'
