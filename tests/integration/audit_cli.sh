#!/usr/bin/env bash
# The protected runtime audit through the sandweave CLI (README, "Protected
# runtime audit"): the user-visible contract of
#   sandweave create --audit / template audit: true / --no-audit
#   sandweave audit export ID PATH, sandweave audit status ID
#   sandweave terminate ID, sandweave rm ID
#   sandweave run --template base --audit --audit-log PATH -- CMD (one-shot)
# Faults (byte limit, drops, killed writer, disk full, interrupted export) are
# in audit_cli_faults.sh. Needs root and a working runsc.
#
# Note: busybox `sh -c 'id; ls'` runs applets in-process (no execve), so guest
# commands use full paths (/usr/bin/id, /bin/ls, /bin/cat) to get execve records.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "runsc, mounts"
require_cmd jq sha256sum
# Short paths: the writer's sink socket path must stay under 100 bytes.
TMPDIR=/tmp sw_setup
S=$STATE
T=$SCRATCH
unset SANDWEAVE_HOST

writer_pids() { # [id] -> pids of audit writers of this state dir (of that sandbox)
    pgrep -f "__audit-writer --dir $S/sandboxes/${1:-}" 2>/dev/null
}
# A stopped writer would hold up rm: wake them before lib.sh removes the sandboxes.
wake_writers() {
    local pid
    for pid in $(writer_pids); do kill -CONT "$pid" 2>/dev/null; done
}
on_cleanup wake_writers

side() { jq -r "$2" "$1.status.json"; }   # side FILE JQ-EXPR: from FILE's sidecar
mode() { stat -c %a "$1"; }
sandboxes_left() { find "$S/sandboxes" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
# Every line is one JSON object and seq runs 1..N with no gap.
seq_contiguous() { jq -se 'length > 0 and ([.[].seq] == [range(1; length + 1)])' "$1"; }
# bytes/sha256/last_sequence/events of the sidecar describe exactly the file.
sidecar_matches_file() {
    local f=$1
    [ "$(side "$f" .sha256)" = "$(sha256sum "$f" | cut -d' ' -f1)" ] || return 1
    [ "$(side "$f" .bytes)" = "$(stat -c %s "$f")" ] || return 1
    [ "$(side "$f" .last_sequence)" = "$(tail -n1 "$f" | jq .seq)" ] || return 1
    # events: the records of sentry messages (the writer's own lines and gap
    # records are not events; raw records it keeps of bad messages are).
    [ "$(side "$f" .events)" = "$(jq -se '[.[] | select(((.point | startswith("writer/")) and
        .point != "writer/unknown_message" and .point != "writer/malformed_message") or .point == "gap" | not)] | length' "$f")" ]
}

mkdir -p "$T/out"

# ---------------------------------------------------------------- 1. happy path
ID=$("$SW" create --template base --audit 2>"$T/create.err")
rc=$?
assert_true "create --audit prints only the id" test $rc = 0 -a -n "$ID" -a "$(echo "$ID" | wc -w)" = 1
if [ $rc != 0 ] || [ -z "$ID" ]; then
    fatal "create --audit (nothing below can run without it)" "exit $rc, stderr: $(cat "$T/create.err")"
fi
AD=$S/sandboxes/$ID/audit
assert_true "writer directory is 0700, log 0600" test "$(mode "$AD")$(mode "$AD/audit.jsonl")" = 700600
assert_true "writer files present (sink.sock, control.sock, writer-state.json, writer.log)" \
    test -S "$AD/sink.sock" -a -S "$AD/control.sock" -a -f "$AD/writer-state.json" -a -f "$AD/writer.log"
assert_true "one audit writer runs for the sandbox" test "$(writer_pids "$ID/" | wc -l)" = 1
"$SW" run "$ID" --user 1001:1001 -c '/usr/bin/id; /bin/ls /proc; /bin/cat /etc/passwd' >"$T/run1.out" 2>&1
rc=$?
assert_true "guest commands ran as 1001 (exit 0)" test $rc = 0
assert_true "guest output has id and passwd" grep -q 'uid=1001' "$T/run1.out"
E=$T/out/episode.jsonl
"$SW" audit export "$ID" "$E" >"$T/export1.out" 2>"$T/export1.err"
rc=$?
assert_true "audit export exits 0" test $rc = 0
assert_true "audit export prints one line: complete=true events=N dropped=0 bytes=N sha256=H path=P" \
    grep -Eqx "complete=true events=[1-9][0-9]* dropped=0 bytes=$(stat -c %s "$E") sha256=$(sha256sum "$E" | cut -d' ' -f1) path=$E" "$T/export1.out"
assert_true "... and nothing else" test "$(wc -l <"$T/export1.out")" = 1
assert_true "the line's events == the sidecar's" grep -q " events=$(side "$E" .events) " "$T/export1.out"
assert_true "exported sidecar: complete true, no reasons, dropped 0" \
    jq -e '.complete == true and .reasons == [] and .dropped == 0' "$E.status.json"
assert_true "the export verifies (audit verify exit 0)" "$SW" audit verify "$E"
assert_true "export and sidecar are 0600" test "$(mode "$E")$(mode "$E.status.json")" = 600600
assert_true "sidecar: sha256, bytes, last_sequence, events match the file" sidecar_matches_file "$E"
assert_true "seq strictly increasing from 1, no gaps" seq_contiguous "$E"
assert_true "every record has seq, point, dropped" jq -se 'all(has("seq") and has("point") and has("dropped"))' "$E"
assert_true "sidecar: sandbox_id == id" test "$(side "$E" .sandbox_id)" = "$ID"
assert_true "sidecar: runtime_version == the sandbox's runtime" \
    test "$(side "$E" .runtime_version)" = "$("$SW" inspect "$ID" 2>/dev/null | jq -r '.runtime_version // .record.runtime_version')"
assert_true "sidecar: context fields listed once, then each point with its optional fields" \
    jq -e '(.context_fields | length) > 3 and (.points | length) > 10 and all(.points[]; type == "array")' "$E.status.json"
assert_true "sidecar: lifecycle points and openat (with fd_path) listed" \
    jq -e '.points as $p | all("container/start", "sentry/clone", "sentry/execve", "sentry/exit_notify_parent", "sentry/task_exit"; $p[.] != null) and
        ($p["syscall/openat/exit"] | index("fd_path")) != null' "$E.status.json"
assert_true "sidecar: compact (under 40 KiB, under 1000 lines)" \
    test "$(stat -c %s "$E.status.json")" -lt 40960 -a "$(wc -l <"$E.status.json")" -lt 1000
assert_true "container/start recorded" jq -se 'any(.point == "container/start" and .id == "'"$ID"'")' "$E"
assert_true "execve of id with argv and uid 1001" \
    jq -se 'any(.point == "sentry/execve" and .argv[0] == "/usr/bin/id" and .context_data.credentials.effective_uid == 1001)' "$E"
assert_true "execve of ls with argv [/bin/ls, /proc]" jq -se 'any(.point == "sentry/execve" and .argv == ["/bin/ls", "/proc"])' "$E"
assert_true "execve of cat with argv [/bin/cat, /etc/passwd]" \
    jq -se 'any(.point == "sentry/execve" and .argv == ["/bin/cat", "/etc/passwd"])' "$E"
assert_true "openat of /etc/passwd by cat: path and a non-negative result" \
    jq -se 'any(.point == "syscall/openat/exit" and .pathname == "/etc/passwd" and .context_data.process_name == "cat" and .exit.result >= 0)' "$E"
assert_true "read of /etc/passwd carries fd_path" jq -se 'any(.point == "syscall/read/exit" and .fd_path == "/etc/passwd")' "$E"
assert_true "sentry/clone records" jq -se 'any(.point == "sentry/clone")' "$E"
assert_true "sentry/task_exit and sentry/exit_notify_parent records" \
    jq -se 'any(.point == "sentry/task_exit") and any(.point == "sentry/exit_notify_parent")' "$E"
assert_true "raw syscall/sysno/N/exit records with sysno == N" \
    jq -se '[.[] | select(.point | test("^syscall/sysno/[0-9]+/exit$"))] | length > 0 and
        all(.point == "syscall/sysno/\(.sysno)/exit")' "$E"
assert_true "raw records name their syscall next to the number (x86-64 table)" \
    jq -se 'any(.point | startswith("syscall/sysno/")) and all(.[] | select(.point | startswith("syscall/sysno/")); (.syscall | type) == "string")' "$E"
assert_true "raw arguments are exact hex strings" \
    jq -se '[.[] | select(.point | startswith("syscall/sysno/")) | .arg1, .arg2, .arg3, .arg4, .arg5, .arg6] | all(test("^0x[0-9a-f]+$"))' "$E"
assert_true "raw records carry only arg1..arg6 as arguments, some all six" \
    jq -se '[.[] | select(.point | startswith("syscall/sysno/")) | [keys[] | select(startswith("arg"))]] |
        all(. - ["arg1","arg2","arg3","arg4","arg5","arg6"] == []) and any(length == 6)' "$E"
# Product gaps (see the report): zero-valued args are left out (protobuf
# default), and raw records carry no context although the sidecar lists
# context fields for every raw point.
assert_true "every raw record carries all six args (zero included)" \
    jq -se '[.[] | select(.point | startswith("syscall/sysno/"))] | all(has("arg1") and has("arg2") and has("arg3") and has("arg4") and has("arg5") and has("arg6"))' "$E"
assert_true "raw records carry the context fields the sidecar lists for them" \
    jq -se '[.[] | select(.point | startswith("syscall/sysno/"))] | all(has("context_data"))' "$E"
assert_true "every syscall exit record has sysno and exit.result/errorno (zero included)" \
    jq -se '[.[] | select(.point | test("^syscall/.*/exit$"))] | length > 0 and
        all(has("sysno") and (.exit | has("result") and has("errorno")))' "$E"
"$SW" --json audit export "$ID" "$T/out/json.jsonl" >"$T/export-json.out" 2>"$T/export-json.err"
rc=$?
assert_true "--json audit export exits 0, stdout is one JSON document with complete true" \
    test $rc = 0 -a "$(jq -s 'length' "$T/export-json.out")" = 1 -a "$(jq -r .complete "$T/export-json.out")" = true
assert_true "--json export: sidecar matches its file, 0600" \
    eval 'sidecar_matches_file "$T/out/json.jsonl" && test "$(mode "$T/out/json.jsonl")$(mode "$T/out/json.jsonl.status.json")" = 600600'
assert_true "a later export holds the earlier one as its prefix" \
    cmp -n "$(stat -c %s "$E")" "$E" "$T/out/json.jsonl"
(cd "$T/out" && "$SW" audit export "$ID" rel.jsonl >/dev/null 2>&1)
assert_true "a relative PATH is relative to the caller's cwd; sidecar path is absolute" \
    test -f "$T/out/rel.jsonl" -a "$(side "$T/out/rel.jsonl" .path)" = "$T/out/rel.jsonl"
"$SW" audit export "$ID" "$T/no-such-dir/x.jsonl" >/dev/null 2>"$T/nodir.err"
rc=$?
assert_true "an export into a missing folder exits 1 with one line naming the sandbox and the path" \
    eval 'test $rc = 1 -a "$(wc -l <"$T/nodir.err")" = 1 && grep -q "sandbox $ID: exporting audit log to $T/no-such-dir/x.jsonl: " "$T/nodir.err"'
assert_true "... and says exporting once" test "$(grep -o exporting "$T/nodir.err" | wc -l)" = 1

# ------------------------------------------------- 1b. cwd and fd_path follow renames
# runtime/audit-points.patch caches both per process and per open file; a
# rename, an unlink or a rmdir must show in the next record, as without it.
# The shell's own syscalls (builtins, redirections) keep one cwd and one open
# file across the renames.
"$SW" run "$ID" -c 'mkdir -p /tmp/cw/a && cd /tmp/cw/a && echo 1 >/tmp/cw/one &&
    /bin/mv /tmp/cw/a /tmp/cw/b && echo 2 >/tmp/cw/two &&
    exec 3>/tmp/cw/f && echo x >&3 && /bin/mv /tmp/cw/f /tmp/cw/g && echo y >&3 &&
    /bin/rm /tmp/cw/g && echo z >&3 && mkdir /tmp/cw/d && cd /tmp/cw/d && echo 3 >/tmp/cw/three &&
    /bin/rmdir /tmp/cw/d && echo 4 >/tmp/cw/four && cd /tmp && echo 5 >/tmp/cw/five' >"$T/cw.out" 2>&1
assert_true "the rename script ran (exit 0)" test $? = 0
"$SW" audit export "$ID" "$T/out/cw.jsonl" >/dev/null 2>&1
cwd_of() { # PATHNAME -> the cwd of the shell's openat of it
    jq -sr --arg p "$1" '[.[] | select(.point == "syscall/openat/exit" and .pathname == $p and
        .context_data.process_name == "sh") | .context_data.cwd] | last' "$T/out/cw.jsonl"
}
assert_true "cwd before and after its directory was renamed" \
    test "$(cwd_of /tmp/cw/one) $(cwd_of /tmp/cw/two)" = "/tmp/cw/a /tmp/cw/b"
assert_true "cwd after a chdir, after its removal, after a chdir away" \
    test "$(cwd_of /tmp/cw/three)|$(cwd_of /tmp/cw/four)|$(cwd_of /tmp/cw/five)" = "/tmp/cw/d|/tmp/cw/d (deleted)|/tmp"
assert_true "fd_path of one open file: opened, renamed, unlinked" \
    jq -se '[.[] | select(.point == "syscall/write/exit" and .context_data.process_name == "sh" and
        (.fd_path // "" | startswith("/tmp/cw/"))) | .fd_path] ==
        ["/tmp/cw/one", "/tmp/cw/two", "/tmp/cw/f", "/tmp/cw/g", "/tmp/cw/g (deleted)", "/tmp/cw/three", "/tmp/cw/four", "/tmp/cw/five"]' "$T/out/cw.jsonl"

# ---------------------------------------------------------------- 2. the guest cannot reach the log
HOSTLOG=$AD/audit.jsonl
"$SW" run "$ID" -c "/usr/bin/find / -name audit.jsonl -o -name writer-state.json -o -name sink.sock -o -name control.sock 2>/dev/null" \
    >"$T/find.out" 2>&1
assert_true "guest root: find / -name audit.jsonl (and writer files) finds nothing" test ! -s "$T/find.out"
"$SW" run "$ID" -- /bin/cat "$HOSTLOG" >"$T/cat.out" 2>&1
rc=$?
assert_true "guest root: cat of the log's host path fails" test $rc != 0 -a "$(grep -c '"seq"' "$T/cat.out")" = 0
"$SW" run "$ID" -- /bin/ls "$S" >/dev/null 2>&1
assert_true "guest root: the state dir does not exist in the guest" test $? != 0
"$SW" run "$ID" -c "/bin/mkdir -p '$AD' && echo '{\"seq\":1,\"point\":\"forged\"}' >>'$HOSTLOG'" >/dev/null 2>&1
"$SW" audit export "$ID" "$T/out/after-forge.jsonl" >/dev/null 2>&1
# The forging command's own execve record carries the word in its argv (the
# agent's commands are audited); what must not appear is a forged record.
assert_true "a guest write to the log's host path does not reach the log" \
    eval 'jq -se "all(.point != \"forged\")" "$HOSTLOG" >/dev/null && jq -se "all(.point != \"forged\")" "$T/out/after-forge.jsonl" >/dev/null && seq_contiguous "$T/out/after-forge.jsonl"'
assert_true "the forged write is recorded (openat of the log path in the guest)" \
    jq -se --arg p "$HOSTLOG" 'any(.point == "syscall/openat/exit" and .pathname == $p)' "$T/out/after-forge.jsonl"

# ---------------------------------------------------------------- 3. no audit, no writer
NID=$("$SW" create --template base 2>/dev/null)
assert_true "create without --audit works" test -n "$NID"
"$SW" run "$NID" -- /bin/true >/dev/null 2>&1
assert_true "no audit: no writer process for it" test "$(writer_pids "$NID/" | wc -l)" = 0
assert_true "no audit: no audit dir, no pod-init config" test ! -e "$S/sandboxes/$NID/audit" -a ! -e "$S/sandboxes/$NID/pod-init-config.json"
"$SW" audit export "$NID" "$T/out/none.jsonl" >"$T/none.out" 2>"$T/none.err"
rc=$?
assert_true "no audit: audit export fails (non-zero, not 3)" test $rc != 0 -a $rc != 3
assert_true "no audit: the message says the sandbox has no audit" grep -qi 'without audit\|not audited\|no audit' "$T/none.err"
assert_true "no audit: nothing written at PATH" test ! -e "$T/out/none.jsonl" -a ! -e "$T/out/none.jsonl.status.json"
"$SW" audit status "$NID" >/dev/null 2>"$T/none-status.err"
assert_true "no audit: audit status fails too" test $? != 0 -a -s "$T/none-status.err"
"$SW" audit export sw-doesnotexist "$T/out/nx.jsonl" >/dev/null 2>&1
assert_true "audit export of an unknown sandbox exits 4" test $? = 4
"$SW" rm "$NID" >/dev/null 2>&1

# ---------------------------------------------------------------- 4. templates
cat >"$T/audited.yaml" <<'EOF'
extends: base
description: base with audit on
runtime_options:
  audit: true
EOF
TID=$("$SW" create --template "$T/audited.yaml" 2>"$T/tmpl.err")
assert_true "template file with audit: true creates an audited sandbox" \
    test -n "$TID" -a -f "$S/sandboxes/$TID/audit/audit.jsonl" -a "$(writer_pids "$TID/" | wc -l)" = 1
[ -n "$TID" ] && "$SW" rm "$TID" >/dev/null 2>&1
XID=$("$SW" create --template "$T/audited.yaml" --no-audit 2>/dev/null)
assert_true "--no-audit overrides the template: no audit dir, no writer" \
    test -n "$XID" -a ! -e "$S/sandboxes/$XID/audit" -a "$(writer_pids "$XID/" | wc -l)" = 0
[ -n "$XID" ] && "$SW" rm "$XID" >/dev/null 2>&1
"$SW" create --template base --audit --no-audit >/dev/null 2>&1
assert_true "--audit with --no-audit is a usage error (exit 2)" test $? = 2
IID=$("$SW" create --template '{"extends": "base", "runtime_options": {"audit": true, "audit_max_bytes": 8589934592}}' 2>"$T/inline.err")
assert_true "inline JSON template (seed form) creates an audited sandbox" test -n "$IID" -a -d "$S/sandboxes/$IID/audit"
if [ -n "$IID" ]; then
    "$SW" --json audit status "$IID" >"$T/inline-status.json" 2>/dev/null
    assert_true "inline template: status max_bytes 8589934592" test "$(jq -r .max_bytes "$T/inline-status.json")" = 8589934592
    "$SW" audit export "$IID" "$T/out/inline.jsonl" >/dev/null 2>&1
    assert_true "inline template: export complete with max_bytes 8589934592" \
        test "$?,$(side "$T/out/inline.jsonl" .complete),$(side "$T/out/inline.jsonl" .max_bytes)" = "0,true,8589934592"
    "$SW" rm "$IID" >/dev/null 2>&1
fi

# ---------------------------------------------------------------- 7. audit status (live)
"$SW" audit status "$ID" >"$T/status.line" 2>"$T/status.err"
assert_true "audit status prints one line: complete=false events=N dropped=0 bytes=N writer_running=true" \
    grep -Eqx "complete=false events=[1-9][0-9]* dropped=0 bytes=[0-9]+ writer_running=true" "$T/status.line"
"$SW" --json audit status "$ID" >"$T/status.json" 2>"$T/status.err"
rc=$?
assert_true "audit status exits 0 with live figures (events > 0)" test $rc = 0 -a "$(jq -r '.events > 0' "$T/status.json")" = true
assert_true "audit status never claims complete" test "$(jq -r .complete "$T/status.json")" = false
assert_true "audit status: sandbox_id, writer running" jq -e --arg id "$ID" '.sandbox_id == $id and .writer_running == true' "$T/status.json"
assert_true "audit status does not write an export" test -z "$(jq -r '.path // ""' "$T/status.json")"
assert_true "audit status says it is no barrier and invents no reason (healthy writer)" \
    jq -e '.barrier == false and .reasons == [] and .dropped == 0' "$T/status.json"

# ---------------------------------------------------------------- 8. failed export keeps older exports
A=$T/out/a.jsonl
"$SW" audit export "$ID" "$A" >/dev/null 2>&1
assert_true "export to A complete" test "$?,$(side "$A" .complete)" = "0,true"
before=$(sha256sum "$A" "$A.status.json")
"$SW" audit export "$ID" "$T/missing/dir/b.jsonl" >"$T/b.out" 2>"$T/b.err"
rc=$?
assert_true "export into a missing directory fails (non-zero, not 3)" test $rc != 0 -a $rc != 3
assert_true "failed export: a one-line error on stderr" test "$(wc -l <"$T/b.err")" -ge 1
assert_true "failed export: no B.status.json" test ! -e "$T/missing/dir/b.jsonl.status.json"
assert_true "failed export: A and its sidecar untouched" test "$(sha256sum "$A" "$A.status.json")" = "$before"
# An older complete sidecar at B; B itself is a directory, so the new export fails.
mkdir -p "$T/out/b2.jsonl"
cp "$A.status.json" "$T/out/b2.jsonl.status.json"
"$SW" audit export "$ID" "$T/out/b2.jsonl" >/dev/null 2>&1
rc=$?
assert_true "export onto a directory fails (non-zero, not 3)" test $rc != 0 -a $rc != 3
assert_true "failed export: no sidecar at B claims complete any more" \
    test "$(jq -r '.complete' "$T/out/b2.jsonl.status.json" 2>/dev/null || echo absent)" != true
assert_true "failed export: A still untouched" test "$(sha256sum "$A" "$A.status.json")" = "$before"

# ---------------------------------------------------------------- 5. terminate, then rm
"$SW" run "$ID" -- /bin/cat /etc/group >/dev/null 2>&1
"$SW" terminate "$ID" >/dev/null 2>"$T/term.err"
assert_true "terminate exits 0" test $? = 0
assert_true "terminate stopped the writer" test "$(writer_pids "$ID/" | wc -l)" = 0
F=$T/out/final.jsonl
"$SW" audit export "$ID" "$F" >"$T/final.json" 2>&1
rc=$?
assert_true "export after terminate exits 0, complete" test "$rc,$(side "$F" .complete)" = "0,true"
assert_true "export after terminate: sidecar matches, seq contiguous" eval 'sidecar_matches_file "$F" && seq_contiguous "$F"'
assert_true "export after terminate includes the earlier exports as prefix" cmp -n "$(stat -c %s "$A")" "$A" "$F"
# The last workload: cat /etc/group. Its exec (by the shell-less runsc exec:
# no execve record) and its exit must both be there.
assert_true "export after terminate includes the last command and its exit" \
    jq -se '([.[] | select(.point == "syscall/openat/exit" and .pathname == "/etc/group" and .context_data.process_name == "cat") | .context_data.thread_group_id] | last) as $t |
        $t != null and any(.point == "sentry/task_exit" and .context_data.thread_group_id == $t) and any(.point == "sentry/exit_notify_parent" and .context_data.thread_group_id == $t)' "$F"
"$SW" --json audit status "$ID" >"$T/status-term.json" 2>/dev/null
assert_true "audit status after terminate never claims complete" test "$(jq -r .complete "$T/status-term.json")" = false
assert_true "audit status after terminate: finished, no barrier, no invented reason" \
    jq -e '.finished == true and .barrier == false and (.reasons | index("runtime_unavailable") == null)' "$T/status-term.json"
"$SW" audit export "$ID" "$T/out/final2.jsonl" >/dev/null 2>&1
assert_true "a second export after terminate is identical" cmp "$F" "$T/out/final2.jsonl"
"$SW" rm "$ID" >/dev/null 2>&1
assert_true "rm exits 0" test $? = 0
assert_true "rm deleted the log and the sandbox dir" test ! -e "$HOSTLOG" -a ! -e "$S/sandboxes/$ID"
assert_true "rm: no writer left" test "$(writer_pids "$ID/" | wc -l)" = 0
"$SW" audit export "$ID" "$T/out/gone.jsonl" >/dev/null 2>&1
assert_true "export after rm exits 4, writes nothing" test "$?" = 4 -a ! -e "$T/out/gone.jsonl" -a ! -e "$T/out/gone.jsonl.status.json"
assert_true "exports made before rm survive it" sidecar_matches_file "$F"

# rm of a running audited sandbox (no terminate) stops its writer too.
RID=$("$SW" create --template base --audit 2>/dev/null)
"$SW" rm "$RID" >/dev/null 2>&1
assert_true "rm of a running audited sandbox: exit 0, no writer, no dir" \
    test $? = 0 -a -n "$RID" -a "$(writer_pids "$RID/" | wc -l)" = 0 -a ! -e "$S/sandboxes/$RID"

# ---------------------------------------------------------------- 6. one-shot
mkdir -p "$T/x"
"$SW" run --template base --audit --audit-log "$T/x/ep.jsonl" -- /bin/ls / >"$T/oneshot.out" 2>"$T/oneshot.err"
rc=$?
assert_true "one-shot: exit 0 and ls output" test $rc = 0 -a "$(grep -c '^etc$' "$T/oneshot.out")" = 1
assert_true "one-shot: log and sidecar 0600, complete" \
    test "$(mode "$T/x/ep.jsonl")$(mode "$T/x/ep.jsonl.status.json"),$(side "$T/x/ep.jsonl" .complete)" = "600600,true"
assert_true "one-shot: sidecar matches, seq contiguous" eval 'sidecar_matches_file "$T/x/ep.jsonl" && seq_contiguous "$T/x/ep.jsonl"'
assert_true "one-shot: the log covers ls (its getdents/openat of /)" \
    jq -se 'any(.context_data.process_name == "ls") and any(.point == "sentry/task_exit" and .context_data.process_name == "ls")' "$T/x/ep.jsonl"
assert_true "one-shot: no sandbox left" test "$(sandboxes_left)" = 0
assert_true "one-shot: no writer left" test "$(writer_pids | wc -l)" = 0
"$SW" run --template base --audit --audit-log "$T/x/ep2.jsonl" -- /bin/ls /nonexistent >/dev/null 2>&1
rc=$?
assert_true "one-shot: the command's exit status passes through (ls: 1)" test $rc = 1
assert_true "one-shot: log written for a failing command too" test "$(side "$T/x/ep2.jsonl" .complete)" = true
"$SW" run --template base --audit --audit-log "$T/x/ep3.jsonl" -- /bin/sh -c 'exit 7' >/dev/null 2>&1
assert_true "one-shot: exit 7 passes through" test $? = 7
"$SW" run --template base --audit --audit-log "$T/x/missing/ep.jsonl" -- /bin/ls / >"$T/oneshot-missing.out" 2>"$T/oneshot-missing.err"
rc=$?
assert_true "one-shot: export into a missing dir fails the run (non-zero), the command ran" \
    test $rc != 0 -a "$(grep -c '^etc$' "$T/oneshot-missing.out")" = 1
assert_true "one-shot: the failed export is reported on stderr" grep -q "$T/x/missing/ep.jsonl" "$T/oneshot-missing.err"
assert_true "one-shot: failed export leaves no sandbox, no writer, no sidecar" \
    test "$(sandboxes_left)" = 0 -a "$(writer_pids | wc -l)" = 0 -a ! -e "$T/x/missing/ep.jsonl.status.json"
"$SW" run --template base --audit-log "$T/x/noaudit.jsonl" -- /bin/ls / >"$T/noaudit.out" 2>"$T/noaudit.err"
rc=$?
assert_true "one-shot: --audit-log without audit is a usage error (exit 2)" test $rc = 2
assert_true "one-shot: usage error names --audit-log" grep -q -- '--audit-log' "$T/noaudit.err"
assert_true "one-shot: usage error ran nothing (no ls output)" test ! -s "$T/noaudit.out"
assert_true "one-shot: usage error leaves no file, no sandbox, no writer" \
    test ! -e "$T/x/noaudit.jsonl" -a ! -e "$T/x/noaudit.jsonl.status.json" -a "$(sandboxes_left)" = 0 -a "$(writer_pids | wc -l)" = 0
"$SW" run --template base --no-audit --audit-log "$T/x/noaudit2.jsonl" -- /bin/true >/dev/null 2>&1
assert_true "one-shot: --no-audit --audit-log is a usage error (exit 2), nothing left" \
    test $? = 2 -a "$(sandboxes_left)" = 0 -a ! -e "$T/x/noaudit2.jsonl"
assert_true "run ID --audit-log (not one-shot) is a usage error" \
    eval '"$SW" run sw-x --audit-log "$T/x/z.jsonl" -- /bin/true >/dev/null 2>&1; test $? = 2'

finish
