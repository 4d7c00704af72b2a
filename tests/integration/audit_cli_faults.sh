#!/usr/bin/env bash
# Audit faults through the sandweave CLI: every fault ends with a
# clear error and a truthful status, never a silent success, never a lost or
# corrupted earlier export.
#   - byte limit (template audit_max_bytes: 64KiB)
#   - drops: a SIGSTOPped writer while the guest is chatty (dropped == the
#     sentry's own count from `runsc trace list`)
#   - a SIGKILLed writer mid-episode (writer_died)
#   - a hung writer at export time (writer_unresponsive)
#   - disk full under the state dir (disk_failure, consistent prefix)
#   - an interrupted export (kill -9 mid-copy) and an export onto a full disk
# Needs root (tmpfs mounts) and a working runsc.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "runsc, tmpfs mounts"
require_cmd jq sha256sum
unset SANDWEAVE_HOST
# Short paths: the writer's sink socket path must stay under 100 bytes.
TMPDIR=/tmp sw_setup
MAIN_STATE=$STATE
T=$SCRATCH
DS=""     # the second state dir, on a small tmpfs (the disk-full case)
MOUNTS=() # tmpfs mounts of ours, unmounted at exit

writer_pids() { # state-dir [id] -> pids of the audit writers there
    pgrep -f "__audit-writer --dir $1/sandboxes/${2:-}" 2>/dev/null
}
# Before lib.sh removes $STATE: wake stopped writers (they would hold up rm),
# remove the sandboxes of the second state dir and unmount our tmpfs mounts.
cleanup_faults() {
    local s d pid m
    for s in "$MAIN_STATE" $DS; do
        for pid in $(writer_pids "$s"); do kill -CONT "$pid" 2>/dev/null; done
    done
    if [[ -n "$DS" ]]; then
        for d in "$DS"/sandboxes/*/; do
            [ -d "$d" ] || continue
            SANDWEAVE_STATE_DIR=$DS "$SW" rm "$(basename "$d")" >/dev/null 2>&1
        done
        for pid in $(writer_pids "$DS"); do kill -KILL "$pid" 2>/dev/null; done
        mounts_under "$DS" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
    fi
    for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null; done
    [[ -n "$DS" ]] && rm -rf "$DS"
}
on_cleanup cleanup_faults

side() { jq -r "$2" "$1.status.json"; }
seq_contiguous() { jq -se 'length > 0 and ([.[].seq] == [range(1; length + 1)])' "$1"; }
sidecar_matches_file() {
    [ "$(side "$1" .sha256)" = "$(sha256sum "$1" | cut -d' ' -f1)" ] &&
        [ "$(side "$1" .bytes)" = "$(stat -c %s "$1")" ] &&
        [ "$(side "$1" .last_sequence)" = "$(tail -n1 "$1" | jq .seq)" ]
}
has_reason() { jq -e --arg r "$2" '.reasons | index($r) != null' "$1.status.json"; }
# The sentry's dropped count for the sink, from `runsc trace list` (the
# sandbox's own runsc and root). Output: `Sink: "remote", dropped: N`.
sentry_dropped() { # state-dir id
    local r
    r=$(jq -r .runsc "$1/sandboxes/$2/sandbox.json")
    "$r" --root "$1/runsc" trace list "$2" 2>/dev/null | sed -n 's/.*Sink: "remote", dropped: \([0-9]*\).*/\1/p'
}
# Every file PREFIX* (temp copies of an interrupted export) has mode 0600.
temp_copies_are_0600() {
    local f
    for f in "$1"*; do
        [ -e "$f" ] || continue
        [ "$(stat -c %a "$f")" = 600 ] || { echo "$f: mode $(stat -c %a "$f")"; return 1; }
    done
}
writer_pid() { jq -r '.pid' "$1/sandboxes/$2/audit/writer-state.json"; }
create_audited() { "$SW" create --template "${2:-base}" --audit 2>"$T/create-$1.err"; }

mkdir -p "$T/out"
S=$MAIN_STATE

# ---------------------------------------------------------------- 1. byte limit
cat >"$T/small.yaml" <<'EOF'
extends: base
runtime_options:
  audit: true
  audit_max_bytes: 64KiB
EOF
B=$("$SW" create --template "$T/small.yaml" 2>"$T/create-b.err")
assert_true "byte limit: audited sandbox from a 64KiB template" test -n "$B" -a -d "$S/sandboxes/$B/audit"
"$SW" run "$B" -- /bin/dd if=/dev/zero of=/dev/null bs=1 count=3000 >/dev/null 2>&1
E=$T/out/limit.jsonl
"$SW" --json audit export "$B" "$E" >"$T/limit.json" 2>/dev/null
rc=$?
assert_true "byte limit: export exits 3" test $rc = 3
assert_true "byte limit: complete false, reason byte_limit, max_bytes 65536" \
    jq -e '.complete == false and (.reasons | index("byte_limit") != null) and .max_bytes == 65536' "$E.status.json"
assert_true "byte limit: the writer's log <= 65536 bytes" test "$(stat -c %s "$S/sandboxes/$B/audit/audit.jsonl")" -le 65536
assert_true "byte limit: export <= 65536 bytes, whole lines, seq 1..N" \
    eval 'test "$(stat -c %s "$E")" -le 65536 && seq_contiguous "$E" && sidecar_matches_file "$E"'
assert_true "byte limit: later events are counted as dropped" jq -e '.dropped > 0 and .counters.byte_limit_dropped > 0' "$E.status.json"
"$SW" run "$B" -- /bin/cat /etc/passwd >/dev/null 2>&1
assert_true "byte limit: the guest keeps running" test $? = 0
E2=$T/out/limit2.jsonl
"$SW" audit export "$B" "$E2" >/dev/null 2>&1
rc=$?
assert_true "byte limit: a later export works and stays incomplete (exit 3, byte_limit)" \
    eval 'test $rc = 3 && has_reason "$E2" byte_limit && test "$(side "$E2" .complete)" = false'
assert_true "byte limit: the log stopped growing (same bytes), more dropped" \
    eval 'test "$(side "$E2" .bytes)" = "$(side "$E" .bytes)" && test "$(side "$E2" .dropped)" -gt "$(side "$E" .dropped)"'
"$SW" terminate "$B" >/dev/null 2>&1
"$SW" audit export "$B" "$T/out/limit3.jsonl" >/dev/null 2>&1
rc=$?
assert_true "byte limit: after terminate still exit 3, byte_limit" \
    eval 'test $rc = 3 && has_reason "$T/out/limit3.jsonl" byte_limit'
"$SW" rm "$B" >/dev/null 2>&1

# ---------------------------------------------------------------- 2. drops (SIGSTOPped writer)
D=$(create_audited d)
"$SW" run "$D" -- /bin/true >/dev/null 2>&1
# Happy path first: a healthy writer keeps up with a chatty burst (the
# runtime's 8 MiB send buffer absorbs what the writer has not read yet).
"$SW" run "$D" -- /bin/dd if=/dev/zero of=/dev/null bs=1 count=20000 >/dev/null 2>&1
DROP0=$(sentry_dropped "$S" "$D")
assert_true "drops: a healthy writer loses nothing of dd bs=1 count=20000 (sentry dropped: ${DROP0:-?})" test "${DROP0:-x}" = 0
PD=$(writer_pid "$S" "$D")
assert_true "drops: writer pid known (writer-state.json) and it is the writer of this sandbox" \
    eval 'test -n "$PD" && writer_pids "$S" "$D/" | grep -qx "$PD"'
# 120,000 events of ~250 bytes on average (every write's fd_path is this
# 200-byte path): more than the sentry's socket holds even when the runtime
# batches points (runtime/audit-sink.patch: its 64 KiB messages fill the 8 MiB
# send buffer, counted twice by the kernel, with ~16 MiB of points).
LONG=/tmp/$(printf 'd%.0s' $(seq 100))/$(printf 'f%.0s' $(seq 100))
"$SW" run "$D" -- /bin/mkdir -p "$(dirname "$LONG")" >/dev/null 2>&1
kill -STOP "$PD"
t0=$SECONDS
"$SW" run "$D" -- /bin/dd if=/dev/zero of="$LONG" bs=1 count=60000 >/dev/null 2>&1
rc=$?
assert_true "drops: the guest does not wait for the stopped writer (exit 0, < 20 s)" test $rc = 0 -a $((SECONDS - t0)) -lt 20
kill -CONT "$PD"
sleep 0.5
DROP=$(sentry_dropped "$S" "$D")
assert_true "drops: the sentry reports drops (runsc trace list: $DROP)" test "${DROP:-0}" -gt 0
E=$T/out/drops.jsonl
"$SW" audit export "$D" "$E" >/dev/null 2>&1
rc=$?
assert_true "drops: export exits 3, complete false" test "$rc,$(side "$E" .complete)" = "3,false"
assert_true "drops: dropped == the sentry's count ($DROP)" test "$(side "$E" .dropped)" = "$DROP"
assert_true "drops: runtime_dropped_reported == the sentry's count" test "$(side "$E" .runtime_dropped_reported)" = "$DROP"
assert_true "drops: reason runtime_dropped (the sentry dropped them, not the writer's queue)" eval 'has_reason "$E" runtime_dropped && ! has_reason "$E" queue_overflow'
assert_true "drops: gap records add up to the loss" \
    jq -se --argjson d "$DROP" '[.[] | select(.point == "gap") | .lost] | add == $d' "$E"
assert_true "drops: export is whole lines, seq 1..N, sidecar matches" eval 'seq_contiguous "$E" && sidecar_matches_file "$E"'
"$SW" run "$D" -- /bin/cat /etc/passwd >/dev/null 2>&1
"$SW" audit export "$D" "$T/out/drops2.jsonl" >/dev/null 2>&1
rc=$?
assert_true "drops: later exports stay incomplete and keep the count" \
    eval 'test $rc = 3 && test "$(side "$T/out/drops2.jsonl" .dropped)" -ge "$DROP"'
assert_true "drops: records after the writer resumed are written" \
    jq -se 'any(.point == "syscall/openat/exit" and .pathname == "/etc/passwd")' "$T/out/drops2.jsonl"
"$SW" rm "$D" >/dev/null 2>&1

# ---------------------------------------------------------------- 3. writer killed
K=$(create_audited k)
"$SW" run "$K" -- /bin/cat /etc/passwd >/dev/null 2>&1
"$SW" audit export "$K" "$T/out/k-before.jsonl" >/dev/null 2>&1
assert_true "killed: an export before the kill is complete" test "$(side "$T/out/k-before.jsonl" .complete)" = true
PK=$(writer_pid "$S" "$K")
kill -KILL "$PK"
sleep 0.2
# Fails closed: no new command, copy or detached command runs unaudited.
"$SW" run "$K" -- /bin/cat /etc/passwd >"$T/k-run.out" 2>"$T/k-run.err"
rc=$?
assert_true "killed: run is refused (exit 125), one line naming the dead writer, nothing ran" \
    eval 'test $rc = 125 && test "$(wc -l <"$T/k-run.err")" = 1 && grep -q "audit writer of sandbox $K is gone (it died" "$T/k-run.err" && test ! -s "$T/k-run.out"'
"$SW" run --detach "$K" -- /bin/sleep 30 >/dev/null 2>"$T/k-detach.err"
rc=$?
assert_true "killed: run --detach is refused (exit 125)" eval 'test $rc = 125 && grep -q "runs nothing unaudited" "$T/k-detach.err"'
echo x >"$T/k-in.txt"
"$SW" cp "$T/k-in.txt" "$K:/tmp/k-in.txt" >/dev/null 2>"$T/k-cpin.err"
rc=$?
assert_true "killed: cp in is refused (exit 1)" eval 'test $rc = 1 && grep -q "cannot copy files into a sandbox: the audit writer" "$T/k-cpin.err"'
"$SW" cp "$K:/etc/passwd" "$T/k-out.txt" >/dev/null 2>"$T/k-cpout.err"
rc=$?
assert_true "killed: cp out is refused (exit 1), nothing written" eval 'test $rc = 1 && grep -q "cannot copy files out of a sandbox: the audit writer" "$T/k-cpout.err" && test ! -e "$T/k-out.txt"'
assert_true "killed: inspect says it failed and why (it runs nothing more)" \
    eval '"$SW" --json inspect "$K" | jq -e ".state == \"failed\" and (.error | test(\"audit writer is gone\"))" >/dev/null'
E=$T/out/killed.jsonl
"$SW" --json audit export "$K" "$E" >"$T/killed.json" 2>"$T/killed.err"
rc=$?
assert_true "killed: export exits 3 (written, incomplete)" test $rc = 3
assert_true "killed: complete false, reason writer_died" \
    eval 'test "$(side "$E" .complete)" = false && has_reason "$E" writer_died'
assert_true "killed: the exported prefix is consistent (seq 1..N, sha256, bytes)" \
    eval 'seq_contiguous "$E" && sidecar_matches_file "$E"'
assert_true "killed: the prefix holds the earlier export" cmp -n "$(stat -c %s "$T/out/k-before.jsonl")" "$T/out/k-before.jsonl" "$E"
"$SW" --json audit status "$K" >"$T/k-status.json" 2>/dev/null
assert_true "killed: audit status says writer_died, not complete" \
    jq -e '.complete == false and (.reasons | index("writer_died") != null)' "$T/k-status.json"
"$SW" terminate "$K" >/dev/null 2>"$T/k-term.err"
rc=$?
assert_true "killed: terminate still works (exit 0) and warns" eval 'test $rc = 0 && grep -qi incomplete "$T/k-term.err"'
E3=$T/out/killed-after.jsonl
"$SW" audit export "$K" "$E3" >/dev/null 2>&1
rc=$?
assert_true "killed: export after terminate is never complete (exit 3, writer_died)" \
    eval 'test $rc = 3 && has_reason "$E3" writer_died && test "$(side "$E3" .complete)" = false'
assert_true "killed: dropped never decreases across exports ($(side "$E" .dropped) -> $(side "$E3" .dropped))" \
    test "$(side "$E3" .dropped)" -ge "$(side "$E" .dropped)"
assert_true "killed: the merged state was saved (writer_died, not finished, sentry's count kept)" \
    jq -e --argjson d "$(side "$E" .counters.runtime_dropped)" \
        '.writer_died == true and .finished == false and .runtime_dropped >= $d' "$S/sandboxes/$K/audit/writer-state.json"
"$SW" --json audit status "$K" >"$T/k-status2.json" 2>/dev/null
assert_true "killed: audit status after terminate keeps the loss, never complete" \
    jq -e --argjson d "$(side "$E" .dropped)" '.complete == false and .dropped >= $d and (.reasons | index("writer_died") != null)' "$T/k-status2.json"
"$SW" rm "$K" >/dev/null 2>&1
assert_true "killed: rm works" test $? = 0 -a ! -e "$S/sandboxes/$K"

# ---------------------------------------------------------------- 4. interrupted exports
X=$(create_audited x)
"$SW" run "$X" -- /bin/cat /etc/passwd >/dev/null 2>&1
A=$T/out/older.jsonl
"$SW" audit export "$X" "$A" >/dev/null 2>&1
assert_true "interrupt: an older export A is complete" test "$?,$(side "$A" .complete)" = "0,true"
before=$(sha256sum "$A" "$A.status.json")
# A destination on a small tmpfs: a first (small) export fits, a later one does not.
FULL=$T/full
mkdir -p "$FULL"
mount -t tmpfs -o size=400k tmpfs "$FULL" && MOUNTS+=("$FULL")
C=$FULL/c.jsonl
"$SW" audit export "$X" "$C" >/dev/null 2>&1
assert_true "interrupt: a small export onto the small tmpfs is complete" test "$?,$(side "$C" .complete)" = "0,true"
# A big log (~15 MB): drops may happen, they do not matter here.
"$SW" run "$X" -- /bin/dd if=/dev/zero of=/dev/null bs=1 count=20000 >/dev/null 2>&1
"$SW" audit export "$X" "$C" >"$T/full.out" 2>"$T/full.err"
rc=$?
assert_true "interrupt: export onto a full disk fails (non-zero, not 3)" test $rc != 0 -a $rc != 3
assert_true "interrupt: a one-line error naming the destination" grep -q "$C" "$T/full.err"
assert_true "interrupt: no sidecar at the full destination claims complete" \
    test "$(jq -r .complete "$C.status.json" 2>/dev/null || echo absent)" != true
assert_true "interrupt: no temp file left on the full disk" test -z "$(find "$FULL" -name '.c.jsonl.tmp-*')"
assert_true "interrupt: older export A untouched" test "$(sha256sum "$A" "$A.status.json")" = "$before"
# kill -9 of `sandweave audit export` while it copies the big log.
B2=$T/out/big.jsonl
"$SW" audit export "$X" "$B2" >/dev/null 2>&1
assert_true "interrupt: a first big export to B exists with its sidecar" test -f "$B2" -a -f "$B2.status.json"
killed_mid_copy=no
for attempt in 1 2 3 4 5; do
    "$SW" audit export "$X" "$B2" >/dev/null 2>&1 &
    ep=$!
    for _ in $(seq 1 20000); do
        if compgen -G "$T/out/.big.jsonl.tmp-*" >/dev/null; then
            kill -KILL "$ep" 2>/dev/null && killed_mid_copy=yes
            break
        fi
        kill -0 "$ep" 2>/dev/null || break
    done
    wait "$ep" 2>/dev/null
    [ $killed_mid_copy = yes ] && break
done
if [ $killed_mid_copy = yes ]; then
    pass "interrupt: export killed (SIGKILL) mid-copy (attempt $attempt)"
    assert_true "interrupt: after the kill no sidecar at B claims complete" \
        test "$(jq -r .complete "$B2.status.json" 2>/dev/null || echo absent)" != true
    assert_true "interrupt: a partial temp copy left behind is 0600" temp_copies_are_0600 "$T/out/.big.jsonl.tmp-"
else
    fail "interrupt: could not catch the export mid-copy (5 attempts)"
fi
assert_true "interrupt: older export A still untouched" test "$(sha256sum "$A" "$A.status.json")" = "$before"
"$SW" audit export "$X" "$B2" >/dev/null 2>&1
assert_true "interrupt: the next export to B is consistent again" eval 'sidecar_matches_file "$B2" && seq_contiguous "$B2"'
# The killed export could not remove its temp copy; the next export of the same path does.
assert_true "interrupt: the next export to B removed the killed one's temp copy" \
    test -z "$(find "$T/out" -name '.big.jsonl.tmp-*')"
# Only ours: another name, or a file another user owns, stays.
touch "$T/out/.big.jsonl.tmp-notours" "$T/out/.big.jsonl.tmp-0123abcd"
chown 1001 "$T/out/.big.jsonl.tmp-0123abcd"
"$SW" audit export "$X" "$B2" >/dev/null 2>&1
assert_true "interrupt: files that only look like temp copies stay" \
    test -e "$T/out/.big.jsonl.tmp-notours" -a -e "$T/out/.big.jsonl.tmp-0123abcd"
rm -f "$T/out/.big.jsonl.tmp-notours" "$T/out/.big.jsonl.tmp-0123abcd"
"$SW" rm "$X" >/dev/null 2>&1

# ---------------------------------------------------------------- 5. disk full (state dir on a small tmpfs)
DS=$(mktemp -d /tmp/swd.XXXXXX)
if mount -t tmpfs -o size=6m,mode=0700 tmpfs "$DS"; then
    MOUNTS+=("$DS")
    export SANDWEAVE_STATE_DIR=$DS
    F=$(create_audited f)
    assert_true "disk full: audited sandbox on a 6 MiB state dir" test -n "$F"
    PF=$(writer_pid "$DS" "$F")
    "$SW" run "$F" -- /bin/dd if=/dev/zero of=/dev/null bs=1 count=20000 >/dev/null 2>&1
    assert_true "disk full: the guest keeps running (exit 0)" test $? = 0
    assert_true "disk full: the state fs is full" test "$(df --output=avail -k "$DS" | tail -1)" -lt 256
    E=$T/out/full.jsonl
    "$SW" --json audit export "$F" "$E" >"$T/diskfull.json" 2>"$T/diskfull.err"
    rc=$?
    assert_true "disk full: export exits 3, complete false, reason disk_failure" \
        eval 'test $rc = 3 && test "$(side "$E" .complete)" = false && has_reason "$E" disk_failure'
    assert_true "disk full: lost events are counted (dropped > 0)" jq -e '.dropped > 0 and .counters.disk_dropped > 0' "$E.status.json"
    assert_true "disk full: the writer did not crash" kill -0 "$PF"
    assert_true "disk full: consistent prefix (every line JSON, seq 1..N, sha256, bytes)" \
        eval 'jq -c . "$E" >/dev/null && seq_contiguous "$E" && sidecar_matches_file "$E"'
    "$SW" run "$F" -- /bin/cat /etc/passwd >/dev/null 2>&1
    "$SW" audit export "$F" "$T/out/full2.jsonl" >/dev/null 2>&1
    rc=$?
    assert_true "disk full: a later export still says disk_failure (exit 3)" \
        eval 'test $rc = 3 && has_reason "$T/out/full2.jsonl" disk_failure && seq_contiguous "$T/out/full2.jsonl"'
    "$SW" terminate "$F" >/dev/null 2>&1
    assert_true "disk full: terminate works on a full disk" test $? = 0
    assert_true "disk full: terminate stopped the writer" test -z "$(writer_pids "$DS" "$F/")"
    "$SW" audit export "$F" "$T/out/full3.jsonl" >/dev/null 2>&1
    rc=$?
    assert_true "disk full: export after terminate: exit 3, disk_failure" \
        eval 'test $rc = 3 && has_reason "$T/out/full3.jsonl" disk_failure && sidecar_matches_file "$T/out/full3.jsonl"'
    "$SW" rm "$F" >/dev/null 2>&1
    assert_true "disk full: rm works" test $? = 0 -a ! -e "$DS/sandboxes/$F"
    export SANDWEAVE_STATE_DIR=$MAIN_STATE
else
    fail "disk full: cannot mount a tmpfs"
fi

# ---------------------------------------------------------------- 6. hung writer at export time
H=$(create_audited h)
"$SW" run "$H" -- /bin/true >/dev/null 2>&1
PH=$(writer_pid "$S" "$H")
kill -STOP "$PH"
t0=$SECONDS
E=$T/out/hung.jsonl
"$SW" audit export "$H" "$E" >/dev/null 2>&1
rc=$?
el=$((SECONDS - t0))
kill -CONT "$PH"
assert_true "hung writer: export gives up (exit 3) in bounded time (${el}s <= 60s)" test $rc = 3 -a $el -le 60
assert_true "hung writer: complete false, reason writer_unresponsive" \
    eval 'test "$(side "$E" .complete)" = false && has_reason "$E" writer_unresponsive'
assert_true "hung writer: the exported prefix is consistent" eval 'seq_contiguous "$E" && sidecar_matches_file "$E"'
"$SW" rm "$H" >/dev/null 2>&1

finish
