#!/usr/bin/env bash
# Audit writer throughput: replays a trace recorded from a real runsc session
# into a fresh writer as fast as the socket takes it and reports records/s,
# wall-clock (sender + writer on this machine) and per writer CPU-second (the
# writer's own utime+stime: the "one core" figure). BATCH (default 1) points
# per message as runtime/audit-sink.patch sends them (a dd guest's 10 ms
# batches hold ~240 points, as an strace of the writer shows; a less
# busy guest's fewer). Records whose entry the writer dropped (queue overflow: the replayer
# outruns it) cost it less; so the per-CPU figure counts written records only.
# RATE paces the replay (points per second) so that the writer keeps up and
# nothing is dropped: then every CPU-second counted went into written records.
# Usage:
#   [BATCH=64] [RATE=400000] bench/audit_writer_throughput.sh [RECORDS] [TRACE]
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${SANDWEAVE_BUILD_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
TK=$BUILD/lib/audit/sandweave-audit-testkit
REPLAY=$BUILD/lib/audit/sandweave-audit-replay
N=${1:-2000000}
TRACE=${2:-$SRC/tests/data/audit/replay/busybox_session.trace}
T=$(mktemp -d /tmp/sw-audit-bench.XXXXXX)
trap '"$TK" finish --dir "$T/w" >/dev/null 2>&1; rm -rf "$T"' EXIT

PID=$("$TK" start --dir "$T/w" --metadata "$SRC/tests/data/audit/runsc_trace_metadata_20221219.txt")
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
TCK=$(getconf CLK_TCK)
c0=$(cpu)
t0=$(date +%s.%N)
"$REPLAY" --socket "$T/w/sink.sock" --trace "$TRACE" --count "$N" --batch "${BATCH:-1}" ${RATE:+--rate "$RATE"} >"$T/replay.json"
"$TK" barrier --dir "$T/w" --sentry-dropped 0 >"$T/barrier.json"
t1=$(date +%s.%N)
c1=$(cpu)
jq -n --slurpfile r "$T/replay.json" --slurpfile b "$T/barrier.json" \
    --argjson n "$N" --argjson wall "$(echo "$t1 - $t0" | bc -l)" \
    --argjson cpu "$(echo "($c1 - $c0) / $TCK" | bc -l)" '
    { records: $n,
      batch: ($ENV.BATCH // "1" | tonumber),
      events_written: $b[0].events,
      dropped: $b[0].dropped,
      log_bytes: $b[0].bytes,
      wall_seconds: ($wall * 1000 | round / 1000),
      writer_cpu_seconds: ($cpu * 100 | round / 100),
      records_per_second_wall: ($n / $wall | round),
      written_records_per_writer_cpu_second: (if $cpu > 0 then ($b[0].events / $cpu | round) else null end),
      target_written_records_per_writer_cpu_second: 1000000 }'
