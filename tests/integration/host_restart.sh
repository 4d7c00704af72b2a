#!/usr/bin/env bash
# A host restart, simulated: every runsc, shim, writer and watcher process of
# the state directory is killed and the overlays are unmounted. Then ls says
# failed, each audit log still exports with complete: false and a reason (exit
# 3), doctor names the leftovers and how to clear them, and prune clears them.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
sw_setup

A=$(sw_create --audit --name audited) || fatal "create audited"
B=$(sw_create --audit --ttl 1h) || fatal "create with a ttl"
C=$(sw_create) || fatal "create plain"
sw run "$A" -- sh -c 'echo before > /f' >/dev/null
sw pool create hp --size 1 >/dev/null || fatal "pool create"
capture sw doctor --json
assert_eq "before: doctor reports no leftovers" true \
    "$(jq -r '.checks[] | select(.name == "leftovers") | .ok' <<<"$LAST_OUT")"

# The "restart": nothing of the state dir survives, no mount stays.
pkill -KILL -f -- "$STATE"
wait_for 10 no_procs_matching
for m in $(mounts_under | sort -r); do umount -l "$m"; done
assert_eq "the restart left no processes" "" "$(procs_matching)"
assert_eq "the restart left no mounts" "" "$(mounts_under)"

for id in "$A" "$B" "$C"; do
    assert_eq "after the restart: $id is failed" failed "$(sw_state "$id")"
done
assert_exit "a command on a failed sandbox: exit 125" 125 sw run "$A" -- true
assert_match "... saying it is not running" "not running" "$LAST_ERR"

for id in "$A" "$B"; do
    capture sw audit export "$id" "$SCRATCH/$id.jsonl"
    assert_eq "export of $id after the restart: exit 3 (incomplete)" 3 "$LAST_RC"
    st="$SCRATCH/$id.jsonl.status.json"
    assert_eq "export of $id: complete false" false "$(jq -r .complete "$st")"
    assert_ne "export of $id: with a reason" "[]" "$(jq -c .reasons "$st")"
    assert_eq "export of $id: the sidecar's bytes are the log's" "$(stat -c %s "$SCRATCH/$id.jsonl")" "$(jq -r .bytes "$st")"
    assert_eq "export of $id: the sidecar's sha256 is the log's" \
        "$(sha256sum "$SCRATCH/$id.jsonl" | cut -d' ' -f1)" "$(jq -r .sha256 "$st")"
done
assert_true "export of the audited sandbox still holds what ran before" grep -q '"/f"\|/f"' "$SCRATCH/$A.jsonl"

capture sw doctor
assert_match "doctor: names the failed sandboxes" "leftovers.*failed sandbox" "$LAST_OUT"
assert_match "doctor: says how to clear them" "sandweave prune" "$LAST_OUT"
assert_exit "doctor still exits 0 (leftovers are not a broken host)" 0 sw doctor

capture sw prune
assert_eq "prune succeeds" 0 "$LAST_RC"
for p in $(sw pool ls --json | jq -r '.[].name'); do sw pool rm "$p" >/dev/null; done
assert_no_leftovers "after prune"
assert_eq "after prune: no names left" "" "$(ls "$STATE/names")"
capture sw doctor --json
assert_eq "after prune: doctor reports no leftovers" true \
    "$(jq -r '.checks[] | select(.name == "leftovers") | .ok' <<<"$LAST_OUT")"
assert_true "after prune: a new sandbox with the old name runs" sw_create --name audited
finish
