#!/usr/bin/env bash
# Cost of /proc hidepid on a /proc-heavy guest workload.
#
#   bench/hidepid_proc.sh [REPS]        (default 5 repetitions; needs root)
#
# Four sandboxes (base image), each with a few other-uid processes (two uid 1002
# sleeps, one uid 1003 sleep, a root sleep) beside the guest init:
#   patched runsc  --hidepid 0 / 1 / 2   (sandweave's runtime, runtime/build-runsc.sh)
#   stock runsc    --hidepid 0           (Debian's /usr/bin/runsc)
# both runtimes passed explicitly with --runsc. Per repetition, round-robin over
# the sandboxes, it times (host wall clock, including one `sandweave run`)
#   WORKLOAD (default: for i in $(seq $ITERS); do ps >/dev/null; done; ITERS=200)
# as uid 1001 (hidepid 1/2 hide the other processes, so ps has less to read:
# the user-visible effect) and as root (root sees everything in every mode: the
# same work plus the permission checks, i.e. the policy's own overhead), and
# prints the median/min/max per configuration and the ratios hidepid2/hidepid0,
# hidepid1/hidepid0 (patched) and patched/stock at hidepid 0.
#
#   SANDWEAVE        binary (default $SANDWEAVE_BUILD_DIR/sandweave, else
#                    sandweave on PATH)
#   PATCHED_RUNSC    default ${SANDWEAVE_RUNTIME_DIR:-/usr/local/lib/sandweave}/runsc
#   STOCK_RUNSC      default /usr/bin/runsc (skipped with a note if missing)
#   ITERS, WORKLOAD  see above
set -uo pipefail

reps="${1:-5}"
[[ "$reps" =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 [REPS]" >&2; exit 2; }
if [[ -z "${SANDWEAVE:-}" ]]; then
  if [[ -n "${SANDWEAVE_BUILD_DIR:-}" ]]; then SANDWEAVE="$SANDWEAVE_BUILD_DIR/sandweave"
  else SANDWEAVE="$(command -v sandweave || echo sandweave)"; fi
fi
PATCHED_RUNSC="${PATCHED_RUNSC:-${SANDWEAVE_RUNTIME_DIR:-/usr/local/lib/sandweave}/runsc}"
STOCK_RUNSC="${STOCK_RUNSC:-/usr/bin/runsc}"
ITERS="${ITERS:-200}"
WORKLOAD="${WORKLOAD:-for i in \$(seq $ITERS); do ps >/dev/null; done}"

[[ "$(id -u)" == 0 ]] || { echo "$0: must run as root" >&2; exit 1; }
[[ -x "$SANDWEAVE" ]] || { echo "$0: sandweave binary '$SANDWEAVE' not found (set SANDWEAVE)" >&2; exit 1; }
[[ -x "$PATCHED_RUNSC" ]] || { echo "$0: $PATCHED_RUNSC missing (runtime/build-runsc.sh)" >&2; exit 1; }

export SANDWEAVE_STATE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/hidepid-bench.XXXXXX")"
ids=()
cleanup() {
  local id
  for id in "${ids[@]}"; do "$SANDWEAVE" -q rm "$id" >/dev/null 2>&1 </dev/null || echo "could not remove $id" >&2; done
  grep -q " $SANDWEAVE_STATE_DIR/" /proc/self/mounts || rm -rf "$SANDWEAVE_STATE_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

sw() { "$SANDWEAVE" "$@" </dev/null; }

# name -> "runsc hidepid"
names=(patched-h0 patched-h1 patched-h2)
declare -A conf=([patched-h0]="$PATCHED_RUNSC 0" [patched-h1]="$PATCHED_RUNSC 1" [patched-h2]="$PATCHED_RUNSC 2")
if [[ -x "$STOCK_RUNSC" ]]; then
  names+=(stock-h0)
  conf[stock-h0]="$STOCK_RUNSC 0"
else
  echo "note: $STOCK_RUNSC missing (apt-get install runsc): no stock comparison" >&2
fi

declare -A sid times
for n in "${names[@]}"; do
  read -r runsc h <<<"${conf[$n]}"
  id="$(sw -q --runsc "$runsc" create --hidepid "$h")" || { echo "$0: create $n failed" >&2; exit 1; }
  ids+=("$id")
  sid[$n]="$id"
  for u in 1002:1002 1002:1002 1003:1003 0:0; do
    sw run "$id" --user "$u" -c 'sleep 100000 </dev/null >/dev/null 2>&1 &' >/dev/null ||
      { echo "$0: $n: starting a uid $u process failed" >&2; exit 1; }
  done
  # Warm-up (page cache, sentry caches), not timed.
  sw run "$id" --user 1001:1001 -c "$WORKLOAD" >/dev/null 2>&1 || { echo "$0: $n: workload failed" >&2; exit 1; }
done

users=(1001:1001 0:0)
echo "workload: $WORKLOAD"
echo "patched: $PATCHED_RUNSC ($("$PATCHED_RUNSC" --version 2>/dev/null | head -n1))"
[[ -n "${conf[stock-h0]:-}" ]] && echo "stock:   $STOCK_RUNSC ($("$STOCK_RUNSC" --version 2>/dev/null | head -n1))"
echo "$reps repetitions, round-robin over: ${names[*]}; as uid ${users[*]%%:*}"
for ((r = 1; r <= reps; r++)); do
  for u in "${users[@]}"; do
    for n in "${names[@]}"; do
      t0=$(date +%s%N)
      sw run "${sid[$n]}" --user "$u" -c "$WORKLOAD" >/dev/null 2>&1 || { echo "$0: $n as $u: workload failed" >&2; exit 1; }
      t1=$(date +%s%N)
      times[$n/$u]+="$(((t1 - t0) / 1000000)) "
    done
  done
  printf '.' >&2
done
echo >&2

stats() { # stats "ms ms ...": "median min max" in seconds
  tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3f %.3f %.3f\n", m / 1000, v[1] / 1000, v[NR] / 1000 }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf (b > 0 ? "%.3f" : "n/a"), (b > 0 ? a / b : 0) }'; }
declare -A med
printf '\n%-12s %-8s %-8s %-6s %9s %8s %8s\n' config runtime hidepid uid median_s min_s max_s
for u in "${users[@]}"; do
  for n in "${names[@]}"; do
    read -r runsc h <<<"${conf[$n]}"
    read -r m lo hi <<<"$(stats "${times[$n/$u]}")"
    med[$n/$u]="$m"
    printf '%-12s %-8s %-8s %-6s %9s %8s %8s\n' "$n" "${n%%-*}" "$h" "${u%%:*}" "$m" "$lo" "$hi"
  done
done
echo
printf '%-40s %10s %10s\n' "ratio of medians" "uid 1001" "root"
row() { printf '%-40s %10s %10s\n' "$1" "$(ratio "${med[$2/1001:1001]}" "${med[$3/1001:1001]}")" "$(ratio "${med[$2/0:0]}" "${med[$3/0:0]}")"; }
row "hidepid2 / hidepid0 (patched)" patched-h2 patched-h0
row "hidepid1 / hidepid0 (patched)" patched-h1 patched-h0
[[ -n "${conf[stock-h0]:-}" ]] && row "patched / stock runsc (hidepid 0)" patched-h0 stock-h0
exit 0
