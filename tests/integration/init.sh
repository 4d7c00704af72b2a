#!/usr/bin/env bash
# The guest init: PID 1 is sandweave's init, and orphans left behind by 200
# separate `run`s are all reaped (no zombies accumulate).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

ID="$(sw_create --template base)" || finish

capture sw run "$ID" -- ps -o pid,args
assert_match "PID 1 is /.sandweave/init" '(^|'$'\n'') *1 +/\.sandweave/init *('$'\n''|$)' "$LAST_OUT"

RUNS=200
failures=0
t0=$SECONDS
for ((i = 0; i < RUNS; i++)); do
    sw run "$ID" -c 'sleep 0.1 & exit 0' >/dev/null 2>&1 </dev/null || failures=$((failures + 1))
done
assert_eq "$RUNS runs that leave a background child behind all exit 0 ($((SECONDS - t0))s)" 0 "$failures"

# A deeper orphan: a grandchild whose parent exits first.
capture sw run "$ID" -c 'sh -c "sleep 0.2 & exit 0" & wait; exit 0'
assert_eq "a run leaving a grandchild orphan exits 0" 0 "$LAST_RC"

# Every `sleep 0.1/0.2` ends and is reaped soon; looked at until then (or 10 s).
guest_ps_quiet() {
    capture sw run "$ID" -- ps -o pid,stat,comm
    [[ "$(awk 'NR > 1' <<<"$LAST_OUT" | wc -l | tr -d ' ')" == 2 ]]
}
wait_for 10 guest_ps_quiet || true
assert_eq "ps in the guest works" 0 "$LAST_RC"
zombies="$(awk 'NR > 1 && $2 ~ /Z/' <<<"$LAST_OUT")"
assert_eq "no zombie (Z) in the guest after $RUNS runs" "" "$zombies"
# Alive, whatever it is doing at the instant ps reads it: sleeping in poll
# (S), or serving this very ps (R, or D inside a read on a loaded host).
assert_match "PID 1 is still init" '(^|'$'\n'') *1 +[SRD][^ ]* +init' "$LAST_OUT"
assert_eq "only init and ps remain" 2 "$(awk 'NR > 1' <<<"$LAST_OUT" | wc -l | tr -d ' ')"

# An unprivileged guest user cannot signal init. (Guest root can stop its own
# sandbox: init ends on SIGTERM by design, and gVisor delivers SIGKILL to it.)
capture sw run "$ID" --user 1001:1001 -c 'kill -TERM 1'
assert_ne "uid 1001 cannot signal init" 0 "$LAST_RC"
capture sw run "$ID" -- true
assert_eq "the sandbox still runs commands" 0 "$LAST_RC"
assert_eq "and is still listed as running" running "$(sw_state "$ID")"

sw rm "$ID" >/dev/null 2>&1
assert_no_leftovers "after init"
finish
