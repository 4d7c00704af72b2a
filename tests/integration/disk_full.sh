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
sw run "$S" -- sh -c 'echo one > /one' >/dev/null
SNAP=$(sw snapshot create "$S" --kind fs --json | jq -r .id) || fatal "first snapshot"
EXP="$TMPFS/export.jsonl"
assert_exit "first export" 0 sw audit export "$S" "$EXP"
old_sha="$(sha256sum "$EXP" | cut -d' ' -f1)"
old_status_sha="$(sha256sum "$EXP.status.json" | cut -d' ' -f1)"
sw run "$S" -- sh -c 'i=0; while [ $i -lt 200 ]; do echo $i > /dev/null; i=$((i+1)); done' >/dev/null

# Fills the state directory's file system to the last block (again before
# each step: a failed step frees what it had taken).
fill() {
    dd if=/dev/zero of="$TMPFS/filler.$((++fills))" bs=1M >/dev/null 2>&1
    dd if=/dev/zero of="$TMPFS/filler.$((++fills))" bs=1k >/dev/null 2>&1
    sync
}
fills=0
fill
assert_eq "the state directory is full" 0 "$(df --output=avail -B1 "$TMPFS" | tail -1 | tr -d ' ')"

one_line() { [[ -n "$1" && "$(line_count "$1")" == 1 ]]; }
before_dirs="$(ls "$STATE/sandboxes" | sort)"
capture sw create
assert_ne "create on a full disk fails" 0 "$LAST_RC"
assert_true "create: one line on stderr" one_line "$LAST_ERR"
assert_match "create: says why" "No space left on device|disk full|ENOSPC" "$LAST_ERR"
assert_eq "create: no sandbox half-made" "$before_dirs" "$(ls "$STATE/sandboxes" | sort)"
assert_eq "create: ls lists only the first" "$S" "$(sw ls --ids)"

fill
capture sw snapshot create "$S" --kind fs
assert_ne "snapshot on a full disk fails" 0 "$LAST_RC"
assert_true "snapshot: one line on stderr" one_line "$LAST_ERR"
assert_match "snapshot: says why" "No space left on device|disk full|ENOSPC" "$LAST_ERR"
assert_eq "snapshot: only the first is listed" "$SNAP" "$(sw snapshot ls --json | jq -r '.[].id')"
assert_eq "snapshot: no temporary directory left" "" "$(ls -A "$STATE/snapshots" | grep -v -e "^$SNAP\$" -e '\.lock$' || true)"
assert_eq "snapshot: the source still runs" running "$(sw_state "$S")"

# The guest works on while the disk is full: the writer cannot keep up.
sw run "$S" -- sh -c 'i=0; while [ $i -lt 50 ]; do ls / > /dev/null; i=$((i+1)); done' >/dev/null
fill
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
rm -f "$TMPFS"/filler.*
capture sw audit export "$S" "$TMPFS/export2.jsonl"
assert_eq "export with space again: exit 3, the log lost events while the disk was full" 3 "$LAST_RC"
assert_match "... and the status says why" "disk_failure" "$(jq -c .reasons "$TMPFS/export2.jsonl.status.json")"
assert_eq "... and claims no more than the log holds" "$(stat -c %s "$TMPFS/export2.jsonl")" \
    "$(jq -r .bytes "$TMPFS/export2.jsonl.status.json")"
R=$(sw_create --from-snapshot "$SNAP") || fail "the earlier snapshot restores"
assert_eq "the earlier snapshot has its file" one "$(sw run "$R" -- cat /one 2>&1)"
assert_exit "rm --all" 0 sw rm --all
assert_exit "snapshot rm" 0 sw snapshot rm "$SNAP"
assert_no_leftovers "after the disk-full tests"
finish
