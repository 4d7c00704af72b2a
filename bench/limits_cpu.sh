#!/usr/bin/env bash
# `resources.cpus` throttles the guest: the same CPU-bound guest
# loop in a sandbox without a limit, with cpus 0.5 and with cpus 0.25, run
# ROUNDS times each, interleaved. Reports per setting the median wall time of
# the loop and the median CPU the sandbox's host cgroup used per wall second
# (cpuacct: sentry, gofer and stubs, i.e. everything the quota covers), and
# the ratios against the unlimited sandbox, and the share of the quota's
# 100 ms periods in which the kernel throttled it (cpu.stat nr_throttled /
# nr_periods: the quota biting, whatever else the host runs). PARALLEL copies of the loop run
# at once, so an unlimited sandbox can use more than one CPU. Expected:
# cpu_per_wall_second at most 0.5 and 0.25 (plus noise), whatever the
# unlimited sandbox gets on a loaded host. Usage:
#   bench/limits_cpu.sh [ROUNDS] [LOOP_ITERATIONS] [PARALLEL]
set -eu
BUILD=${SANDWEAVE_BUILD_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
SW=${SANDWEAVE:-$BUILD/sandweave}
ROUNDS=${1:-3}
LOOP=${2:-1000000}
PARALLEL=${3:-2}
export SANDWEAVE_STATE_DIR=$(mktemp -d /tmp/sw-limits-bench.XXXXXX)
cleanup() {
    for id in $("$SW" ls --ids 2>/dev/null); do "$SW" rm "$id" >/dev/null 2>&1 || true; done
    rm -rf "$SANDWEAVE_STATE_DIR"
}
trap cleanup EXIT

declare -A ID
ID[none]=$("$SW" create --template base)
ID[0.5]=$("$SW" create --template '{"extends": "base", "resources": {"cpus": 0.5}}')
ID[0.25]=$("$SW" create --template '{"extends": "base", "resources": {"cpus": 0.25}}')

cpu_ns() {  # ID: CPU time of the sandbox's host cgroup, ns (cgroup v1 or v2)
    if [[ -r /sys/fs/cgroup/cpuacct/$1/cpuacct.usage ]]; then
        cat "/sys/fs/cgroup/cpuacct/$1/cpuacct.usage"
    else
        awk '$1 == "usage_usec" { print $2 * 1000 }' "/sys/fs/cgroup/$1/cpu.stat"
    fi
}
throttle_stat() {  # ID: "PERIODS THROTTLED" of the sandbox's CFS quota (cgroup v1 or v2)
    local f=/sys/fs/cgroup/cpu/$1/cpu.stat
    [[ -r $f ]] || f=/sys/fs/cgroup/$1/cpu.stat
    awk '$1 == "nr_periods" { p = $2 } $1 == "nr_throttled" { t = $2 } END { print p + 0, t + 0 }' "$f" 2>/dev/null || echo "0 0"
}
now() { date +%s.%N; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio

T=$(mktemp -d)
for ((r = 0; r < ROUNDS; r++)); do
    for k in none 0.5 0.25; do
        id=${ID[$k]}
        read -r p0 h0 < <(throttle_stat "$id")
        c0=$(cpu_ns "$id"); t0=$(now)
        "$SW" run "$id" -c "for j in \$(seq $PARALLEL); do (i=0; while [ \$i -lt $LOOP ]; do i=\$((i + 1)); done) & done; wait" >/dev/null
        t1=$(now); c1=$(cpu_ns "$id")
        read -r p1 h1 < <(throttle_stat "$id")
        echo "$p1 $p0 $h1 $h0" | awk '{ print ($1 > $2) ? ($3 - $4) / ($1 - $2) : 0 }' >>"$T/thr.$k"
        wall=$(echo "$t1 - $t0" | bc -l)
        echo "$wall" >>"$T/wall.$k"
        echo "($c1 - $c0) / 1000000000 / $wall" | bc -l >>"$T/cpu.$k"
    done
done

w_none=$(median <"$T/wall.none")
out="[]"
for k in none 0.5 0.25; do
    w=$(median <"$T/wall.$k"); c=$(median <"$T/cpu.$k"); h=$(median <"$T/thr.$k")
    out=$(jq --arg k "$k" --argjson w "$w" --argjson c "$c" --argjson wn "$w_none" --argjson h "$h" \
        '. + [{cpus: $k, median_wall_seconds: ($w * 100 | round / 100),
               median_cpu_per_wall_second: ($c * 100 | round / 100),
               median_throttled_periods: ($h * 100 | round / 100),
               wall_vs_unlimited: ($w / $wn * 100 | round / 100)}]' <<<"$out")
done
rm -rf "$T"
jq -n --argjson r "$out" --argjson rounds "$ROUNDS" --argjson loop "$LOOP" --argjson par "$PARALLEL" \
    --arg load "$(cut -d' ' -f1-3 /proc/loadavg)" \
    '{rounds: $rounds, loop_iterations: $loop, parallel_loops: $par, host_cpus: '"$(nproc)"',
      host_loadavg: $load, results: $r}'
