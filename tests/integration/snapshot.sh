#!/usr/bin/env bash
# Snapshots as a user sees them (docs/guide.md, "Snapshots and pools"):
#   1. fs snapshot: `snapshot create ID --kind fs` prints an id; `snapshot ls
#      --json` describes it; `create --from-snapshot S` gives a fresh sandbox
#      with the layer as it was at the snapshot; the source keeps running; the
#      restore keeps hidepid and audit (snapshot settings beat the template),
#      explicit --hidepid 0 / --no-audit win; an audited restore starts a new
#      audit stream (seq 1, nothing from the source).
#   2. memory snapshot: processes and files survive, the source keeps running;
#      refused with audit (exit 2); --kind auto picks fs with audit, memory
#      without; hidepid alone is fine but a restore cannot change it or turn
#      audit on (exit 2).
#   3. faults: unknown / terminated source, missing / corrupt snapshot, rm, a
#      full disk during a snapshot, a snapshot killed mid-copy.
#   4. --template with --from-snapshot is a usage error.
# Guest commands that must leave an execve record use full paths (/bin/ls):
# busybox `sh -c` runs applets in-process.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup
T0=$SECONDS

# Creates a sandbox (args go to create) and stores its id in variable $1. A
# failure is counted here, in this shell (not in a $(...) subshell).
new_sandbox() {
    local -n _id="$1"
    shift
    capture "$SW" create "$@"
    if [[ "$LAST_RC" != 0 || ! "$LAST_OUT" =~ ^sw-[0-9a-f]+$ ]]; then
        fail "create $*" "exit $LAST_RC" "stdout: $(_shown "$LAST_OUT")" "stderr: $(_shown "$LAST_ERR")"
        _id=""
        return 1
    fi
    _id="$LAST_OUT"
}

# Takes a snapshot (args go to `snapshot create`), stores its id in variable $1.
new_snapshot() {
    local -n _sid="$1"
    shift
    capture "$SW" snapshot create "$@"
    if [[ "$LAST_RC" != 0 || ! "$LAST_OUT" =~ ^snap-[0-9a-f]+$ ]]; then
        fail "snapshot create $*" "exit $LAST_RC" "stdout: $(_shown "$LAST_OUT")" "stderr: $(_shown "$LAST_ERR")"
        _sid=""
        return 1
    fi
    _sid="$LAST_OUT"
}

snap_entry() { "$SW" snapshot ls --json 2>/dev/null | jq -c --arg id "$1" '.[] | select(.id == $id)'; }
snap_ids() { "$SW" snapshot ls --json 2>/dev/null | jq -r '.[].id' | sort | tr '\n' ' '; }
sandbox_dirs() { find "$STATE/sandboxes" -mindepth 1 -maxdepth 1 -name 'sw-*' 2>/dev/null | sort | tr '\n' ' '; }
guest() { "$SW" run "$1" -c "$2" 2>&1; }  # ID SHELL-STRING: combined output
proc_line() { guest "$1" 'grep " /proc proc " /proc/mounts'; }
writer_count() { pgrep -fc -- "__audit-writer .*--sandbox-id $1( |\$)" || true; }
# The pid of a `sleep 1000` in the guest's process list ("" if none).
guest_sleep() { guest_ps "$1" | awk '$4 == "sleep" && $5 == "1000" { print $1 }'; }
# A run that starts `sleep 1000 &` may return before the child has exec'd it.
has_sleep() { [[ -n "$(guest_sleep "$1")" ]]; }
jqe() { jq -e "$@" >/dev/null; }  # quiet jq -e for assert_true
inspect_field() { "$SW" inspect "$1" 2>/dev/null | jq -r "$2"; }

MARK="marker-$RANDOM$RANDOM"

# --- 1. filesystem snapshot ----------------------------------------------------------

# The source: the template says hidepid 1 / audit off, the flags say hidepid 2 /
# audit on; the snapshot must carry the effective settings (2, on).
A=""
new_sandbox A --template '{"extends": "base", "runtime_options": {"hidepid": 1, "audit": false}}' \
    --hidepid 2 --audit || finish
capture sw run "$A" -c 'dd if=/dev/zero of=/root/f bs=4096 count=1 2>/dev/null; printf before > /root/f.txt; /bin/ls /tmp/'"$MARK"'-pre >/dev/null 2>&1; echo ok'
assert_eq "source writes /root/f and runs a marked command" ok "$LAST_OUT"

S=""
new_snapshot S "$A" --kind fs || finish
pass "fs snapshot create prints one snapshot id ($S)"
assert_match "fs snapshot create says on stderr which kind it took" '(^|[^a-z])fs([^a-z]|$)' "$LAST_ERR"

# Changes after the snapshot must not be in it.
capture sw run "$A" -c 'printf after > /root/g; printf changed > /root/f.txt; echo ok'
assert_eq "source writes after the snapshot" ok "$LAST_OUT"

E="$(snap_entry "$S")"
assert_ne "snapshot ls --json lists the snapshot" "" "$E"
assert_eq "ls: kind fs" fs "$(jq -r .kind <<<"$E")"
assert_eq "ls: source is the sandbox" "$A" "$(jq -r .source <<<"$E")"
assert_match "ls: size is a byte count covering the 4 KiB file" '^[0-9]+$' "$(jq -r .bytes <<<"$E")"
assert_true "ls: size >= 4096 and < 1 MiB" jqe '.bytes >= 4096 and .bytes < 1048576' <<<"$E"
assert_match "ls: created is an RFC 3339 time" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}' \
    "$(jq -r '.created_at // .created // ""' <<<"$E")"
assert_eq "ls: settings (template, hidepid 2 from the flag, audit on)" '{"audit":true,"hidepid":2,"template":"inline"}' \
    "$(jq -cS '.settings' <<<"$E")"
capture sw snapshot ls
assert_match "plain snapshot ls shows the id and kind" "$S +[^ ]+ +fs +$A" "$LAST_OUT"

assert_eq "the source keeps running after the fs snapshot" running "$(sw_state "$A")"
assert_eq "the source still works and keeps its later file" after "$(guest "$A" 'cat /root/g')"

R=""
new_sandbox R --from-snapshot "$S" || finish
assert_ne "restore is a new sandbox" "$A" "$R"
assert_eq "restored sandbox is running" running "$(sw_state "$R")"
assert_eq "restored sandbox records its snapshot" "$S" "$(inspect_field "$R" '.from_snapshot // ""')"
assert_eq "restored has /root/f (4096 bytes)" 4096 "$(guest "$R" 'wc -c < /root/f' | tr -d ' ')"
assert_eq "restored has the file content as of the snapshot" before "$(guest "$R" 'cat /root/f.txt')"
assert_eq "restored lacks the file written after the snapshot" absent "$(guest "$R" 'test -e /root/g && echo present || echo absent')"
assert_eq "restore does not touch the source" changed "$(guest "$A" 'cat /root/f.txt')"

assert_match "restored keeps hidepid=2 (/proc/mounts)" 'hidepid=2' "$(proc_line "$R")"
assert_exit "restored keeps audit on (audit status works)" 0 sw audit status "$R"
assert_eq "restored has its own audit writer" 1 "$(writer_count "$R")"
assert_match "restored: hidepid comes from the snapshot" '^snapshot' "$(inspect_field "$R" '.spec.origin["/runtime_options/hidepid"]')"
assert_match "restored: audit comes from the snapshot" '^snapshot' "$(inspect_field "$R" '.spec.origin["/runtime_options/audit"]')"

# A new audit stream: seq 1, the restored sandbox's own container, nothing of the source.
capture sw run "$R" -c "/bin/ls /tmp/$MARK-post >/dev/null 2>&1; echo ok"
sw audit export "$R" "$SCRATCH/r.jsonl" >/dev/null 2>&1
sw audit export "$A" "$SCRATCH/a.jsonl" >/dev/null 2>&1
assert_eq "restored export: the first record has seq 1" 1 "$(head -n 1 "$SCRATCH/r.jsonl" 2>/dev/null | jq -r .seq)"
assert_true "restored export: seq runs 1, 2, 3... without a jump" \
    jqe -s '[.[].seq] == [range(1; length + 1)]' "$SCRATCH/r.jsonl"
assert_true "restored export: container/start names the restored sandbox" \
    jqe -s --arg id "$R" 'any(.point == "container/start" and .id == $id)' "$SCRATCH/r.jsonl"
assert_true "restored export: no record names the source sandbox" \
    jqe -s --arg id "$A" 'all(.context_data.container_id? != $id and .id? != $id)' "$SCRATCH/r.jsonl"
assert_true "(control) the source's export has the pre-snapshot command" grep -q -- "$MARK-pre" "$SCRATCH/a.jsonl"
assert_eq "restored export: no record of the pre-snapshot command" 0 "$(grep -c -- "$MARK-pre" "$SCRATCH/r.jsonl")"
assert_true "restored export: has its own post-restore command" grep -q -- "$MARK-post" "$SCRATCH/r.jsonl"

# Named snapshots: restore by name; a name in use is a usage error.
NAMED=""
new_snapshot NAMED "$A" --kind fs --name ready
assert_eq "ls: the name is listed" ready "$(snap_entry "$NAMED" | jq -r .name)"
assert_exit "snapshot create with a name in use: exit 2" 2 sw snapshot create "$A" --kind fs --name ready
RN=""
new_sandbox RN --from-snapshot ready
assert_eq "restore by snapshot name" "$NAMED" "$(inspect_field "$RN" '.from_snapshot // ""')"
[[ -n "$RN" ]] && sw rm "$RN" >/dev/null 2>&1

# Explicit flags beat the snapshot's settings.
R0=""
new_sandbox R0 --from-snapshot "$S" --hidepid 0 --no-audit || finish
assert_no_match "restore --hidepid 0: no hidepid option on /proc" 'hidepid=' "$(proc_line "$R0")"
assert_eq "restore --hidepid 0 --no-audit: settings" '0 false' \
    "$(inspect_field "$R0" '"\(.spec.runtime_options.hidepid) \(.spec.runtime_options.audit)"')"
assert_eq "restore --hidepid 0 --no-audit: origin flag for both" 'flag flag' \
    "$(inspect_field "$R0" '"\(.spec.origin["/runtime_options/hidepid"]) \(.spec.origin["/runtime_options/audit"])"')"
assert_exit "restore --no-audit: audit status refuses (audit off)" 2 sw audit status "$R0"
assert_eq "restore --no-audit: no audit writer" 0 "$(writer_count "$R0")"
assert_eq "restore --hidepid 0 still has the snapshot's files" before "$(guest "$R0" 'cat /root/f.txt')"

# --- 2. memory snapshot ----------------------------------------------------------------

M=""
new_sandbox M || finish
capture sw run "$M" -c 'printf mem > /root/m; sleep 1000 </dev/null >/dev/null 2>&1 & echo ok'
assert_eq "memory source starts a background sleep" ok "$LAST_OUT"
wait_for 10 has_sleep "$M" || true
SLEEP_PID="$(guest_sleep "$M")"
assert_ne "the sleep runs in the source" "" "$SLEEP_PID"

MS=""
new_snapshot MS "$M" --kind memory || finish
pass "memory snapshot create prints an id ($MS)"
assert_match "memory snapshot create says memory on stderr" 'memory' "$LAST_ERR"
capture sw run "$M" -c 'printf late > /root/late; echo ok'
assert_eq "memory source still running after the snapshot" running "$(sw_state "$M")"
assert_eq "memory source still runs commands" ok "$LAST_OUT"
assert_eq "memory source still has its sleep (same pid)" "$SLEEP_PID" "$(guest_sleep "$M")"
assert_eq "ls: kind memory" memory "$(snap_entry "$MS" | jq -r .kind)"
assert_eq "ls: memory settings (hidepid 0, audit off)" '0 false' "$(snap_entry "$MS" | jq -r '"\(.settings.hidepid) \(.settings.audit)"')"

MR=""
new_sandbox MR --from-snapshot "$MS" || finish
assert_eq "memory restore is running" running "$(sw_state "$MR")"
assert_eq "memory restore's ps shows the sleep (same guest pid)" "$SLEEP_PID" "$(guest_sleep "$MR")"
assert_eq "memory restore has the file" mem "$(guest "$MR" 'cat /root/m')"
assert_eq "memory restore lacks the file written after the snapshot" absent \
    "$(guest "$MR" 'test -e /root/late && echo present || echo absent')"
assert_eq "memory source still has its sleep after the restore" "$SLEEP_PID" "$(guest_sleep "$M")"

# Audit on: memory refused, auto picks fs.
BEFORE_IDS="$(snap_ids)"
assert_exit "memory snapshot of an audited sandbox: exit 2" 2 sw snapshot create "$A" --kind memory
assert_match "... the message says audit rejects memory snapshots" 'audit.*memory|memory.*audit' "$LAST_ERR"
assert_eq "... no snapshot was made" "$BEFORE_IDS" "$(snap_ids)"
assert_eq "... the audited sandbox keeps running" running "$(sw_state "$A")"

AUTO_A=""
new_snapshot AUTO_A "$A" --kind auto
assert_eq "--kind auto with audit takes an fs snapshot" fs "$(snap_entry "$AUTO_A" | jq -r .kind)"
assert_match "--kind auto with audit: stderr says fs because audit is on" 'fs.*audit|audit.*fs' "$LAST_ERR"
AUTO_M=""
new_snapshot AUTO_M "$M" --kind auto
assert_eq "--kind auto without audit takes a memory snapshot" memory "$(snap_entry "$AUTO_M" | jq -r .kind)"
assert_match "--kind auto without audit: stderr says memory" 'memory' "$LAST_ERR"
assert_match "--kind auto without audit: stderr says why (audit off)" 'audit' "$LAST_ERR"
assert_exit "--kind bogus is a usage error" 2 sw snapshot create "$M" --kind bogus

# hidepid alone allows memory snapshots; a restore cannot change hidepid or turn audit on.
H=""
new_sandbox H --hidepid 2 || finish
capture sw run "$H" -c 'sleep 1000 </dev/null >/dev/null 2>&1 & echo ok'
wait_for 10 has_sleep "$H" || true
HS=""
new_snapshot HS "$H" --kind memory
HR=""
new_sandbox HR --from-snapshot "$HS"
assert_match "memory restore with hidepid 2 keeps hidepid=2" 'hidepid=2' "$(proc_line "$HR")"
assert_ne "memory restore with hidepid 2 keeps the sleep" "" "$(guest_sleep "$HR")"
DIRS="$(sandbox_dirs)"
assert_exit "memory restore --hidepid 0: exit 2" 2 sw create --from-snapshot "$HS" --hidepid 0
assert_match "... the message points to a fresh launch or a filesystem restore" 'fresh launch|filesystem' "$LAST_ERR"
assert_exit "memory restore --audit: exit 2" 2 sw create --from-snapshot "$HS" --audit
assert_match "... the message says audit rejects live restores" 'audit' "$LAST_ERR"
assert_eq "refused restores create no sandbox" "$DIRS" "$(sandbox_dirs)"
HR2=""
new_sandbox HR2 --from-snapshot "$HS" --hidepid 2 --no-audit
assert_eq "memory restore with the same hidepid (2) and --no-audit is allowed" running "$(sw_state "$HR2")"

# --- 3. faults -------------------------------------------------------------------------

assert_exit "snapshot of an unknown sandbox: exit 4" 4 sw snapshot create sw-000000000000 --kind fs
assert_match "... names it" 'sw-000000000000' "$LAST_ERR"

TERM_ID=""
new_sandbox TERM_ID
sw terminate "$TERM_ID" >/dev/null 2>&1
BEFORE_IDS="$(snap_ids)"
capture sw snapshot create "$TERM_ID" --kind fs
assert_ne "snapshot of a terminated sandbox fails" 0 "$LAST_RC"
assert_match "... saying it is not running" "$TERM_ID.*not running|not running.*$TERM_ID" "$LAST_ERR"
assert_eq "... one line on stderr" 1 "$(line_count "$LAST_ERR")"
assert_eq "... and makes no snapshot" "$BEFORE_IDS" "$(snap_ids)"

assert_exit "restore of a missing snapshot: exit 4" 4 sw create --from-snapshot snap-000000000000
assert_match "... names it" 'snap-000000000000' "$LAST_ERR"

# Corrupt snapshots (broken by hand): a clear error, no sandbox.
corrupt_case() {  # LABEL SNAPSHOT-ID
    local label="$1" sid="$2" dirs
    dirs="$(sandbox_dirs)"
    capture sw create --from-snapshot "$sid"
    assert_eq "$label: restore fails with exit 1 (corrupt, sandweave-snapshot(1))" 1 "$LAST_RC"
    assert_match "$label: restore says the snapshot is corrupt" "$sid.*(corrupt|damaged)|(corrupt|damaged).*$sid" "$LAST_ERR"
    assert_eq "$label: restore creates no sandbox" "$dirs" "$(sandbox_dirs)"
    assert_eq "$label: snapshot ls does not offer it" "" "$(snap_entry "$sid")"
}
C1="" C2="" C3=""
new_snapshot C1 "$M" --kind fs
rm -f "$STATE/snapshots/$C1/snapshot.json"
corrupt_case "snapshot.json deleted" "$C1"
new_snapshot C2 "$M" --kind fs
rm -rf "$STATE/snapshots/$C2/layer"
corrupt_case "layer/ deleted" "$C2"
new_snapshot C3 "$M" --kind memory
rm -f "$STATE/snapshots/$C3/checkpoint/checkpoint.img"
corrupt_case "memory checkpoint image deleted" "$C3"
for c in "$C1" "$C2" "$C3"; do
    assert_exit "snapshot rm removes corrupt $c" 0 sw snapshot rm "$c"
    assert_true "... its directory is gone" test ! -e "$STATE/snapshots/$c"
done

assert_exit "snapshot rm of a good snapshot" 0 sw snapshot rm "$AUTO_M"
assert_eq "... it is gone from snapshot ls" "" "$(snap_entry "$AUTO_M")"
assert_true "... and from disk" test ! -e "$STATE/snapshots/$AUTO_M"
assert_exit "snapshot rm again: exit 4" 4 sw snapshot rm "$AUTO_M"
assert_exit "restore of a removed snapshot: exit 4" 4 sw create --from-snapshot "$AUTO_M"

# A full disk while the layer is copied: the state dir is a 48 MiB tmpfs, the
# guest's 30 MiB file fits once but not twice.
full_disk_case() {
    local fullfs="$STATE/fullfs" fstate
    mkdir -p "$fullfs"
    if ! mount -t tmpfs -o size=48m,mode=0700 sw-it-full "$fullfs"; then
        fail "full disk: mount a 48 MiB tmpfs"
        return
    fi
    fstate="$fullfs/state"
    local F=""
    SANDWEAVE_STATE_DIR="$fstate" new_sandbox F
    if [[ -n "$F" ]]; then
        capture env SANDWEAVE_STATE_DIR="$fstate" "$SW" run "$F" -c 'dd if=/dev/zero of=/root/big bs=1M count=30 2>/dev/null && echo ok'
        assert_eq "full disk: the guest writes 30 MiB" ok "$LAST_OUT"
        capture env SANDWEAVE_STATE_DIR="$fstate" "$SW" snapshot create "$F" --kind fs
        assert_ne "full disk: snapshot create fails" 0 "$LAST_RC"
        assert_match "full disk: the error says the disk is full" 'No space left|ENOSPC|disk full|no space' "$LAST_ERR"
        assert_eq "full disk: snapshot ls has no entry" "[]" \
            "$(SANDWEAVE_STATE_DIR="$fstate" "$SW" snapshot ls --json 2>/dev/null | jq -c .)"
        assert_eq "full disk: no .tmp-* left by the failed snapshot" "" \
            "$(find "$fstate/snapshots" -mindepth 1 -maxdepth 1 -name '.tmp-*' 2>/dev/null)"
        assert_eq "full disk: the source keeps running" running "$(SANDWEAVE_STATE_DIR="$fstate" sw_state "$F")"
        # With room again, the next snapshot works and nothing temporary is left.
        SANDWEAVE_STATE_DIR="$fstate" "$SW" run "$F" -- rm -f /root/big >/dev/null 2>&1
        local FS=""
        SANDWEAVE_STATE_DIR="$fstate" new_snapshot FS "$F" --kind fs
        assert_eq "full disk: the next snapshot is listed" "$FS" \
            "$(SANDWEAVE_STATE_DIR="$fstate" "$SW" snapshot ls --json 2>/dev/null | jq -r '.[].id')"
        assert_eq "full disk: no .tmp-* after the next snapshot command" "" \
            "$(find "$fstate/snapshots" -mindepth 1 -maxdepth 1 -name '.tmp-*' 2>/dev/null)"
        SANDWEAVE_STATE_DIR="$fstate" timeout 60 "$SW" rm "$F" >/dev/null 2>&1
    fi
    umount "$fullfs" 2>/dev/null || umount -l "$fullfs"
}
full_disk_case

# A snapshot killed (SIGKILL) while it copies a 512 MiB layer. The copy takes
# a few hundred ms; if the snapshot wins the race it is removed and tried again.
K=""
new_sandbox K
capture sw run "$K" -c 'dd if=/dev/zero of=/root/big bs=1M count=512 2>/dev/null && echo ok'
assert_eq "killed snapshot: the guest writes 512 MiB" ok "$LAST_OUT"
BEFORE_IDS="$(snap_ids)"
KILLED=0
for attempt in 1 2 3; do
    "$SW" snapshot create "$K" --kind fs >"$SCRATCH/killed.out" 2>"$SCRATCH/killed.err" </dev/null &
    KPID=$!
    for _ in $(seq 2000); do
        pgrep -f -- "$STATE/sandboxes/$K/upper" >/dev/null && break
        kill -0 "$KPID" 2>/dev/null || break
        sleep 0.005
    done
    kill -9 "$KPID" 2>/dev/null
    { wait "$KPID"; } 2>/dev/null
    KRC=$?
    # The orphaned copy may run on; let it end.
    wait_for 20 no_procs_matching "$STATE/sandboxes/$K/upper"
    if [[ "$KRC" == 137 ]]; then KILLED=1; break; fi
    # The snapshot finished first: drop it and try again.
    [[ -s "$SCRATCH/killed.out" ]] && "$SW" snapshot rm "$(cat "$SCRATCH/killed.out")" >/dev/null 2>&1
done
if ((KILLED)); then
    pass "killed snapshot: sandweave was killed during the layer copy (attempt $attempt)"
    assert_eq "killed snapshot: snapshot ls has no new entry" "$BEFORE_IDS" "$(snap_ids)"
    source_usable() { [[ "$("$SW" run "$K" -- echo alive 2>/dev/null)" == alive ]]; }
    wait_for 5 source_usable
    assert_eq "killed snapshot: the source sandbox still runs commands (not left paused)" alive \
        "$("$SW" run "$K" -- echo alive 2>&1)"
    assert_eq "killed snapshot: the source is listed as running" running "$(sw_state "$K")"
    NEXT=""
    new_snapshot NEXT "$M" --kind fs
    assert_eq "killed snapshot: no .tmp-* after the next snapshot command" "" \
        "$(find "$STATE/snapshots" -mindepth 1 -maxdepth 1 -name '.tmp-*' 2>/dev/null)"
    assert_eq "killed snapshot: still no entry from the killed build" "$(printf '%s\n' $BEFORE_IDS $NEXT | sort | tr '\n' ' ')" "$(snap_ids)"
else
    fail "killed snapshot: could not kill sandweave during the copy in 3 attempts" "$(cat "$SCRATCH/killed.err")"
fi

# --- 4. usage ----------------------------------------------------------------------------

DIRS="$(sandbox_dirs)"
assert_exit "--template with --from-snapshot: exit 2" 2 sw create --from-snapshot "$S" --template base
assert_match "... says they cannot be combined" 'template.*from-snapshot|from-snapshot.*template' "$LAST_ERR"
assert_eq "... and creates no sandbox" "$DIRS" "$(sandbox_dirs)"

printf '(%d s)\n' "$((SECONDS - T0))"
finish
