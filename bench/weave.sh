#!/usr/bin/env bash
# create and `run -- true` through weave:// against the same verbs locally,
# interleaved, each a whole CLI invocation (process start, connection and
# handshake included). Starts the one-machine Weave (scripts/weave-controller.sh)
# in a directory of its own and stops it at the end.
# Usage: bench/weave.sh [REPS]   (default 10; needs root; under a minute)
set -euo pipefail
reps="${1:-10}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
work="$(mktemp -d /tmp/sw-bench-weave.XXXXXX)"
chmod 0711 "$work"
ctl=("$top/scripts/weave-controller.sh" --dir "$work/cluster" --port 7743 --port-base 17700 --sandweave "$sw")
local_state="$work/local"
cleanup() {
    local d
    for d in "$work"/cluster/workers/*/state "$local_state"; do
        [[ -d "$d" ]] && env -u SANDWEAVE_HOST "$sw" --state-dir "$d" rm -f --all >/dev/null 2>&1 || true
    done
    env -u SANDWEAVE_HOST "${ctl[@]}" stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
eval "$("${ctl[@]}" start 2>/dev/null)"
now() { date +%s%N; }
ms() { echo $((($(now) - $1) / 1000000)); }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
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
