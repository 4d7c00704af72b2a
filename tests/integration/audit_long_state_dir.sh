#!/usr/bin/env bash
# An audited sandbox in a state directory whose path is far longer than a
# Unix socket's path may be (sun_path: 108 bytes), as a cluster's shared
# scratch paths are: create --audit, a command, a complete audit export and
# audit status all work. The writer binds its sockets through a descriptor of
# their directory; runsc is pointed at the sink through a short alias
# (/run/sandweave/audit/<id>, a symlink in a 0700 directory) that rm removes
# and prune clears once dangling. The sockets stay 0600 in a 0700 directory.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
sw_setup

# A state directory of at least 200 characters under $STATE (so the common
# cleanup kills and unmounts what it holds).
LONG="$STATE/long"
while ((${#LONG} < 200)); do LONG+="/state-directory-of-a-shared-scratch"; done
mkdir -p "$LONG"
lsw() { "$SW" --state-dir "$LONG" "$@"; }
long_cleanup() { lsw rm -f --all >/dev/null 2>&1; }
on_cleanup long_cleanup
assert_true "the state directory's path is 200 characters or more (${#LONG})" test "${#LONG}" -ge 200

assert_exit "create --audit in it" 0 lsw create --audit --template base
ID="$LAST_OUT"
[[ "$LAST_RC" == 0 ]] || fatal "create --audit" "$LAST_ERR"
AUDIT="$LONG/sandboxes/$ID/audit"
assert_true "the sink socket's own path is too long for sun_path" test "${#AUDIT}" -gt 100
assert_eq "the sink socket is 0600" 600 "$(stat -c %a "$AUDIT/sink.sock")"
assert_eq "... in a 0700 directory" 700 "$(stat -c %a "$AUDIT")"
ALIAS="/run/sandweave/audit/$ID"
assert_eq "runsc's short alias leads to the audit directory" "$AUDIT" "$(readlink "$ALIAS")"
assert_eq "... in a 0700 directory" 700 "$(stat -c %a /run/sandweave/audit)"

assert_exit "run in it" 0 lsw run "$ID" -- sh -c 'echo audited; ls / >/dev/null'
assert_eq "... its output" audited "$LAST_OUT"
assert_exit "audit status" 0 lsw --json audit status "$ID"
# A live status is no barrier: the writer may not have written the run's
# events yet when it answers, so it is asked again until it has.
status_counts() { test "$(lsw --json audit status "$ID" 2>/dev/null | jq -r '.events')" -gt 0; }
assert_true "... counts events" wait_for 20 status_counts
assert_exit "audit export" 0 lsw audit export "$ID" "$SCRATCH/log.jsonl"
assert_eq "... complete" true "$(jq -r .complete "$SCRATCH/log.jsonl.status.json")"
assert_true "... the command's exec is in it" grep -q '"sh"' "$SCRATCH/log.jsonl"
assert_exit "audit verify of the export" 0 lsw audit verify "$SCRATCH/log.jsonl"

assert_exit "rm" 0 lsw rm -f "$ID"
assert_true "rm removes the alias" test ! -L "$ALIAS"

# An alias a killed create left (its sandbox gone) is cleared by prune; a
# live one is not.
assert_exit "another create --audit" 0 lsw create --audit --template base
ID2="$LAST_OUT"
GHOST="/run/sandweave/audit/sw-000000000000"
ln -sfn "$LONG/sandboxes/sw-000000000000/audit" "$GHOST"
assert_exit "prune" 0 lsw prune
assert_true "prune clears a dangling alias" test ! -L "$GHOST"
assert_true "... and keeps a live sandbox's" test -L "/run/sandweave/audit/$ID2"
assert_exit "rm the other" 0 lsw rm -f "$ID2"
assert_eq "nothing is left in the long state directory" "" \
    "$(find "$LONG/sandboxes" -mindepth 1 -maxdepth 1 2>/dev/null)"

finish
