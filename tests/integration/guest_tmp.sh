#!/usr/bin/env bash
# The guest's /tmp is on disk, as Docker's: the root filesystem's own /tmp in the
# sandbox's overlay layer, not the runtime's in-memory tmpfs of unbounded size
# (df showed 2^53 blocks, and every file there was host memory the sentry kept
# until it was deleted). A file written to /tmp lands in the sandbox's upper
# directory and costs the sentry no memory.
#
# The sentry's memory is measured by its memory file (the memfd "runsc-memory"
# that holds all guest memory, tmpfs files included): its allocated blocks, a
# figure of this sandbox alone that other work on the machine does not move.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "runsc and overlay mounts"
sw_setup
require_cmd jq

id="$(sw_create --template base)" || finish
upper="$STATE/sandboxes/$id/upper"

capture sw run "$id" -c 'grep " /tmp " /proc/mounts; stat -c "%a %U" /tmp'
assert_no_match "the guest's /tmp is not a tmpfs" "tmpfs" "$LAST_OUT"
assert_match "the guest's /tmp keeps mode 1777, owned by root" $'\n1777 root$' "$LAST_OUT"

# df: the host filesystem of the sandbox's layer.
capture sw run "$id" -c 'df -k /tmp | tail -n 1'
guest_kib="$(awk '{ print $2 }' <<<"$LAST_OUT")"
host_kib="$(df -k --output=size "$upper" | tail -n 1 | tr -d ' ')"
assert_eq "df /tmp in the guest shows the size of the disk under the sandbox's layer" "$host_kib" "$guest_kib"

# memfile_kib: allocated KiB of the sentry's memory file.
runsc="$(sw inspect "$id" | jq -r .runsc)"
sentry="$("$runsc" --root "$STATE/runsc" state "$id" | jq -r .pid)"
memfile=""
for fd in /proc/"$sentry"/fd/*; do
    [[ "$(readlink "$fd")" == /memfd:runsc-memory* ]] && memfile="$fd"
done
[[ -n "$memfile" ]] || { fail "the sentry ($sentry) has a memory file"; finish; }
memfile_kib() { echo $(($(stat -L -c '%b * %B' "$memfile") / 1024)); }

before="$(memfile_kib)"
capture sw run "$id" --user 1001:1001 -c 'dd if=/dev/zero of=/tmp/big bs=1M count=256 2>/dev/null && wc -c </tmp/big'
assert_eq "uid 1001 writes 256 MiB to /tmp" 268435456 "$LAST_OUT"
after="$(memfile_kib)"
grown=$(((after - before) / 1024))
echo "sentry memory file: $((before / 1024)) MiB before, $((after / 1024)) MiB with the file in /tmp"
# The whole file would be 256 MiB; the agent's own work is a few MiB.
assert_true "the file in /tmp costs the sentry no memory (grew $grown MiB)" test "$grown" -lt 32
assert_eq "the file is in the sandbox's upper directory on the host" 268435456 \
    "$(stat -c %s "$upper/tmp/big" 2>&1)"

capture sw run "$id" -c 'rm /tmp/big && ls -A /tmp'
assert_eq "the guest deletes it" "" "$LAST_OUT"
assert_true "and it is gone from the upper directory" test ! -e "$upper/tmp/big"

# Being in the layer, /tmp is in a filesystem snapshot, as in `docker commit`;
# a memory snapshot brings back a process's open file there too.
capture sw run "$id" -c 'echo kept > /tmp/keep && sh -c "exec 3</tmp/keep; exec sleep 1000" </dev/null >/dev/null 2>&1 & echo ok'
assert_eq "a process keeps /tmp/keep open" ok "$LAST_OUT"
for kind in fs memory; do
    snap="$(sw -q snapshot create "$id" --kind "$kind" 2>"$SCRATCH/snap.err")" ||
        { fail "$kind snapshot" "$(cat "$SCRATCH/snap.err")"; continue; }
    copy="$(sw_create --from-snapshot "$snap")" || continue
    capture sw run "$copy" -c 'cat /tmp/keep'
    assert_eq "a sandbox from a $kind snapshot has the file in /tmp" kept "$LAST_OUT"
    if [[ "$kind" == memory ]]; then
        capture sw run "$copy" -c 'p=$(ps | awk "/sleep 1000/ && !/awk/ { print \$1 }"); cat /proc/$p/fd/3'
        assert_eq "the restored process reads its open file in /tmp" kept "$LAST_OUT"
    fi
    sw rm "$copy" >/dev/null || fail "rm $copy"
done

sw rm "$id" >/dev/null || fail "rm $id"
finish
