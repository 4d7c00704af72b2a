#!/usr/bin/env bash
# Soak: long runs that must leak nothing (not in CI; figures go in
# bench/README.md).
#   1. CYCLES create -> run -> rm cycles, PARALLEL at a time
#   2. ACQUIRES pool acquires (pool of POOL_SIZE, refilled in the background),
#      each acquired sandbox run once and removed
#   3. ALIVE audited sandboxes alive at once, idle: host memory per sandbox
#      (MemAvailable drop, and the sum of the PSS of every process of the state
#      dir), the writer's and the shim's peak RSS (VmHWM)
#   4. CRASH_ROUNDS of tests/integration/crash.sh's randomized kill loop, and
#      CREATE_KILLS creates killed at random moments (its create loop)
# After each phase: leaked processes, mounts, fds (held by processes of the
# state dir) and directories, each with a target of 0.
# Usage: bench/soak.sh   (env: CYCLES=1000 PARALLEL=8 ACQUIRES=500 POOL_SIZE=4
#        ALIVE=100 CRASH_ROUNDS=200 CREATE_KILLS=500; needs root and a built tree)
set -uo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
CYCLES="${CYCLES:-1000}" PARALLEL="${PARALLEL:-8}" ACQUIRES="${ACQUIRES:-500}"
POOL_SIZE="${POOL_SIZE:-4}" ALIVE="${ALIVE:-100}" CRASH_ROUNDS="${CRASH_ROUNDS:-200}"
CREATE_KILLS="${CREATE_KILLS:-500}"
state="$(mktemp -d /tmp/sw-soak.XXXXXX)"
export SANDWEAVE_STATE_DIR="$state"
cleanup() {
  "$sw" pool ls --json 2>/dev/null | jq -r '.[].name' | xargs -r -n1 "$sw" pool rm >/dev/null 2>&1
  "$sw" rm --all >/dev/null 2>&1
  pkill -KILL -f -- "$state" 2>/dev/null
  for m in $(awk -v d="$state" 'index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r); do umount -l "$m"; done
  rm -rf "$state"
}
trap cleanup EXIT

procs() { pgrep -f -- "$state" | grep -vx "$$" || true; }
leaks() {  # PHASE: one line of what is left (target: all 0)
  sleep 2  # asynchronous teardown (gofer exit, lazy unmount)
  local p m f=0 d n pid
  p=$(procs | wc -l)
  m=$(awk -v d="$state" 'index($5, d "/") == 1' /proc/self/mountinfo | wc -l)
  for pid in $(procs); do f=$((f + $(ls "/proc/$pid/fd" 2>/dev/null | wc -l))); done
  d=$(find "$state/sandboxes" -mindepth 1 -maxdepth 1 | wc -l)
  n=$(find "$state/names" -mindepth 1 -maxdepth 1 ! -name '.*' | wc -l)
  printf '%-28s leaked: processes %d, mounts %d, fds %d, sandbox dirs %d, names %d\n' "$1" "$p" "$m" "$f" "$d" "$n"
}
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio

"$sw" image build base >/dev/null 2>&1
echo "soak: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"

# 1. create -> run -> rm cycles
cycle() { local id; id=$("$sw" create) && "$sw" run "$id" -- true && "$sw" rm "$id" >/dev/null; }
export -f cycle; export sw
t0=$(now)
fails=$(seq "$CYCLES" | xargs -P "$PARALLEL" -I{} bash -c 'cycle || echo FAIL' 2>/dev/null | grep -c FAIL)
t1=$(now)
echo "1. $CYCLES create/run/rm cycles, $PARALLEL in parallel: $(secs "$t0" "$t1") s, $fails failed"
leaks "   after the cycles"

# 2. pool acquires with refill
"$sw" pool create soak --size "$POOL_SIZE" >/dev/null
lat=()
fails=0
t0=$(now)
for i in $(seq "$ACQUIRES"); do
  a=$(date +%s%N)
  id=$("$sw" pool acquire soak) || { fails=$((fails + 1)); continue; }
  b=$(date +%s%N)
  lat+=($(((b - a) / 1000000)))
  "$sw" run "$id" -- true >/dev/null || fails=$((fails + 1))
  "$sw" rm "$id" >/dev/null
done
t1=$(now)
echo "2. $ACQUIRES pool acquires (size $POOL_SIZE, refilling): $(secs "$t0" "$t1") s, acquire median $(printf '%s\n' "${lat[@]}" | median) ms, $fails failed"
"$sw" pool rm soak >/dev/null
leaks "   after the acquires"

# 3. ALIVE audited sandboxes alive at once
sync; echo 1 >/proc/sys/vm/drop_caches 2>/dev/null
avail0=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
fails=0
t0=$(now)
for i in $(seq "$ALIVE"); do "$sw" create --audit >/dev/null || fails=$((fails + 1)); done
t1=$(now)
sleep 5
avail1=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
pss=0
for pid in $(procs); do
  v=$(awk '/^Pss:/ {print $2}' "/proc/$pid/smaps_rollup" 2>/dev/null); pss=$((pss + ${v:-0}))
done
peak() {  # PATTERN: the largest VmHWM and the median VmRSS of matching processes, KiB
  local pids hwm rss
  pids=$(pgrep -f -- "$1" | while read -r p; do grep -q -- "$state" "/proc/$p/cmdline" 2>/dev/null && echo "$p"; done)
  hwm=$(for p in $pids; do awk '/VmHWM/ {print $2}' "/proc/$p/status"; done | sort -n | tail -1)
  rss=$(for p in $pids; do awk '/VmRSS/ {print $2}' "/proc/$p/status"; done | median)
  echo "peak ${hwm:-?} KiB, median RSS ${rss:-?} KiB over $(echo "$pids" | grep -c .)"
}
# Exercise the writers a little so their peak includes real traffic.
for id in $("$sw" ls --ids | head -10); do "$sw" run "$id" -- sh -c 'ls -R / >/dev/null' >/dev/null; done
echo "3. $ALIVE audited sandboxes alive: created in $(secs "$t0" "$t1") s, $fails failed"
echo "   host memory per idle audited sandbox: $(( (avail0 - avail1) / ALIVE / 1024 )) MiB (MemAvailable drop), $((pss / ALIVE / 1024)) MiB (PSS of its processes)"
echo "   audit writer: $(peak __audit-writer)"
echo "   shim:         $(peak __shim)"
echo "   runsc (sandbox, gofer, ...): $(peak 'runsc')"
"$sw" rm --all >/dev/null
leaks "   after removing them"

# 4. random kills (the crash test's loop, long)
if [[ "$CRASH_ROUNDS" -gt 0 ]]; then
  t0=$(now)
  out=$(cd "$top/build" && CRASH_RANDOM_ROUNDS="$CRASH_ROUNDS" CRASH_CREATE_ROUNDS="$CREATE_KILLS" SANDWEAVE="$sw" SANDWEAVE_SOURCE_DIR="$top" \
        SANDWEAVE_BUILD_DIR="$top/build" SANDWEAVE_FAULTS="$top/build/sandweave-faults" \
        bash "$top/tests/integration/crash.sh" 2>&1 | grep -A3 -e '^FAIL' -e 'passed,')
  echo "4. crash test with $CRASH_ROUNDS random kills and $CREATE_KILLS killed creates: $(secs "$t0" "$(now)") s:"
  printf '   %s\n' "${out//$'\n'/$'\n'   }"
fi
