#!/usr/bin/env bash
# Disk full in the state directory (a small ext4 file system on a loop
# device; tmpfs lets small writes through at 0 bytes free): create, snapshot
# create and audit export fail with one clear line, leave nothing half-written,
# and what was made before (snapshots, exports, the sandbox itself) stays
# intact; the audit status owns up to events the full disk lost.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
sw_setup
require_cmd mkfs.ext4
TMPFS="$SCRATCH/small"
mkdir -p "$TMPFS"
truncate -s 64M "$SCRATCH/small.img"
mkfs.ext4 -q -m 0 "$SCRATCH/small.img" || skip "mkfs.ext4 failed"
mount -o loop "$SCRATCH/small.img" "$TMPFS" || skip "cannot mount a loop device"
on_cleanup unmount_small
unmount_small() {
    SANDWEAVE_STATE_DIR="$TMPFS/state" timeout 60 "$SW" rm --all >/dev/null 2>&1
    pkill -KILL -f -- "$TMPFS/state"
    for m in $(mounts_under "$TMPFS" | sort -r); do umount "$m" 2>/dev/null || umount -l "$m"; done
}
export SANDWEAVE_STATE_DIR="$TMPFS/state"
STATE="$TMPFS/state"

S=$(sw_create --audit) || fatal "create on the small state dir"
# Snapshots come from a sandbox without audit: an audit writer that hits the
# full disk gives back the space it had set aside, which would let the next
# step through.
P=$(sw_create) || fatal "create a second sandbox"
sw run "$P" -- sh -c 'echo one > /one' >/dev/null
SNAP=$(sw snapshot create "$P" --kind fs --json | jq -r .id) || fatal "first snapshot"
EXP="$TMPFS/export.jsonl"
assert_exit "first export" 0 sw audit export "$S" "$EXP"
old_sha="$(sha256sum "$EXP" | cut -d' ' -f1)"
old_status_sha="$(sha256sum "$EXP.status.json" | cut -d' ' -f1)"
sw run "$S" -- sh -c 'i=0; while [ $i -lt 200 ]; do echo $i > /dev/null; i=$((i+1)); done' >/dev/null

# Fills the state directory's file system to the last block (again before
# each step: a failed step frees what it had taken).
# ext4 hands back blocks it had set aside for delayed allocation once data is
# written out, so fill, sync, and fill again with directories and one-byte
# files until not even those fit.
fill() {
    fill_once
    # The audit writer gives back the space it had set aside when it meets
    # the full disk (its periodic state update does): take that too.
    sleep 1.5
    fill_once
}
fill_once() {
    local i
    dd if=/dev/zero of="$TMPFS/filler.$((++fills))" bs=1M >/dev/null 2>&1
    dd if=/dev/zero of="$TMPFS/filler.$((++fills))" bs=1k >/dev/null 2>&1
    sync
    for ((i = 0; i < 4000; i++)); do
        mkdir "$TMPFS/filler.$((++fills))" 2>/dev/null || break
    done
    for ((i = 0; i < 4000; i++)); do
        printf x >"$TMPFS/filler.$((++fills))" 2>/dev/null && sync -f "$TMPFS" || break
    done
    sync
}
fills=0
fill
assert_eq "the state directory is full" 0 "$(df --output=avail -B1 "$TMPFS" | tail -1 | tr -d ' ')"

one_line() { [[ -n "$1" && "$(line_count "$1")" == 1 ]]; }
before_dirs="$(ls "$STATE/sandboxes" | sort)"
fill
capture sw create
assert_ne "create on a full disk fails" 0 "$LAST_RC"
assert_true "create: one line on stderr" one_line "$LAST_ERR"
assert_match "create: says why" "No space left on device|disk full|ENOSPC" "$LAST_ERR"
assert_eq "create: no sandbox half-made" "$before_dirs" "$(ls "$STATE/sandboxes" | sort)"
assert_eq "create: ls lists only the first two" "$(printf '%s\n' "$S" "$P" | sort)" "$(sw ls --ids | sort)"

fill
capture sw snapshot create "$P" --kind fs
assert_ne "snapshot on a full disk fails" 0 "$LAST_RC"
assert_true "snapshot: one line on stderr" one_line "$LAST_ERR"
assert_match "snapshot: says why" "No space left on device|disk full|ENOSPC" "$LAST_ERR"
assert_eq "snapshot: only the first is listed" "$SNAP" "$(sw snapshot ls --json | jq -r '.[].id')"
assert_eq "snapshot: no temporary directory left" "" "$(ls -A "$STATE/snapshots" | grep -v -e "^$SNAP\$" -e '\.lock$' || true)"
assert_eq "snapshot: the source still runs" running "$(sw_state "$P")"

# The guest works on while the disk is full: the writer cannot keep up.
sw run "$S" -- sh -c 'i=0; while [ $i -lt 50 ]; do ls / > /dev/null; i=$((i+1)); done' >/dev/null
fill
capture sw run "$S" -- true
if [[ "$LAST_RC" != 0 ]]; then  # through the agent nothing is written for a run
    assert_true "run on a full disk: one line on stderr" one_line "$LAST_ERR"
    assert_match "run on a full disk: says why" "No space left on device" "$LAST_ERR"
fi
assert_eq "run on a full disk: the sandbox still runs" running "$(sw_state "$S")"
NEW="$TMPFS/export-new.jsonl"
capture sw audit export "$S" "$NEW"
assert_ne "export on a full disk fails" 0 "$LAST_RC"
assert_true "export: one line on stderr" one_line "$LAST_ERR"
assert_match "export: says why" "No space left on device|disk full|ENOSPC" "$LAST_ERR"
assert_eq "export: no sidecar claims the failed export complete" absent-or-false \
    "$(jq -r 'if .complete then "complete" else "absent-or-false" end' "$NEW.status.json" 2>/dev/null || echo absent-or-false)"
assert_eq "export: the earlier export is intact" "$old_sha" "$(sha256sum "$EXP" | cut -d' ' -f1)"
assert_eq "export: the earlier sidecar is intact" "$old_status_sha" \
    "$(sha256sum "$EXP.status.json" | cut -d' ' -f1)"
assert_eq "export: no temporary files beside it" "" "$(ls -A "$TMPFS" | grep '\.tmp-' || true)"

# Space again: everything works, the earlier snapshot restores.
rm -rf "$TMPFS"/filler.*
assert_exit "run with space again" 0 sw run "$S" -- true
capture sw audit export "$S" "$TMPFS/export2.jsonl"
assert_match "export with space again: exit 0, or 3 if the writer lost events" '^(0|3)$' "$LAST_RC"
assert_eq "... an incomplete status names a reason" ok \
    "$(jq -r 'if .complete or (.reasons | length > 0) then "ok" else "no reason" end' "$TMPFS/export2.jsonl.status.json")"
assert_eq "... and claims no more than the log holds" "$(stat -c %s "$TMPFS/export2.jsonl")" \
    "$(jq -r .bytes "$TMPFS/export2.jsonl.status.json")"
R=$(sw_create --from-snapshot "$SNAP") || fail "the earlier snapshot restores"
assert_eq "the earlier snapshot has its file" one "$(sw run "$R" -- cat /one 2>&1)"
assert_exit "rm --all" 0 sw rm --all
assert_exit "snapshot rm" 0 sw snapshot rm "$SNAP"
assert_no_leftovers "after the disk-full tests"
finish
