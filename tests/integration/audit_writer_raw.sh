#!/usr/bin/env bash
# The audit writer against the real runsc, without the sandweave CLI: the
# writer is driven through sandweave-audit-testkit (the public audit API
# behind a tiny command line) and sandboxes are plain `runsc run --detach`
# with the writer's --pod-init-config. Needs root (runsc, tmpfs mounts).
#
# Covers: a complete export (execve argv, openat path, clone/exit, raw
# records, seq 1..N, sha256, 0600), the 64 KiB byte limit, a SIGSTOPped
# writer (dropped == the sentry's own count), a SIGKILLed writer, hostile
# peers on the sink socket, failed exports, a full disk, an idle writer that
# sleeps, and a writer whose directory goes (deleted, or its parent renamed
# as rm does) without a finish.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_env SANDWEAVE_AUDIT_TESTKIT
TK=$SANDWEAVE_AUDIT_TESTKIT
RUNSC=${RUNSC:-runsc}
require_root "runsc, tmpfs mounts"
require_cmd "$RUNSC" jq python3 busybox
require_helpers audit_hostile_peer.py
[ -x "$TK" ] || fatal "the audit testkit is built" "$TK is missing (cmake --build build)"

# Short paths: the writer's sink socket path must stay under 100 bytes.
TMPDIR=/tmp test_setup
T=$SCRATCH
# Container ids unique to this run: runsc keys some host state by id alone.
S=sw$$-s
R=$T/runsc-root
SANDBOXES=()
MOUNTS=()
WRITER_DIRS=()
cleanup_raw() {
    for id in "${SANDBOXES[@]}"; do
        "$RUNSC" --root "$R" kill "$id" KILL >/dev/null 2>&1
        "$RUNSC" --root "$R" delete -force "$id" >/dev/null 2>&1
    done
    for d in "${WRITER_DIRS[@]}"; do
        if [ -f "$d/writer-state.json" ]; then
            pid=$(jq -r .pid "$d/writer-state.json" 2>/dev/null)
            [ -n "$pid" ] && [ "$pid" != 0 ] && kill -CONT "$pid" 2>/dev/null
            "$TK" finish --dir "$d" >/dev/null 2>&1
        fi
    done
    for m in "${MOUNTS[@]}"; do umount -l "$m" 2>/dev/null; done
}
on_cleanup cleanup_raw

META=$T/metadata.txt
if ! "$RUNSC" trace metadata >"$META" 2>/dev/null; then
    cp "$SANDWEAVE_SOURCE_DIR/tests/data/audit/runsc_trace_metadata_20221219.txt" "$META"
fi
RUNTIME_VERSION=$("$RUNSC" --version | head -1)

# A busybox rootfs with an unprivileged user 1001.
B=$T/bundle
mkdir -p "$B/rootfs/bin" "$B/rootfs/etc" "$B/rootfs/proc" "$B/rootfs/tmp" "$B/rootfs/dev"
cp "$(command -v busybox)" "$B/rootfs/bin/busybox"
for a in sh id ls cat sleep true echo; do ln -sf busybox "$B/rootfs/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:1001:1001::/tmp:/bin/sh\n' >"$B/rootfs/etc/passwd"
printf 'root:x:0:\nagent:x:1001:\n' >"$B/rootfs/etc/group"
chmod 1777 "$B/rootfs/tmp"
(cd "$B" && "$RUNSC" spec -- /bin/sleep 100000) || fatal "runsc spec makes the bundle's config.json"
sed -i 's/"terminal": true/"terminal": false/' "$B/config.json"

start_writer() { # dir [max-bytes] -> pid
    local dir=$1 max=${2:-1073741824}
    WRITER_DIRS+=("$dir")
    "$TK" start --dir "$dir" --metadata "$META" --sandbox-id "$(basename "$dir")" \
        --max-bytes "$max" --runtime-version "$RUNTIME_VERSION"
}
start_sandbox() { # writer-dir id
    local dir=$1 id=$2
    "$TK" pod-config --dir "$dir" --metadata "$META" >"$T/$id.pod.json" || return 1
    SANDBOXES+=("$id")
    "$RUNSC" --root "$R" --network=none --platform=ptrace --pod-init-config "$T/$id.pod.json" \
        run --detach --bundle "$B" "$id"
}
guest() { # id shell-command (as 1001:1001)
    "$RUNSC" --root "$R" exec --user 1001:1001 "$1" /bin/sh -c "$2"
}
sentry_dropped() { # id -> the sentry's count, or "unavailable"
    "$RUNSC" --root "$R" trace list "$1" >"$T/trace-list.txt" 2>&1
    "$TK" trace-list-dropped "$T/trace-list.txt"
}
side() { jq -r "$2" "$1.status.json"; }
mode() { stat -c %a "$1"; }

# ---------------------------------------------------------------- 1. happy path
W1=$T/w1
start_writer "$W1" >/dev/null || fail "writer 1 starts"
start_sandbox "$W1" "${S}1" || fail "sandbox 1 starts"
# Full paths: busybox sh would run bare applet names in-process (no execve).
guest "${S}1" '/bin/id; /bin/ls /proc; /bin/cat /etc/passwd' >"$T/s1.out" 2>&1
assert_true "guest commands ran (id output)" grep -q 'uid=1001' "$T/s1.out"
D=$(sentry_dropped "${S}1")
assert_true "runsc trace list reports the sink's dropped count" test "$D" = 0
mkdir -p "$T/out"
"$TK" export --dir "$W1" --dest "$T/out/e1.jsonl" --sentry-dropped "$D" >"$T/e1.json"
rc=$?
E=$T/out/e1.jsonl
assert_true "export exits 0 (complete)" test $rc = 0
assert_true "sidecar complete true" test "$(side "$E" .complete)" = true
assert_true "sidecar reasons empty, dropped 0" test "$(side "$E" '.reasons|length'),$(side "$E" .dropped)" = "0,0"
assert_true "sidecar sha256 matches the exported bytes" \
    test "$(side "$E" .sha256)" = "$(sha256sum "$E" | cut -d' ' -f1)"
assert_true "sidecar bytes == file size" test "$(side "$E" .bytes)" = "$(stat -c %s "$E")"
assert_true "sidecar events/last_sequence match the lines" \
    test "$(side "$E" .last_sequence)" = "$(wc -l <"$E")"
assert_true "sidecar lists the points with fields" \
    test "$(side "$E" '.points["syscall/openat/exit"][0]')" = fd_path
assert_true "sidecar has sandbox_id, runtime_version, exported_at, path" \
    test "$(side "$E" '[.sandbox_id,.runtime_version,.exported_at,.path]|map(length>0)|all')" = true
assert_true "export and sidecar are 0600" test "$(mode "$E")$(mode "$E.status.json")" = 600600
assert_true "writer dir 0700, log 0600" test "$(mode "$W1")$(mode "$W1/audit.jsonl")" = 700600
assert_true "seq strictly increasing from 1" jq -se '[.[].seq] == [range(1; length+1)]' "$E"
assert_true "every record has seq, point, dropped" jq -se 'all(has("seq") and has("point") and has("dropped"))' "$E"
assert_true "container/start recorded" jq -se 'any(.point=="container/start")' "$E"
for cmd in id ls cat; do
    assert_true "execve record with argv for $cmd" \
        jq -se --arg c "/bin/$cmd" 'any((.point=="sentry/execve" or .point=="syscall/execve/exit") and .argv[0]==$c)' "$E"
done
assert_true "execve argv of ls includes /proc" jq -se 'any(.point=="sentry/execve" and .argv==["/bin/ls","/proc"])' "$E"
assert_true "openat of /etc/passwd with its path" \
    jq -se 'any(.point=="syscall/openat/exit" and .pathname=="/etc/passwd")' "$E"
assert_true "read records carry fd_path (optional field)" \
    jq -se 'any(.point=="syscall/read/exit" and .fd_path=="/etc/passwd")' "$E"
assert_true "clone records" jq -se 'any(.point=="sentry/clone")' "$E"
assert_true "exit records" jq -se 'any(.point=="sentry/task_exit") and any(.point=="sentry/exit_notify_parent")' "$E"
assert_true "raw syscall records with sysno and args" \
    jq -se 'any((.point|startswith("syscall/sysno/")) and has("sysno"))' "$E"
assert_true "context: uid 1001 on guest records" \
    jq -se 'any(.point=="sentry/execve" and .context_data.credentials.effective_uid==1001)' "$E"
# terminate: final barrier, then the sandbox goes; the log stays exportable and complete.
D=$(sentry_dropped "${S}1")
"$TK" finish --dir "$W1" --sentry-dropped "$D" >"$T/fin1.json"
assert_true "finish is complete" test "$(jq -r .complete "$T/fin1.json")" = true
"$RUNSC" --root "$R" kill "${S}1" KILL >/dev/null 2>&1
"$RUNSC" --root "$R" delete -force "${S}1" >/dev/null 2>&1
"$TK" export --dir "$W1" --dest "$T/out/after.jsonl" --sentry-dropped unavailable >/dev/null
assert_true "export after terminate still complete" test "$(side "$T/out/after.jsonl" .complete)" = true
assert_true "export after terminate has at least the earlier records" \
    test "$(side "$T/out/after.jsonl" .events)" -ge "$(side "$E" .events)"
assert_true "writer exited after finish" test ! -S "$W1/control.sock"

# ---------------------------------------------------------------- 2. byte limit
W2=$T/w2
start_writer "$W2" 65536 >/dev/null
start_sandbox "$W2" "${S}2"
guest "${S}2" 'i=0; while [ $i -lt 100 ]; do /bin/cat /etc/passwd >/dev/null; i=$((i+1)); done'
"$TK" export --dir "$W2" --dest "$T/out/e2.jsonl" --sentry-dropped "$(sentry_dropped "${S}2")" >/dev/null
rc=$?
assert_true "byte limit: export exits 3 (incomplete)" test $rc = 3
assert_true "byte limit: complete false, reason byte_limit" \
    test "$(side "$T/out/e2.jsonl" '.complete,(.reasons|index("byte_limit")!=null)' | tr '\n' ,)" = "false,true,"
assert_true "byte limit: log <= 64 KiB" test "$(stat -c %s "$W2/audit.jsonl")" -le 65536
assert_true "byte limit: export <= 64 KiB and whole lines" jq -se 'length>0' "$T/out/e2.jsonl"
assert_true "byte limit: later events counted as dropped" test "$(side "$T/out/e2.jsonl" .dropped)" -gt 0

# ---------------------------------------------------------------- 3. SIGSTOP
W3=$T/w3
P3=$(start_writer "$W3")
start_sandbox "$W3" "${S}3"
guest "${S}3" '/bin/true'
kill -STOP "$P3"
# More events than the sentry's socket holds, also with batched points
# (runtime/audit-sink.patch: its 8 MiB send buffer holds ~16 MiB of them).
guest "${S}3" 'i=0; while [ $i -lt 30000 ]; do echo $i >/tmp/f; i=$((i+1)); done'
kill -CONT "$P3"
sleep 1
D3=$(sentry_dropped "${S}3")
"$TK" export --dir "$W3" --dest "$T/out/e3.jsonl" --sentry-dropped "$D3" >/dev/null
rc=$?
assert_true "SIGSTOP: the sentry dropped events ($D3)" test "$D3" -gt 0
assert_true "SIGSTOP: dropped == the sentry's count" test "$(side "$T/out/e3.jsonl" .dropped)" = "$D3"
assert_true "SIGSTOP: complete false (exit 3), runtime_dropped" \
    test "$rc,$(side "$T/out/e3.jsonl" '.reasons|index("runtime_dropped")!=null')" = "3,true"
assert_true "SIGSTOP: a gap record says how many were lost" \
    jq -se --argjson d "$D3" '[.[]|select(.point=="gap")|.lost]|add == $d' "$T/out/e3.jsonl"
assert_true "SIGSTOP: records after the gap are still written" \
    jq -se 'any(.point=="syscall/openat/exit" and .pathname=="/tmp/f")' "$T/out/e3.jsonl"

# ---------------------------------------------------------------- 4. SIGKILL
W4=$T/w4
P4=$(start_writer "$W4")
start_sandbox "$W4" "${S}4"
guest "${S}4" '/bin/cat /etc/passwd >/dev/null'
sleep 1.5 # let the writer persist a state
kill -KILL "$P4"
guest "${S}4" '/bin/cat /etc/passwd >/dev/null'
"$TK" export --dir "$W4" --dest "$T/out/e4.jsonl" --sentry-dropped "$(sentry_dropped "${S}4")" >/dev/null
rc=$?
assert_true "SIGKILL: export written but incomplete (exit 3)" test $rc = 3
assert_true "SIGKILL: reason writer_died" test "$(side "$T/out/e4.jsonl" '.reasons|index("writer_died")!=null')" = true
assert_true "SIGKILL: exported prefix is whole lines with seq 1..N" \
    jq -se 'length>0 and ([.[].seq] == [range(1; length+1)])' "$T/out/e4.jsonl"
assert_true "SIGKILL: sha256 matches" \
    test "$(side "$T/out/e4.jsonl" .sha256)" = "$(sha256sum "$T/out/e4.jsonl" | cut -d' ' -f1)"
"$TK" finish --dir "$W4" >"$T/fin4.json"
assert_true "SIGKILL: finish on a dead writer reports it" test "$(jq -r '.reasons|index("writer_died")!=null' "$T/fin4.json")" = true

# ---------------------------------------------------------------- 5. hostile peers
W5=$T/w5
P5=$(start_writer "$W5")
python3 "$HELPERS/audit_hostile_peer.py" "$W5/sink.sock" bad-handshakes
python3 "$HELPERS/audit_hostile_peer.py" "$W5/sink.sock" junk-stream
assert_true "hostile: writer survives garbage" kill -0 "$P5"
start_sandbox "$W5" "${S}5" || fail "hostile: sandbox starts after hostile peers"
out=$(python3 "$HELPERS/audit_hostile_peer.py" "$W5/sink.sock" intruder)
assert_true "hostile: a second connection during the sandbox is refused" test "$out" = rejected
guest "${S}5" '/bin/cat /etc/passwd >/dev/null'
"$TK" export --dir "$W5" --dest "$T/out/e5.jsonl" --sentry-dropped "$(sentry_dropped "${S}5")" >/dev/null
E5=$T/out/e5.jsonl
assert_true "hostile: writer still alive" kill -0 "$P5"
assert_true "hostile: the real sandbox is still logged" \
    jq -se 'any(.point=="sentry/execve" and .argv[0]=="/bin/cat")' "$E5"
assert_true "hostile: bad handshakes and the intruder counted as rejected (>=5)" \
    test "$(side "$E5" .counters.rejected_connections)" -ge 5
assert_true "hostile: unknown type kept raw and counted" \
    jq -se 'any(.point=="writer/unknown_message" and .type==77 and .raw=="AQID")' "$E5"
assert_true "hostile: malformed messages counted (3)" test "$(side "$E5" .counters.malformed)" = 3
assert_true "hostile: oversized message counted as truncated" test "$(side "$E5" .counters.truncated)" = 1
assert_true "hostile: not complete (multiple_sentry_connections)" \
    test "$(side "$E5" '.complete,(.reasons|index("multiple_sentry_connections")!=null)' | tr '\n' ,)" = "false,true,"
assert_true "hostile: seq still 1..N" jq -se '[.[].seq] == [range(1; length+1)]' "$E5"

# ---------------------------------------------------------------- 6. failed exports
before=$(sha256sum "$E" "$E.status.json")
"$TK" export --dir "$W5" --dest "$T/missing/dir/x.jsonl" --sentry-dropped 0 >/dev/null 2>&1
rc=$?
assert_true "export into a missing dir fails (non-zero, not 3)" test $rc != 0 -a $rc != 3
assert_true "export into a missing dir leaves no sidecar" test ! -e "$T/missing/dir/x.jsonl.status.json"
mkdir -p "$T/ro"
mount -t tmpfs -o size=1m tmpfs "$T/ro" && MOUNTS+=("$T/ro")
echo '{"complete":true}' >"$T/ro/x.jsonl.status.json"
mount -o remount,ro "$T/ro"
"$TK" export --dir "$W5" --dest "$T/ro/x.jsonl" --sentry-dropped 0 >/dev/null 2>&1
rc=$?
assert_true "export into a read-only dir fails" test $rc != 0 -a $rc != 3
assert_true "read-only: the old sidecar there claims nothing new (unchanged, cannot be removed)" \
    grep -q complete "$T/ro/x.jsonl.status.json"
assert_true "earlier export elsewhere untouched" test "$(sha256sum "$E" "$E.status.json")" = "$before"

# ---------------------------------------------------------------- 7. disk full
mkdir -p "$T/small"
mount -t tmpfs -o size=512k,mode=0700 tmpfs "$T/small" && MOUNTS+=("$T/small")
W7=$T/small/w7
P7=$(start_writer "$W7")
start_sandbox "$W7" "${S}7"
guest "${S}7" 'i=0; while [ $i -lt 300 ]; do /bin/cat /etc/passwd >/dev/null; i=$((i+1)); done'
"$TK" export --dir "$W7" --dest "$T/out/e7.jsonl" --sentry-dropped "$(sentry_dropped "${S}7")" >/dev/null
rc=$?
E7=$T/out/e7.jsonl
assert_true "disk full: writer did not crash" kill -0 "$P7"
assert_true "disk full: export exits 3, reason disk_failure" \
    test "$rc,$(side "$E7" '.reasons|index("disk_failure")!=null')" = "3,true"
assert_true "disk full: events lost are counted" test "$(side "$E7" .counters.disk_dropped)" -gt 0
assert_true "disk full: consistent prefix (whole lines, seq 1..N)" \
    jq -se 'length>0 and ([.[].seq] == [range(1; length+1)])' "$E7"
assert_true "disk full: sha256 and bytes match" \
    test "$(side "$E7" .sha256),$(side "$E7" .bytes)" = "$(sha256sum "$E7" | cut -d' ' -f1),$(stat -c %s "$E7")"
D7=$(sentry_dropped "${S}7")
"$TK" finish --dir "$W7" --sentry-dropped "$D7" >"$T/fin7.json"
assert_true "disk full: final state persisted (finish reports disk_failure)" \
    test "$(jq -r '.reasons|index("disk_failure")!=null' "$T/fin7.json")" = true

# ------------------------------------------------- 8. idle, then its directory goes
# Context switches of every thread of PID (voluntary and not), summed.
switches() {
    cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ { n += $2 } END { print n + 0 }'
}
gone() { ! kill -0 "$1" 2>/dev/null; }
mkdir -p "$T/w8"
W8=$T/w8/audit
P8=$(start_writer "$W8")
start_sandbox "$W8" "${S}8"
guest "${S}8" '/bin/ls / >/dev/null'
# Its log is synced about a second after the last record, and its buffers
# given back a second after that; from then on nothing is due.
sleep 3
before=$(switches "$P8")
sleep 3
after=$(switches "$P8")
assert_eq "an idle writer does not wake (context switches over 3 s)" 0 $((after - before))
mv "$T/w8" "$T/w8-renamed"
assert_true "the writer stops once its directory's parent is renamed away" wait_for 5 gone "$P8"
W9=$T/w9
P9=$(start_writer "$W9")
rm -rf "$W9"
assert_true "the writer stops once its directory is deleted" wait_for 5 gone "$P9"

finish
