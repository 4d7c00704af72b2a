#!/usr/bin/env bash
# A timeout, `kill` of a detached command and a vanished client end every
# process the command started, however it detached: a new session (setsid), a
# double fork reparented to PID 1, a daemon, as root or as another user. What
# other commands started is left alone, and a command that ends by itself
# keeps its background processes.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup
require_cmd jq

ID=$(sw create) || fatal "create"

# The guest's processes whose args are exactly $1, listed by guest root from
# a separate run.
guest_has() { sw run "$ID" -- ps -o args 2>/dev/null | grep -qx -- "$1"; }
guest_lacks() { ! guest_has "$1"; }

# An unrelated command, started before and running throughout.
OTHER=$(sw run -d "$ID" -- sleep 2000) || fatal "run --detach"
wait_for 10 guest_has "sleep 2000" || fatal "the unrelated sleep started" "$(guest_ps "$ID")"

# Runs SCRIPT with --timeout 2s; every sleep named in it must be gone after.
timeout_takes_all() {  # LABEL SLEEPS SCRIPT [USER]
    local label="$1" sleeps="$2" script="$3" user="${4:-0:0}"
    assert_exit "$label: exit 124" 124 sw run "$ID" --user "$user" --timeout 2s -- sh -c "$script"
    local left
    left=$(sw run "$ID" -- ps -o args 2>/dev/null | grep -E -x "sleep ($sleeps)")
    assert_eq "$label: none of its sleeps is alive after the run returned" "" "$left"
}

timeout_takes_all "setsid" "1003|1004" 'setsid sleep 1003 & sleep 1004'
timeout_takes_all "double fork" "1005|100" '(sleep 1005 &) ; sleep 100'
timeout_takes_all "daemon (setsid, its parent exited)" "1006|100" \
    'setsid sh -c "sleep 1006 & exit" ; sleep 100'
# What nohup does (the base image has none): SIGHUP ignored, stdio detached.
timeout_takes_all "nohup-style daemon" "1007|100" \
    'setsid sh -c "trap \"\" HUP; sleep 1007 </dev/null >/dev/null 2>&1 & exit" ; sleep 100'
timeout_takes_all "setsid as uid 1001" "1008|1009" 'setsid sleep 1008 & sleep 1009' 1001:1001
# The agent's descriptors are in /proc/1/fd, one of them the hierarchy's root.
timeout_takes_all "uid 1001 trying to leave its group through /proc/1/fd" "1017|1018" \
    'for f in /proc/1/fd/* /proc/1/fd/*/*; do echo 0 >"$f/cgroup.procs"; done 2>/dev/null
     setsid sleep 1017 & sleep 1018' 1001:1001

if guest_has "sleep 2000"; then pass "a command started separately is not killed by another's timeout"
else fail "a command started separately is not killed by another's timeout" "$(guest_ps "$ID")"; fi

# --- kill of a detached command ---------------------------------------------------------------
H=$(sw run -d "$ID" -- sh -c 'setsid sleep 1010 & (sleep 1011 &) ; sleep 1012') || fatal "run -d"
wait_for 10 guest_has "sleep 1010" || fail "the detached command's setsid sleep started"
wait_for 10 guest_has "sleep 1011" || fail "the detached command's double-forked sleep started"
assert_exit "kill of a detached command: exit 0" 0 sw kill "$ID" "$H" --signal KILL
assert_exit "wait after kill: 128+9" 137 sw wait "$ID" "$H"
assert_true "kill took the setsid sleep" wait_for 5 guest_lacks "sleep 1010"
assert_true "kill took the double-forked sleep" wait_for 5 guest_lacks "sleep 1011"

# --- a client that vanishes ---------------------------------------------------------------------
"$SW" run "$ID" -- sh -c 'setsid sleep 1013 & (sleep 1014 &) ; sleep 1015' >/dev/null 2>&1 &
client=$!
wait_for 10 guest_has "sleep 1013" || fail "the attached command's setsid sleep started"
wait_for 10 guest_has "sleep 1014" || fail "the attached command's double-forked sleep started"
kill -KILL "$client"
wait "$client" 2>/dev/null
assert_true "a vanished client's command loses its setsid sleep" wait_for 10 guest_lacks "sleep 1013"
assert_true "... and its double-forked sleep" wait_for 10 guest_lacks "sleep 1014"

# --- a command that ends by itself keeps what it left running ------------------------------------
assert_exit "a command that leaves a daemon ends normally" 0 \
    sw run "$ID" -- sh -c 'setsid sleep 1016 </dev/null >/dev/null 2>&1 &'
# (its child may not have exec'd sleep yet when sh returns)
if wait_for 10 guest_has "sleep 1016"; then pass "... and its daemon keeps running (no timeout, no kill)"
else fail "... and its daemon keeps running (no timeout, no kill)" "$(guest_ps "$ID")"; fi

# Groups do not pile up: one whose daemon ended is removed, as is a killed one.
for i in 1 2 3 4 5 6; do sw run "$ID" -- sh -c 'setsid sleep 1 </dev/null >/dev/null 2>&1 &'; done
sw run "$ID" --timeout 1s -- sh -c 'setsid sleep 1019 & sleep 1020' >/dev/null 2>&1
sleep 2
# The hierarchy's empty groups, as guest root finds them through init's descriptor.
empty_groups() {
    sw run "$ID" -- sh -c 'for f in /proc/1/fd/*; do [ -e "$f/job.id" ] || continue
        for g in "$f"/c[0-9]*; do [ -n "$(cat "$g/cgroup.procs")" ] || echo "$g"; done; done' 2>/dev/null
}
# One is left: the group made ahead for the next command.
at_most_one_empty_group() { test "$(empty_groups | wc -l)" -le 1; }
if wait_for 5 at_most_one_empty_group; then pass "the groups of ended commands are removed"
else fail "the groups of ended commands are removed" "$(empty_groups)"; fi

# --- the groups are the agent's alone --------------------------------------------------------------
capture sw run "$ID" -- sh -c 'grep -c cgroup /proc/mounts'
assert_eq "no cgroup mount is visible in the guest" 0 "$LAST_OUT"
capture sw run "$ID" -- sh -c 'grep ^CapBnd /proc/1/status; grep ^CapBnd /proc/self/status'
assert_eq "init kept no capability a root command lacks (it dropped CAP_SYS_ADMIN)" 1 \
    "$(printf '%s\n' "$LAST_OUT" | awk '{print $2}' | sort -u | wc -l)"
assert_no_match "... and CAP_SYS_ADMIN (bit 21) is not in it" '[2367abef][0-9a-f]{5}$' \
    "$(printf '%s\n' "$LAST_OUT" | head -1 | awk '{print $2}' | cut -c9-)"

if guest_has "sleep 2000"; then pass "the unrelated detached command is still running at the end"
else fail "the unrelated detached command is still running at the end" "$(guest_ps "$ID")"; fi
sw kill "$ID" "$OTHER" --signal KILL >/dev/null 2>&1

finish
