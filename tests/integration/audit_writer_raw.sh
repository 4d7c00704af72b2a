#!/usr/bin/env bash
# The audit writer against the real runsc, without the sandweave CLI: the
# writer is driven through sandweave-audit-testkit (the public audit API
# behind a tiny command line) and sandboxes are plain `runsc run --detach`
# with the writer's --pod-init-config. Needs root (runsc, tmpfs mounts).
#
# Covers: a complete export (execve argv, openat path, clone/exit, raw
# records, seq 1..N, sha256, 0600), the 64 KiB byte limit, a SIGSTOPped
# writer (dropped == the sentry's own count), a SIGKILLed writer, hostile
# peers on the sink socket, failed exports, and a full disk.

set -u

SRC=${SANDWEAVE_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
BUILD=${SANDWEAVE_BUILD_DIR:-/work/build-audit}
TK=${AUDIT_TESTKIT:-$BUILD/lib/audit/sandweave-audit-testkit}
RUNSC=${RUNSC:-runsc}

pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   - $*"; }
bad() { fail=$((fail + 1)); echo "FAIL - $*"; }
check() { # check "description" command...
    local desc=$1
    shift
    if "$@" >/dev/null 2>&1; then ok "$desc"; else bad "$desc"; fi
}

if [ "$(id -u)" != 0 ]; then
    echo "audit_writer_raw: needs root"
    echo "0 passed, 1 failed"
    exit 1
fi
for tool in "$TK" "$(command -v "$RUNSC")" "$(command -v jq)" "$(command -v python3)"; do
    if [ ! -x "$tool" ]; then
        echo "missing tool: $tool"
        echo "0 passed, 1 failed"
        exit 1
    fi
done

T=$(mktemp -d /tmp/sw-audit-it.XXXXXX)
R=$T/runsc-root
SANDBOXES=()
MOUNTS=()
WRITER_DIRS=()
cleanup() {
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
    rm -rf "$T"
}
trap cleanup EXIT

META=$T/metadata.txt
if ! "$RUNSC" trace metadata >"$META" 2>/dev/null; then
    cp "$SRC/tests/data/audit/runsc_trace_metadata_20221219.txt" "$META"
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
(cd "$B" && "$RUNSC" spec -- /bin/sleep 100000) || exit 1
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
start_writer "$W1" >/dev/null || { bad "writer 1 starts"; }
start_sandbox "$W1" s1 || bad "sandbox 1 starts"
# Full paths: busybox sh would run bare applet names in-process (no execve).
guest s1 '/bin/id; /bin/ls /proc; /bin/cat /etc/passwd' >"$T/s1.out" 2>&1
check "guest commands ran (id output)" grep -q 'uid=1001' "$T/s1.out"
D=$(sentry_dropped s1)
check "runsc trace list reports the sink's dropped count" test "$D" = 0
mkdir -p "$T/out"
"$TK" export --dir "$W1" --dest "$T/out/e1.jsonl" --sentry-dropped "$D" >"$T/e1.json"
rc=$?
E=$T/out/e1.jsonl
check "export exits 0 (complete)" test $rc = 0
check "sidecar complete true" test "$(side "$E" .complete)" = true
check "sidecar reasons empty, dropped 0" test "$(side "$E" '.reasons|length'),$(side "$E" .dropped)" = "0,0"
check "sidecar sha256 matches the exported bytes" \
    test "$(side "$E" .sha256)" = "$(sha256sum "$E" | cut -d' ' -f1)"
check "sidecar bytes == file size" test "$(side "$E" .bytes)" = "$(stat -c %s "$E")"
check "sidecar events/last_sequence match the lines" \
    test "$(side "$E" .last_sequence)" = "$(wc -l <"$E")"
check "sidecar lists the points with fields" \
    test "$(side "$E" '[.points[]|select(.name=="syscall/openat/exit")][0].optional_fields[0]')" = fd_path
check "sidecar has sandbox_id, runtime_version, exported_at, path" \
    test "$(side "$E" '[.sandbox_id,.runtime_version,.exported_at,.path]|map(length>0)|all')" = true
check "export and sidecar are 0600" test "$(mode "$E")$(mode "$E.status.json")" = 600600
check "writer dir 0700, log 0600" test "$(mode "$W1")$(mode "$W1/audit.jsonl")" = 700600
check "seq strictly increasing from 1" jq -se '[.[].seq] == [range(1; length+1)]' "$E"
check "every record has seq, point, dropped" jq -se 'all(has("seq") and has("point") and has("dropped"))' "$E"
check "container/start recorded" jq -se 'any(.point=="container/start")' "$E"
for cmd in id ls cat; do
    check "execve record with argv for $cmd" \
        jq -se --arg c "/bin/$cmd" 'any((.point=="sentry/execve" or .point=="syscall/execve/exit") and .argv[0]==$c)' "$E"
done
check "execve argv of ls includes /proc" jq -se 'any(.point=="sentry/execve" and .argv==["/bin/ls","/proc"])' "$E"
check "openat of /etc/passwd with its path" \
    jq -se 'any(.point=="syscall/openat/exit" and .pathname=="/etc/passwd")' "$E"
check "read records carry fd_path (optional field)" \
    jq -se 'any(.point=="syscall/read/exit" and .fd_path=="/etc/passwd")' "$E"
check "clone records" jq -se 'any(.point=="sentry/clone")' "$E"
check "exit records" jq -se 'any(.point=="sentry/task_exit") and any(.point=="sentry/exit_notify_parent")' "$E"
check "raw syscall records with sysno and args" \
    jq -se 'any((.point|startswith("syscall/sysno/")) and has("sysno"))' "$E"
check "context: uid 1001 on guest records" \
    jq -se 'any(.point=="sentry/execve" and .context_data.credentials.effective_uid==1001)' "$E"
# terminate: final barrier, then the sandbox goes; the log stays exportable and complete.
D=$(sentry_dropped s1)
"$TK" finish --dir "$W1" --sentry-dropped "$D" >"$T/fin1.json"
check "finish is complete" test "$(jq -r .complete "$T/fin1.json")" = true
"$RUNSC" --root "$R" kill s1 KILL >/dev/null 2>&1
"$RUNSC" --root "$R" delete -force s1 >/dev/null 2>&1
"$TK" export --dir "$W1" --dest "$T/out/after.jsonl" --sentry-dropped unavailable >/dev/null
check "export after terminate still complete" test "$(side "$T/out/after.jsonl" .complete)" = true
check "export after terminate has at least the earlier records" \
    test "$(side "$T/out/after.jsonl" .events)" -ge "$(side "$E" .events)"
check "writer exited after finish" test ! -S "$W1/control.sock"

# ---------------------------------------------------------------- 2. byte limit
W2=$T/w2
start_writer "$W2" 65536 >/dev/null
start_sandbox "$W2" s2
guest s2 'i=0; while [ $i -lt 100 ]; do /bin/cat /etc/passwd >/dev/null; i=$((i+1)); done'
"$TK" export --dir "$W2" --dest "$T/out/e2.jsonl" --sentry-dropped "$(sentry_dropped s2)" >/dev/null
rc=$?
check "byte limit: export exits 3 (incomplete)" test $rc = 3
check "byte limit: complete false, reason byte_limit" \
    test "$(side "$T/out/e2.jsonl" '.complete,(.reasons|index("byte_limit")!=null)' | tr '\n' ,)" = "false,true,"
check "byte limit: log <= 64 KiB" test "$(stat -c %s "$W2/audit.jsonl")" -le 65536
check "byte limit: export <= 64 KiB and whole lines" jq -se 'length>0' "$T/out/e2.jsonl"
check "byte limit: later events counted as dropped" test "$(side "$T/out/e2.jsonl" .dropped)" -gt 0

# ---------------------------------------------------------------- 3. SIGSTOP
W3=$T/w3
P3=$(start_writer "$W3")
start_sandbox "$W3" s3
guest s3 '/bin/true'
kill -STOP "$P3"
guest s3 'i=0; while [ $i -lt 3000 ]; do echo $i >/tmp/f; i=$((i+1)); done'
kill -CONT "$P3"
sleep 1
D3=$(sentry_dropped s3)
"$TK" export --dir "$W3" --dest "$T/out/e3.jsonl" --sentry-dropped "$D3" >/dev/null
rc=$?
check "SIGSTOP: the sentry dropped events ($D3)" test "$D3" -gt 0
check "SIGSTOP: dropped == the sentry's count" test "$(side "$T/out/e3.jsonl" .dropped)" = "$D3"
check "SIGSTOP: complete false (exit 3), queue_overflow" \
    test "$rc,$(side "$T/out/e3.jsonl" '.reasons|index("queue_overflow")!=null')" = "3,true"
check "SIGSTOP: a gap record says how many were lost" \
    jq -se --argjson d "$D3" '[.[]|select(.point=="gap")|.lost]|add == $d' "$T/out/e3.jsonl"
check "SIGSTOP: records after the gap are still written" \
    jq -se 'any(.point=="syscall/openat/exit" and .pathname=="/tmp/f")' "$T/out/e3.jsonl"

# ---------------------------------------------------------------- 4. SIGKILL
W4=$T/w4
P4=$(start_writer "$W4")
start_sandbox "$W4" s4
guest s4 '/bin/cat /etc/passwd >/dev/null'
sleep 1.5 # let the writer persist a state
kill -KILL "$P4"
guest s4 '/bin/cat /etc/passwd >/dev/null'
"$TK" export --dir "$W4" --dest "$T/out/e4.jsonl" --sentry-dropped "$(sentry_dropped s4)" >/dev/null
rc=$?
check "SIGKILL: export written but incomplete (exit 3)" test $rc = 3
check "SIGKILL: reason writer_died" test "$(side "$T/out/e4.jsonl" '.reasons|index("writer_died")!=null')" = true
check "SIGKILL: exported prefix is whole lines with seq 1..N" \
    jq -se 'length>0 and ([.[].seq] == [range(1; length+1)])' "$T/out/e4.jsonl"
check "SIGKILL: sha256 matches" \
    test "$(side "$T/out/e4.jsonl" .sha256)" = "$(sha256sum "$T/out/e4.jsonl" | cut -d' ' -f1)"
"$TK" finish --dir "$W4" >"$T/fin4.json"
check "SIGKILL: finish on a dead writer reports it" test "$(jq -r '.reasons|index("writer_died")!=null' "$T/fin4.json")" = true

# ---------------------------------------------------------------- 5. hostile peers
W5=$T/w5
P5=$(start_writer "$W5")
cat >"$T/hostile.py" <<'EOF'
import socket, struct, sys
path, mode = sys.argv[1], sys.argv[2]
def conn():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    return s
def hdr(t, dropped=0, hs=8):
    return struct.pack("<HHI", hs, t, dropped) + b"\0" * (hs - 8)
if mode == "bad-handshakes":
    for hs in [b"garbage", b"\x08\x00", b"", b"x" * 5000]:
        s = conn()
        try:
            s.send(hs) if hs else s.shutdown(socket.SHUT_WR)
            s.settimeout(3)
            s.recv(16)
        except OSError:
            pass
        s.close()
elif mode == "junk-stream":
    s = conn()
    s.send(b"\x08\x01")
    assert s.recv(16) == b"\x08\x01"
    s.send(b"\x01")                                  # short
    s.send(struct.pack("<HHI", 200, 7, 0))            # header_size > length
    s.send(hdr(77) + b"\x01\x02\x03")                  # unknown type
    s.send(hdr(7) + b"\xff" * 11)                      # garbage protobuf
    s.send(hdr(3, 0, 24) + b"\x12\x03abc")             # longer header: skipped, fine
    s.setsockopt(socket.SOL_SOCKET, 32, 32 << 20)      # SO_SNDBUFFORCE
    for size in (10 << 20, 3 << 20):                   # the kernel may refuse 10 MiB
        try:
            s.send(hdr(3) + b"A" * size)
            break
        except OSError:
            pass
    s.close()
elif mode == "intruder":
    s = conn()
    s.settimeout(3)
    try:
        s.send(b"\x08\x01")
        r = s.recv(16)
    except OSError:
        r = b""
    print("rejected" if not r else "accepted")
EOF
python3 "$T/hostile.py" "$W5/sink.sock" bad-handshakes
python3 "$T/hostile.py" "$W5/sink.sock" junk-stream
check "hostile: writer survives garbage" kill -0 "$P5"
start_sandbox "$W5" s5 || bad "hostile: sandbox starts after hostile peers"
out=$(python3 "$T/hostile.py" "$W5/sink.sock" intruder)
check "hostile: a second connection during the sandbox is refused" test "$out" = rejected
guest s5 '/bin/cat /etc/passwd >/dev/null'
"$TK" export --dir "$W5" --dest "$T/out/e5.jsonl" --sentry-dropped "$(sentry_dropped s5)" >/dev/null
E5=$T/out/e5.jsonl
check "hostile: writer still alive" kill -0 "$P5"
check "hostile: the real sandbox is still logged" \
    jq -se 'any(.point=="sentry/execve" and .argv[0]=="/bin/cat")' "$E5"
check "hostile: bad handshakes and the intruder counted as rejected (>=5)" \
    test "$(side "$E5" .counters.rejected_connections)" -ge 5
check "hostile: unknown type kept raw and counted" \
    jq -se 'any(.point=="writer/unknown_message" and .type==77 and .raw=="AQID")' "$E5"
check "hostile: malformed messages counted (3)" test "$(side "$E5" .counters.malformed)" = 3
check "hostile: oversized message counted as truncated" test "$(side "$E5" .counters.truncated)" = 1
check "hostile: not complete (multiple_sentry_connections)" \
    test "$(side "$E5" '.complete,(.reasons|index("multiple_sentry_connections")!=null)' | tr '\n' ,)" = "false,true,"
check "hostile: seq still 1..N" jq -se '[.[].seq] == [range(1; length+1)]' "$E5"

# ---------------------------------------------------------------- 6. failed exports
before=$(sha256sum "$E" "$E.status.json")
"$TK" export --dir "$W5" --dest "$T/missing/dir/x.jsonl" --sentry-dropped 0 >/dev/null 2>&1
rc=$?
check "export into a missing dir fails (non-zero, not 3)" test $rc != 0 -a $rc != 3
check "export into a missing dir leaves no sidecar" test ! -e "$T/missing/dir/x.jsonl.status.json"
mkdir -p "$T/ro"
mount -t tmpfs -o size=1m tmpfs "$T/ro" && MOUNTS+=("$T/ro")
echo '{"complete":true}' >"$T/ro/x.jsonl.status.json"
mount -o remount,ro "$T/ro"
"$TK" export --dir "$W5" --dest "$T/ro/x.jsonl" --sentry-dropped 0 >/dev/null 2>&1
rc=$?
check "export into a read-only dir fails" test $rc != 0 -a $rc != 3
check "read-only: the old sidecar there claims nothing new (unchanged, cannot be removed)" \
    grep -q complete "$T/ro/x.jsonl.status.json"
check "earlier export elsewhere untouched" test "$(sha256sum "$E" "$E.status.json")" = "$before"

# ---------------------------------------------------------------- 7. disk full
mkdir -p "$T/small"
mount -t tmpfs -o size=512k,mode=0700 tmpfs "$T/small" && MOUNTS+=("$T/small")
W7=$T/small/w7
P7=$(start_writer "$W7")
start_sandbox "$W7" s7
guest s7 'i=0; while [ $i -lt 300 ]; do /bin/cat /etc/passwd >/dev/null; i=$((i+1)); done'
"$TK" export --dir "$W7" --dest "$T/out/e7.jsonl" --sentry-dropped "$(sentry_dropped s7)" >/dev/null
rc=$?
E7=$T/out/e7.jsonl
check "disk full: writer did not crash" kill -0 "$P7"
check "disk full: export exits 3, reason disk_failure" \
    test "$rc,$(side "$E7" '.reasons|index("disk_failure")!=null')" = "3,true"
check "disk full: events lost are counted" test "$(side "$E7" .counters.disk_dropped)" -gt 0
check "disk full: consistent prefix (whole lines, seq 1..N)" \
    jq -se 'length>0 and ([.[].seq] == [range(1; length+1)])' "$E7"
check "disk full: sha256 and bytes match" \
    test "$(side "$E7" .sha256),$(side "$E7" .bytes)" = "$(sha256sum "$E7" | cut -d' ' -f1),$(stat -c %s "$E7")"
D7=$(sentry_dropped s7)
"$TK" finish --dir "$W7" --sentry-dropped "$D7" >"$T/fin7.json"
check "disk full: final state persisted (finish reports disk_failure)" \
    test "$(jq -r '.reasons|index("disk_failure")!=null' "$T/fin7.json")" = true

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
