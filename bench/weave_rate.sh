#!/usr/bin/env bash
# Creates per second through one Weave controller at a concurrency against
# the same three workers driven locally, in the same run. Each cycle is a
# whole `sandweave create --template base` then `sandweave rm -f` (process
# start, connection, Slurm's allocation and the srun to the worker
# included); CONCURRENCY cycles run at once (xargs -P). Locally the cycles go
# round-robin to the three workers' own state directories, so the same
# sandweave state and the same runtime do the work without Slurm and the
# controller. Starts the one-machine Weave (scripts/weave-controller.sh) with
# enough slots for the concurrency in a directory of its own and stops it at
# the end.
# Usage: bench/weave_rate.sh [CYCLES] [CONCURRENCY]   (defaults 96 and 32;
#        needs root; about two minutes on two CPUs)
set -euo pipefail
cycles="${1:-96}"
conc="${2:-32}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
work="$(mktemp -d /tmp/sw-bench-weave-rate.XXXXXX)"
chmod 0711 "$work"
slots=$(((conc + 2) / 3))
ctl=("$top/scripts/weave-controller.sh" --dir "$work/cluster" --port 7753 --port-base 17750
    --slots "$slots" --sandweave "$sw")
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # weave_bench_cleanup
cleanup() { weave_bench_cleanup "$work" "$sw" "" "${ctl[@]}"; }
trap cleanup EXIT
eval "$("${ctl[@]}" start 2>/dev/null)"
export SW="$sw"
states=("$work"/cluster/workers/*/state)
[[ ${#states[@]} -eq 3 && -d "${states[0]}" ]] || { echo "weave_rate: no worker state directories" >&2; exit 1; }

# One cycle; $1 is the cycle's number. WHERE=weave or local.
cycle() {
    local id
    if [[ $WHERE == weave ]]; then
        id=$("$SW" create --template base) && "$SW" rm -f "$id" >/dev/null
    else
        local st="${STATES[$(($1 % 3))]}"
        id=$(env -u SANDWEAVE_HOST "$SW" --state-dir "$st" create --template base) &&
            env -u SANDWEAVE_HOST "$SW" --state-dir "$st" rm -f "$id" >/dev/null
    fi
}
export -f cycle
export STATES_0="${states[0]}" STATES_1="${states[1]}" STATES_2="${states[2]}"
# Arrays do not cross export: rebuild STATES in each shell.
cycle_entry() { STATES=("$STATES_0" "$STATES_1" "$STATES_2"); cycle "$1"; }
export -f cycle_entry

# One round: prints the rate (cycles per second) and the failures.
round() {
    local where="$1" t0 t1 failed
    t0=$(date +%s%N)
    failed=$(seq "$cycles" | WHERE="$where" xargs -P "$conc" -I{} bash -c 'cycle_entry {} || echo x' | grep -c x || true)
    t1=$(date +%s%N)
    awk -v n="$cycles" -v ns=$((t1 - t0)) -v f="$failed" 'BEGIN { printf "%.2f %d\n", n / (ns / 1e9), f }'
}

# Warm up: the base image on every worker, and one create through Weave.
for st in "${states[@]}"; do
    env -u SANDWEAVE_HOST "$sw" --state-dir "$st" rm -f "$(env -u SANDWEAVE_HOST "$sw" --state-dir "$st" create --template base)" >/dev/null
done
"$sw" rm -f "$("$sw" create --template base)" >/dev/null

load0="$(cut -d' ' -f1 /proc/loadavg)"
read -r local_a local_fa < <(round local)
read -r weave_a weave_fa < <(round weave)
read -r weave_b weave_fb < <(round weave)
read -r local_b local_fb < <(round local)
load1="$(cut -d' ' -f1 /proc/loadavg)"
awk -v la="$local_a" -v lb="$local_b" -v wa="$weave_a" -v wb="$weave_b" \
    -v c="$cycles" -v k="$conc" -v l0="$load0" -v l1="$load1" \
    -v f="$((local_fa + local_fb + weave_fa + weave_fb))" 'BEGIN {
    l = (la + lb) / 2; w = (wa + wb) / 2
    printf "load %s -> %s; %d create+rm cycles at concurrency %d, two rounds each (local, weave, weave, local)\n", l0, l1, c, k
    printf "%-34s %8s %8s\n", "cycles per second", "local", "weave"
    printf "%-34s %8.2f %8.2f\n", "round 1 / round 2 (mean)", l, w
    printf "ratio weave/local: %.2f (target >= 0.8); failed cycles: %d\n", w / l, f
}'
