#!/usr/bin/env bash
# sandweave run in an existing sandbox: stdio, exit codes (Docker's), --user,
# --cwd, --env, --timeout, and signals sent to sandweave reaching the guest.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

ID="$(sw_create --template base)" || finish

# Whether the guest still runs a process whose args are exactly ARGS.
guest_has() { guest_ps "$ID" | awk '{ $1 = $2 = $3 = ""; sub(/^ +/, ""); print }' | grep -qx -- "$1"; }
guest_lacks() { ! guest_has "$1"; }

# --- user, stdio, exit status ---------------------------------------------------------
capture sw run "$ID" --user 1001:1001 -- id -u
assert_eq "--user 1001:1001: id -u" 1001 "$LAST_OUT"
capture sw run "$ID" --user 1001:1002 -- id -g
assert_eq "--user 1001:1002: id -g" 1002 "$LAST_OUT"
capture sw run "$ID" --user 1005 -- id -g
assert_eq "--user 1005: the gid defaults to the uid" 1005 "$LAST_OUT"
capture sw run "$ID" -- id -u
assert_eq "the template's default user is root" 0 "$LAST_OUT"

capture sw run "$ID" -c 'echo out; echo err >&2; exit 7'
assert_eq "-c: stdout is exactly the command's" out "$LAST_OUT"
assert_eq "-c: stderr is exactly the command's" err "$LAST_ERR"
assert_eq "-c: the exit status is the command's" 7 "$LAST_RC"

capture sw run "$ID" -- sh -c 'echo "$0|$1|$#"' 'a b' '$HOME;*'
assert_eq "argv after -- reaches the guest untouched" 'a b|$HOME;*|1' "$LAST_OUT"

capture sw run "$ID" -- sh -c 'head -c 300000 /dev/zero | tr "\0" x'
assert_eq "large output streams through whole" 300000 "${#LAST_OUT}"

printf 'from the host\n' >"$SCRATCH/stdin.txt"
OUT="$(sw run "$ID" -- cat <"$SCRATCH/stdin.txt" 2>/dev/null)"
assert_eq "stdin streams through" "from the host" "$OUT"

# Output goes where the caller's stdout points, after what is already there.
{ echo header; sw run "$ID" -- echo body; echo footer; } >"$SCRATCH/log" 2>/dev/null
assert_eq "stdout redirected to a file is written at the file's position, not over it" \
    $'header\nbody\nfooter' "$(cat "$SCRATCH/log")"

capture sw run "$ID" --cwd /tmp -- pwd
assert_eq "--cwd /tmp" /tmp "$LAST_OUT"
capture sw run "$ID" -- pwd
assert_eq "the default cwd is the template's" / "$LAST_OUT"
capture sw run "$ID" --env A=1 -c 'echo $A'
assert_eq "--env A=1" 1 "$LAST_OUT"
capture sw run "$ID" --env A=1 --env B=x=y -e C= -c 'echo "$A|$B|$C|$LANG"'
assert_eq "several --env, values with '=', empty values, template env kept" '1|x=y||C.UTF-8' "$LAST_OUT"
capture sw run "$ID" --env LANG=fr -c 'echo $LANG'
assert_eq "--env overrides the template's env" fr "$LAST_OUT"
capture sw run "$ID" -- sh -c 'echo $HOME'
assert_eq "root's HOME" /root "$LAST_OUT"

# --- Docker exit codes ----------------------------------------------------------------
capture sw run "$ID" -- no-such-command
assert_eq "command not found: 127" 127 "$LAST_RC"
assert_match "command not found: says so" "not found|no-such-command" "$LAST_ERR"
capture sw run "$ID" -- /etc/passwd
assert_eq "not executable: 126" 126 "$LAST_RC"
capture sw run "$ID" -c 'kill -9 $$'
assert_eq "killed by SIGKILL: 137" 137 "$LAST_RC"
capture sw run "$ID" -c 'kill -TERM $$'
assert_eq "killed by SIGTERM: 143" 143 "$LAST_RC"
capture sw run "$ID" -- false
assert_eq "false: 1" 1 "$LAST_RC"
capture sw run "$ID" -c 'exit 255'
assert_eq "exit 255 passes through" 255 "$LAST_RC"

# --- timeout ------------------------------------------------------------------------------
t0=$SECONDS
capture sw run "$ID" --timeout 2s -- sleep 33
elapsed=$((SECONDS - t0))
assert_eq "--timeout 2s: exit 124" 124 "$LAST_RC"
assert_true "--timeout 2s: returns within ~5 s (took ${elapsed}s)" test "$elapsed" -le 5
assert_match "--timeout: a message on stderr" "timed out|timeout" "$LAST_ERR"
wait_for 3 guest_lacks "sleep 33"
if guest_has "sleep 33"; then fail "--timeout: the guest's sleep is gone" "$(guest_ps "$ID")"
else pass "--timeout: the guest's sleep is gone"; fi
capture sw run "$ID" --timeout 5s -- echo quick
assert_eq "--timeout not reached: normal status and output" "0 quick" "$LAST_RC $LAST_OUT"

# --- signals sent to sandweave reach the guest ---------------------------------------------
signal_test() {  # SIGNAL EXPECTED_STATUS GUEST_SLEEP_SECONDS
    local sig="$1" want="$2" secs="$3" pid rc t0 elapsed
    # A background job of a non-interactive shell starts with SIGINT ignored;
    # a user's shell or supervisor would not do that.
    env --default-signal="$sig" "$SW" run "$ID" -- sleep "$secs" >/dev/null 2>"$SCRATCH/sig.err" &
    pid=$!
    if ! wait_for 10 guest_has "sleep $secs"; then
        fail "SIG$sig: the guest's sleep started" "$(guest_ps "$ID")"
    fi
    t0=$SECONDS
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
    elapsed=$((SECONDS - t0))
    assert_eq "SIG$sig to sandweave run: exit $want" "$want" "$rc"
    assert_true "SIG$sig: ends promptly (took ${elapsed}s)" test "$elapsed" -le 5
    wait_for 3 guest_lacks "sleep $secs"
    if guest_has "sleep $secs"; then fail "SIG$sig: the guest's sleep is gone" "$(guest_ps "$ID")" "sandweave's stderr: $(cat "$SCRATCH/sig.err")"
    else pass "SIG$sig: the guest's sleep is gone"; fi
}
signal_test INT 130 31
signal_test TERM 143 32
signal_test HUP 129 34

assert_eq "the sandbox still runs after all that" running "$(sw_state "$ID")"
capture sw rm "$ID"
assert_no_leftovers "after run"
finish
