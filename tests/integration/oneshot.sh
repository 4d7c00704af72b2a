#!/usr/bin/env bash
# One-shot runs (`sandweave run --template T -- ARGV`): create, run, remove.
# Nothing may be left behind: not when the command succeeds, not when it fails,
# not when sandweave is interrupted while the command runs.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

capture sw run --template base -- uname -a
assert_eq "one-shot uname -a: exit 0" 0 "$LAST_RC"
assert_match "one-shot uname -a: prints Linux..." '^Linux ' "$LAST_OUT"
assert_eq "one-shot: stdout is only the command's output" 1 "$(line_count "$LAST_OUT")"
assert_no_leftovers "one-shot success"

capture sw run --template base -- sh -c 'echo partial; echo why >&2; exit 3'
assert_eq "one-shot failing command: its status (3) passes through" 3 "$LAST_RC"
assert_eq "one-shot failing command: its stdout" partial "$LAST_OUT"
assert_match "one-shot failing command: its stderr" 'why' "$LAST_ERR"
assert_no_leftovers "one-shot failure"

capture sw run --template base -- no-such-command
assert_eq "one-shot command not found: 127" 127 "$LAST_RC"
assert_no_leftovers "one-shot command not found"

capture sw run --template base -c 'kill -9 $$'
assert_eq "one-shot killed command: 137" 137 "$LAST_RC"
assert_no_leftovers "one-shot killed command"

capture sw run --template base --timeout 1s -- sleep 30
assert_eq "one-shot --timeout: 124" 124 "$LAST_RC"
assert_no_leftovers "one-shot timeout"

capture sw run --template '{"extends": "base", "env": {"GREETING": "hi"}}' --user 1001:1001 --label k=v \
    -c 'echo "$GREETING $(id -u)"'
assert_eq "one-shot with inline template, --user and --label" "hi 1001" "$LAST_OUT"
assert_no_leftovers "one-shot with create flags"

capture sw run --template base --name oneshot-name -- true
assert_eq "one-shot --name: exit 0" 0 "$LAST_RC"
assert_true "one-shot --name: the name is released" test ! -e "$STATE/names/oneshot-name"
capture sw run --template base --name oneshot-name -- true
assert_eq "one-shot --name twice in a row works" 0 "$LAST_RC"

# Interrupted while the command runs: the sandbox still goes.
one_running() { [[ "$(sw ls --json 2>/dev/null | jq -r '.[0].state // empty')" == running ]]; }
interrupt_test() {  # SIGNAL EXPECTED_STATUS
    local sig="$1" want="$2" pid rc t0
    # Not a background job of this shell, where SIGINT would start ignored.
    env --default-signal="$sig" "$SW" run --template base -- sleep 30 >/dev/null 2>"$SCRATCH/int.err" &
    pid=$!
    if ! wait_for 15 one_running; then
        fail "one-shot SIG$sig: the sandbox came up" "$(cat "$SCRATCH/int.err")"
    fi
    sleep 0.5  # let `sleep 30` start in the guest
    t0=$SECONDS
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
    assert_eq "one-shot interrupted by SIG$sig: exit $want" "$want" "$rc"
    assert_true "one-shot SIG$sig: ends promptly (took $((SECONDS - t0))s)" test $((SECONDS - t0)) -le 10
    assert_no_leftovers "one-shot interrupted by SIG$sig"
}
interrupt_test INT 130
interrupt_test TERM 143

# Interrupted at various points of start-up (create takes ~0.2 s here): whatever
# the moment, nothing may stay behind.
for delay in 0.05 0.1 0.15 0.2 0.3; do
    env --default-signal=INT "$SW" run --template base -- sleep 30 >/dev/null 2>&1 &
    pid=$!
    sleep "$delay"
    kill -INT "$pid"
    wait "$pid"
    rc=$?
    assert_ne "one-shot interrupted after ${delay}s: non-zero exit" 0 "$rc"
    assert_no_leftovers "one-shot interrupted after ${delay}s"
done

finish
