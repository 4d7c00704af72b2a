#!/usr/bin/env bash
# Where an audit event's cost goes: a Go CPU profile of the sentry of an
# audited sandbox while a dd guest runs (`runsc --profile` on every runsc
# call, then `runsc debug --profile-cpu`), and the writer's CPU over the same
# run. Prints the sentry's audit path as shares of its CPU (collection of the
# context fields, the point's own fields such as fd_path, protobuf marshaling,
# the batch send) next to the ptrace switching that every syscall costs
# anyway on this platform, and the writer's CPU per event.
#
# Usage: bench/audit_profile.sh [SECONDS]   (default 8; needs root, go, jq)
# Env:   SANDWEAVE (binary), SANDWEAVE_RUNSC (the runtime to profile),
#        DD_COUNT (default 400000; enough to outlast SECONDS), PROFILE_OUT
#        (keep the profile there, for `go tool pprof`)
set -uo pipefail

secs=${1:-8}
dd_count=${DD_COUNT:-400000}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sw=${SANDWEAVE:-$top/build/sandweave}
real=${SANDWEAVE_RUNSC:-/usr/local/lib/sandweave/runsc}
if [ "$(id -u)" != 0 ] || [ ! -x "$sw" ] || [ ! -x "$real" ] || ! command -v go >/dev/null ||
    ! command -v jq >/dev/null; then
    echo "audit_profile: needs root, go, jq, a built sandweave ($sw) and a runtime ($real)" >&2
    exit 1
fi

# Short: the writer's sink socket path must stay under 100 bytes.
state=$(mktemp -d /tmp/swp.XXXXXX)
tools=$(mktemp -d /tmp/swpt.XXXXXX)
export SANDWEAVE_STATE_DIR=$state
unset SANDWEAVE_HOST
cleanup() {
    local d
    for d in "$state"/sandboxes/*/; do
        [ -d "$d" ] && "$sw" rm "$(basename "$d")" >/dev/null 2>&1
    done
    rm -rf "$state" "$tools"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# runsc only serves `debug --profile-cpu` to a sandbox started with --profile.
printf '#!/bin/sh\nexec %q --profile "$@"\n' "$real" >"$tools/runsc"
chmod 0755 "$tools/runsc"
"$sw" image build base >/dev/null 2>&1
id=$(SANDWEAVE_RUNSC=$tools/runsc "$sw" create --template base --audit) || exit 1
"$sw" run "$id" -- /bin/true >/dev/null 2>&1
writer_cpu() { # -> the writer's utime+stime in clock ticks
    awk '{print $14 + $15}' "/proc/$(jq -r .pid "$state/sandboxes/$id/audit/writer-state.json")/stat"
}
events() { "$sw" --json audit status "$id" 2>/dev/null | jq -r '.counters.written_events // .events // 0'; }

"$sw" run "$id" -- /bin/dd if=/dev/zero of=/dev/null bs=1 "count=$dd_count" >/dev/null 2>&1 &
guest=$!
sleep 1
w0=$(writer_cpu)
e0=$(events)
"$real" --root "$state/runsc" debug --profile-cpu="$tools/sentry.prof" --duration="${secs}s" "$id" >/dev/null 2>&1
sleep 0.5
w1=$(writer_cpu)
e1=$(events)
kill "$guest" 2>/dev/null
wait "$guest" 2>/dev/null

[ -s "$tools/sentry.prof" ] || { echo "audit_profile: no profile written" >&2; exit 1; }
if [ -n "${PROFILE_OUT:-}" ]; then cp "$tools/sentry.prof" "$PROFILE_OUT"; fi
top() { go tool pprof -top -cum -nodecount=400 "$tools/sentry.prof" 2>/dev/null; }
total=$(top | sed -n 's/.*Total samples = \([0-9.]*\)\(m\?s\).*/\1 \2/p' |
    awk '{print ($2 == "ms") ? $1 / 1000 : $1}')
share() { # function regexp -> its cumulative share of the sentry's CPU, in %
    top | awk -v re="$1" -v total="$total" '
        $6 ~ re { v = $4; s = (v ~ /ms$/) ? v / 1000 : v + 0; if (s > best) best = s }
        END { printf "%.1f", 100 * best / total }'
}
echo "sentry CPU profile: ${secs}s of dd bs=1 (${total}s of CPU sampled), runtime $real"
printf '  %-52s %6s%%\n' \
    "ptrace switching (subprocess.switchToApp)" "$(share 'ptrace\.\(\*subprocess\)\.switchToApp$')" \
    "syscalls (executeSyscall, audit included)" "$(share 'kernel\.\(\*Task\)\.executeSyscall$')" \
    "audit: points sent to the sink (SentToSinks)" "$(share 'seccheck\.\(\*State\)\.SentToSinks$')" \
    "audit:   protobuf marshaling" "$(share 'proto\.MarshalOptions\.MarshalAppend$')" \
    "audit:   batch send (flushLocked, writev)" "$(share 'remote\.\(\*remote\)\.flushLocked$')" \
    "audit: context fields (LoadSeccheckData)" "$(share 'kernel\.LoadSeccheckData$')" \
    "audit:   cwd (SeccheckCwd / PathnameWithDeleted)" "$(share 'kernel\.\(\*FSContext\)\.SeccheckCwd$')" \
    "audit: fd_path (getFilePath)" "$(share 'linux\.getFilePath$')"
n=$((e1 - e0))
awk -v w=$((w1 - w0)) -v t="$(getconf CLK_TCK)" -v n="$n" 'BEGIN {
    printf "writer: %.2f s of CPU for %d events in the same window", w / t, n
    if (n > 0) printf ", %.2f us per event", w / t * 1e6 / n
    printf "\n" }'
