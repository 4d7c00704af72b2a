#!/usr/bin/env bash
# Export and verify speed: builds a ~1 GiB audit log by replaying a recorded
# trace, then times `audit export` (barrier + copy + sha256 + fsync + sidecar)
# against `cp` of the same log, and against `cp` + `sync` (cp does not make its
# copy durable; export must), and `sandweave audit verify` of the export (chain
# of every line, seq, gaps, points, sha256) against `sha256sum` of it. All
# reads are from the page cache (the log was just written). Target: export
# within 1.5x of cp. Usage:
#   bench/audit_export_speed.sh [LOG_BYTES]
set -eu
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${SANDWEAVE_BUILD_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
TK=$BUILD/lib/audit/sandweave-audit-testkit
REPLAY=$BUILD/lib/audit/sandweave-audit-replay
SW=$BUILD/sandweave
SIZE=${1:-1073741824}
T=$(mktemp -d /tmp/sw-audit-bench.XXXXXX)
trap '"$TK" finish --dir "$T/w" >/dev/null 2>&1; rm -rf "$T"' EXIT

"$TK" start --dir "$T/w" --metadata "$SRC/tests/data/audit/runsc_trace_metadata_20221219.txt" \
    --max-bytes $((SIZE * 2)) >/dev/null
TRACE=$SRC/tests/data/audit/replay/busybox_session.trace
# ~394 bytes of JSONL per replayed record (measured 2026-12-01; 306 before the chain).
N=$((SIZE / 394))
"$REPLAY" --socket "$T/w/sink.sock" --trace "$TRACE" --count "$N" >/dev/null
"$TK" barrier --dir "$T/w" --sentry-dropped 0 >/dev/null
LOG=$T/w/audit.jsonl
sync
now() { date +%s.%N; }
t0=$(now); cp "$LOG" "$T/cp.jsonl"; t1=$(now)
sync; t2=$(now)
rm -f "$T/cp.jsonl"; sync
t3=$(now); "$TK" export --dir "$T/w" --dest "$T/export.jsonl" --sentry-dropped 0 >"$T/export.json" || true; t4=$(now)
t5=$(now); sha256sum "$T/export.jsonl" >/dev/null; t6=$(now)
t7=$(now); vrc=0; "$SW" audit verify "$T/export.jsonl" >"$T/verify.out" || vrc=$?; t8=$(now)
cp_s=$(echo "$t1 - $t0" | bc -l)
sha_s=$(echo "$t6 - $t5" | bc -l)
ver_s=$(echo "$t8 - $t7" | bc -l)
cps_s=$(echo "$t2 - $t0" | bc -l)
ex_s=$(echo "$t4 - $t3" | bc -l)
jq -n --argjson bytes "$(stat -c %s "$T/export.jsonl")" --argjson cp "$cp_s" --argjson cps "$cps_s" \
    --argjson ex "$ex_s" --argjson sha "$sha_s" --argjson ver "$ver_s" --argjson vrc "$vrc" \
    --slurpfile st "$T/export.json" '
    { log_bytes: $bytes,
      complete: $st[0].complete,
      cp_seconds: ($cp * 1000 | round / 1000),
      cp_plus_sync_seconds: ($cps * 1000 | round / 1000),
      export_seconds: ($ex * 1000 | round / 1000),
      export_vs_cp: ($ex / $cp * 100 | round / 100),
      export_vs_cp_plus_sync: ($ex / $cps * 100 | round / 100),
      sha256sum_seconds: ($sha * 1000 | round / 1000),
      verify_seconds: ($ver * 1000 | round / 1000),
      verify_exit: $vrc,
      verify_vs_sha256sum: ($ver / $sha * 100 | round / 100),
      target_ratio: 1.5 }'
