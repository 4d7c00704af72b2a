#!/usr/bin/env bash
# Each sandbox writes to its own overlay layer: what one sandbox writes, deletes
# or changes in / is invisible to another, and the image stays untouched.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

A="$(sw_create --template base)" || finish
B="$(sw_create --template base)" || finish
IMAGE="$STATE/images/base/rootfs"
assert_true "the base image exists" test -d "$IMAGE"

# Everything about the image tree: paths, modes, sizes, mtimes, link targets, content.
image_fingerprint() {
    (cd "$IMAGE" && find . -printf '%p %m %s %T@ %l\n' | sort && find . -type f -exec sha256sum {} + | sort) | sha256sum
}
BEFORE="$(image_fingerprint)"

capture sw run "$A" -c 'echo secret > /root/x && echo changed >> /etc/passwd && rm /bin/ls && mkdir -p /opt/a && echo ok'
assert_eq "sandbox A writes, appends and deletes in /" ok "$LAST_OUT"
capture sw run "$A" -c 'cat /root/x; tail -n 1 /etc/passwd; test -e /bin/ls || echo ls-gone'
assert_eq "A sees its own changes in a later run" $'secret\nchanged\nls-gone' "$LAST_OUT"

capture sw run "$B" -c 'test -e /root/x && echo visible || echo absent'
assert_eq "B does not see A's new file" absent "$LAST_OUT"
capture sw run "$B" -c 'grep -c changed /etc/passwd'
assert_eq "B does not see A's change to /etc/passwd" 0 "$LAST_OUT"
capture sw run "$B" -c 'test -e /bin/ls && echo present'
assert_eq "B still has the file A deleted" present "$LAST_OUT"
capture sw run "$B" -c 'test -d /opt/a && echo visible || echo absent'
assert_eq "B does not see A's new directory" absent "$LAST_OUT"

assert_true "the image has no /root/x" test ! -e "$IMAGE/root/x"
assert_true "the image still has /bin/ls" test -e "$IMAGE/bin/ls"
assert_eq "the image tree is unchanged" "$BEFORE" "$(image_fingerprint)"
assert_true "A's change is in A's own upper layer" test -f "$STATE/sandboxes/$A/upper/root/x"

sw rm "$A" >/dev/null 2>&1
C="$(sw_create --template base)" || finish
capture sw run "$C" -c 'test -e /root/x && echo visible || echo absent'
assert_eq "a sandbox created after A's rm starts from the clean image" absent "$LAST_OUT"
assert_eq "the image tree is unchanged after rm" "$BEFORE" "$(image_fingerprint)"

sw rm "$B" "$C" >/dev/null 2>&1
assert_no_leftovers "after overlay"
finish
