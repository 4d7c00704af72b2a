#!/usr/bin/env bash
# The ptrace platform's placement is measured in the real sentry
# (runtime/ptrace-colocate.patch, colocate_tune.go): a system-call-bound
# guest's short cycles are timed under both placements, tracer and stub on
# one CPU and left apart, and the faster is kept. Which one wins depends on
# the host, so this checks what holds on any host, against the real runsc:
#   - a guest of 40,000 system calls runs to the end with its output intact;
#   - the sentry decided, with a sample mean under each placement (the real
#     switch path feeds the tuner; a tuner that never left one placement
#     would have no figure for the other);
#   - each decision keeps the placement whose mean was lower;
#   - a guest that computes between its stops (a busy loop) still finishes.
# The unit tests of the tuner's logic run with runtime/build-runsc.sh --test.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "runsc"
sw_setup
require_cmd python3
require_helpers hidepid_oci_config.py

runsc="$(runsc_bin)"
sw image build base >/dev/null 2>&1 || fatal "the base image builds"
rootfs="$STATE/images/base/rootfs"

# A bundle running CMD (sh -c) on the base image: read-only, no terminal,
# no capabilities, /proc without hidepid (the hidepid matrix's config editor).
bundle() {  # DIR CMD
    mkdir -p "$1"
    (cd "$1" && "$runsc" spec -- /bin/true) || return 1
    python3 "$HELPERS/hidepid_oci_config.py" "$1/config.json" "$rootfs" hidepid=0 /bin/sh -c "$2"
}
n=0
# Runs bundle $1 with the sentry's debug log in $SCRATCH/log-N/; output in LAST_OUT.
run_logged() {  # BUNDLE
    n=$((n + 1))
    mkdir -p "$SCRATCH/log-$n"
    LAST_OUT="$("$runsc" --root="$STATE/raw" --platform=ptrace --network=none --debug \
        --debug-log="$SCRATCH/log-$n/" run --bundle "$1" "placement-$$-$n" </dev/null 2>"$SCRATCH/err-$n")"
    LAST_RC=$?
    LOG_DIR="$SCRATCH/log-$n"
}
cleanup_raw() {
    local id
    for id in $("$runsc" --root="$STATE/raw" list -q 2>/dev/null); do
        "$runsc" --root="$STATE/raw" delete --force "$id" >/dev/null 2>&1
    done
}
on_cleanup cleanup_raw

bundle "$SCRATCH/dd" 'dd if=/dev/zero bs=1 count=20000 2>/dev/null | wc -c' ||
    fatal "the dd bundle is made"
run_logged "$SCRATCH/dd"
assert_eq "a guest of 40,000 system calls exits 0" 0 "$LAST_RC"
assert_eq "and its output is intact" 20000 "$(tr -d ' ' <<<"$LAST_OUT")"

decisions="$(cat "$LOG_DIR"/*boot* 2>/dev/null | grep -o 'ptrace: tracer and stub [a-z]* (cycle [0-9]* ns colocated, [0-9]* ns spread)')"
count="$(line_count "$decisions")"
assert_true "the sentry decided on a placement at least once (${count} decisions)" test "$count" -ge 1
bad=""
while read -r _ _ _ _ chosen _ colocated _ _ spread _; do
    [[ -n "$chosen" ]] || continue
    if ! ((colocated > 0 && spread > 0)); then
        bad+="no sample under one placement: $colocated/$spread; "
    elif [[ "$chosen" == spread ]] && ((spread >= colocated)); then
        bad+="spread kept at $spread ns against $colocated colocated; "
    elif [[ "$chosen" == colocated ]] && ((spread < colocated)); then
        bad+="colocated kept at $colocated ns against $spread spread; "
    fi
done <<<"$decisions"
assert_eq "each decision had samples under both placements and kept the faster" "" "$bad"
printf '%s\n' "$decisions" | head -n 3

bundle "$SCRATCH/loop" 'i=0; while [ $i -lt 200000 ]; do i=$((i + 1)); done; echo $i' ||
    fatal "the loop bundle is made"
run_logged "$SCRATCH/loop"
assert_eq "a guest that computes exits 0" 0 "$LAST_RC"
assert_eq "and finishes its loop" 200000 "$LAST_OUT"

finish
