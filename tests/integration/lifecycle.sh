#!/usr/bin/env bash
# Sandbox lifecycle: create, ls, inspect, terminate, rm, prune, a sandbox whose
# runtime died, names and labels, and the features that must not be pretended.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

# --- an empty state dir ---------------------------------------------------------------
capture sw ls --json
assert_eq "ls --json on an empty state dir: []" "[]" "$(jq -c . <<<"$LAST_OUT")"
capture sw ls
assert_eq "ls on an empty state dir: only the header" 1 "$(line_count "$LAST_OUT")"

# --- create prints only the id; the sandbox runs -----------------------------------
capture sw create --template base
assert_eq "create exits 0" 0 "$LAST_RC"
assert_eq "create prints exactly one line" 1 "$(line_count "$LAST_OUT")"
assert_match "create prints only the id" '^sw-[0-9a-f]{12}$' "$LAST_OUT"
ID="$LAST_OUT"
assert_eq "the new sandbox is running" running "$(sw_state "$ID")"
assert_true "its directory exists" test -d "$STATE/sandboxes/$ID"
assert_ne "its overlay is mounted" "" "$(mounts_under "$STATE/sandboxes/$ID")"
assert_eq "runsc reports it running" running \
    "$("$(runsc_bin)" --root "$STATE/runsc" state "$ID" 2>/dev/null | jq -r .status)"

capture sw create --template base --json
assert_eq "create --json exits 0" 0 "$LAST_RC"
JID="$(jq -r .id <<<"$LAST_OUT")"
assert_match "create --json: one document with the id" '^sw-[0-9a-f]{12}$' "$JID"
assert_eq "create --json: state running" running "$(jq -r .state <<<"$LAST_OUT")"
capture sw rm --json "$JID"
assert_eq "rm --json names what it removed" "[\"$JID\"]" "$(jq -c .removed <<<"$LAST_OUT")"
FID="$(sw create --template base)"
capture sw rm -f "$FID"
assert_eq "rm -f (docker's habit) removes a running sandbox" "0 $FID" "$LAST_RC $LAST_OUT"
assert_true "... and it is gone" test ! -e "$STATE/sandboxes/$FID"

# --- ls -----------------------------------------------------------------------------
capture sw ls
assert_eq "ls exits 0" 0 "$LAST_RC"
assert_match "ls shows the id and state" "$ID .* running " "$LAST_OUT"
capture sw ls --json
assert_eq "ls --json exits 0" 0 "$LAST_RC"
J="$LAST_OUT"
assert_eq "ls --json is one array with the sandbox" 1 "$(jq 'length' <<<"$J")"
assert_eq "ls --json: id" "$ID" "$(jq -r '.[0].id' <<<"$J")"
assert_eq "ls --json: name (none given)" "" "$(jq -r '.[0].name' <<<"$J")"
assert_eq "ls --json: state" running "$(jq -r '.[0].state' <<<"$J")"
assert_match "ls --json: created_at is RFC 3339 UTC" '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?Z$' \
    "$(jq -r '.[0].created_at' <<<"$J")"
assert_eq "ls --json: labels (none)" "{}" "$(jq -c '.[0].labels // .[0].spec.labels' <<<"$J")"
assert_eq "ls --json: spec.template" base "$(jq -r '.[0].spec.template' <<<"$J")"
capture sw ls --ids
assert_eq "ls --ids prints the id" "$ID" "$LAST_OUT"
capture sw ls -q
assert_eq "ls -q (as docker ps -q) prints only the id" "$ID" "$LAST_OUT"
capture sw -q ls
assert_match "sandweave -q ls (the global --quiet) still prints the table" '^ID +NAME' "$LAST_OUT"

# The global options work before the verb too.
capture env -u SANDWEAVE_STATE_DIR "$SW" --state-dir "$STATE" ls --ids
assert_eq "sandweave --state-dir DIR ls (option before the verb) exits 0" 0 "$LAST_RC"
assert_eq "sandweave --state-dir DIR ls lists the sandbox" "$ID" "$LAST_OUT"
capture env -u SANDWEAVE_STATE_DIR "$SW" --state-dir="$STATE" ls --ids
assert_eq "sandweave --state-dir=DIR ls lists the sandbox" "$ID" "$LAST_OUT"
capture env -u SANDWEAVE_STATE_DIR "$SW" ls --ids --state-dir "$STATE"
assert_eq "sandweave ls --state-dir DIR lists the sandbox" "$ID" "$LAST_OUT"

# --- names and labels ------------------------------------------------------------------
capture sw create --template base --name web-1 --label team=infra --label episode=7
assert_eq "create --name --label exits 0" 0 "$LAST_RC"
NAMED="$LAST_OUT"
assert_match "create --name still prints only the id" '^sw-[0-9a-f]{12}$' "$NAMED"
J="$(sw ls --json)"
assert_eq "ls --json: the name" web-1 "$(jq -r --arg id "$NAMED" '.[] | select(.id == $id) | .name' <<<"$J")"
assert_eq "ls --json: the labels" '{"episode":"7","team":"infra"}' \
    "$(jq -c --arg id "$NAMED" '.[] | select(.id == $id) | (.labels // .spec.labels)' <<<"$J")"
capture sw ls
assert_match "ls shows name and labels" "$NAMED +web-1 .*episode=7,team=infra" "$LAST_OUT"
capture sw run web-1 -- hostname
assert_eq "run by name works" 0 "$LAST_RC"
capture sw run "${NAMED:0:9}" -- true
assert_eq "run by a unique id prefix works" 0 "$LAST_RC"
capture sw create --template base --name web-1
assert_eq "a taken name is a usage error (exit 2)" 2 "$LAST_RC"
assert_match "the error names the name" "web-1" "$LAST_ERR"
assert_eq "the error is one line" 1 "$(line_count "$LAST_ERR")"
assert_eq "the failed create left no sandbox behind" 2 "$(sw_count)"

# --- inspect -------------------------------------------------------------------------
capture sw inspect "$NAMED"
assert_eq "inspect exits 0" 0 "$LAST_RC"
J="$LAST_OUT"
assert_eq "inspect is one JSON document with the id" "$NAMED" "$(jq -r .id <<<"$J")"
assert_eq "inspect: state" running "$(jq -r .state <<<"$J")"
assert_eq "inspect: resolved hidepid" 0 "$(jq -r .spec.runtime_options.hidepid <<<"$J")"
assert_eq "inspect: resolved audit" false "$(jq -r .spec.runtime_options.audit <<<"$J")"
assert_eq "inspect: resolved env from the template" C.UTF-8 "$(jq -r .spec.env.LANG <<<"$J")"
assert_eq "inspect: origin of hidepid" "template base" "$(jq -r '.spec.origin["/runtime_options/hidepid"]' <<<"$J")"
assert_eq "inspect: origin of audit_max_bytes" "default" \
    "$(jq -r '.spec.origin["/runtime_options/audit_max_bytes"]' <<<"$J")"
assert_eq "inspect: origin of a --label" "flag" "$(jq -r '.spec.origin["/labels/team"]' <<<"$J")"
capture sw inspect --json "$NAMED"
assert_eq "inspect --json is the same document" "$NAMED" "$(jq -r .id <<<"$LAST_OUT")"

# --- terminate ---------------------------------------------------------------------------
capture sw terminate "$ID"
assert_eq "terminate exits 0" 0 "$LAST_RC"
assert_eq "terminated sandbox is stopped" stopped "$(sw_state "$ID")"
wait_for 5 no_procs_matching "$ID"
assert_eq "terminate stops its runsc processes" "" "$(procs_matching "$ID")"
assert_true "terminate keeps its directory until rm" test -f "$STATE/sandboxes/$ID/sandbox.json"
capture sw terminate "$ID"
assert_eq "terminate is idempotent" 0 "$LAST_RC"
capture sw run "$ID" -- true
assert_ne "run on a stopped sandbox fails" 0 "$LAST_RC"
assert_match "run on a stopped sandbox says it is not running" "not running|stopped" "$LAST_ERR"
assert_eq "that message is one line" 1 "$(line_count "$LAST_ERR")"
assert_eq "the other sandbox still runs" running "$(sw_state "$NAMED")"

# --- rm ------------------------------------------------------------------------------------
capture sw rm "$NAMED"
assert_eq "rm exits 0" 0 "$LAST_RC"
assert_eq "rm'd sandbox is not listed" "" "$(sw_state "$NAMED")"
assert_true "rm'd sandbox has no directory" test ! -e "$STATE/sandboxes/$NAMED"
assert_eq "rm'd sandbox has no mount" "" "$(mounts_under "$STATE/sandboxes/$NAMED")"
wait_for 5 no_procs_matching "$NAMED"
assert_eq "rm'd sandbox has no runsc process" "" "$(procs_matching "$NAMED")"
assert_eq "runsc no longer knows it" "" "$("$(runsc_bin)" --root "$STATE/runsc" list -quiet 2>/dev/null | grep -x "$NAMED")"
capture sw inspect "$NAMED"
assert_eq "inspect after rm: no such sandbox (exit 4)" 4 "$LAST_RC"
capture sw create --template base --name web-1
assert_eq "rm frees the name" 0 "$LAST_RC"
REUSED="$LAST_OUT"

# --- a sandbox whose runtime died shows failed -------------------------------------------
DEAD="$(sw_create --template base)"
kill_runtime "$DEAD" "runsc state gives the sandbox's pid"
assert_eq "a sandbox whose runsc was killed shows failed" failed "$(sw_state "$DEAD")"
capture sw inspect "$DEAD"
assert_eq "inspect shows it failed too" failed "$(jq -r .state <<<"$LAST_OUT")"
capture sw run "$DEAD" -- true
assert_ne "run on a failed sandbox fails" 0 "$LAST_RC"
assert_match "run on a failed sandbox says why" "not running|failed" "$LAST_ERR"

# --- prune ---------------------------------------------------------------------------------
capture sw prune
assert_eq "prune exits 0" 0 "$LAST_RC"
assert_match "prune names the stopped sandbox" "$ID" "$LAST_OUT"
assert_match "prune names the failed sandbox" "$DEAD" "$LAST_OUT"
assert_eq "prune removed the stopped sandbox" "" "$(sw_state "$ID")"
assert_eq "prune removed the failed sandbox" "" "$(sw_state "$DEAD")"
assert_true "prune removed their directories" test ! -e "$STATE/sandboxes/$ID" -a ! -e "$STATE/sandboxes/$DEAD"
assert_eq "prune keeps the running sandbox" running "$(sw_state "$REUSED")"
capture sw prune --json
assert_eq "prune --json with nothing to do" '[]' "$(jq -c .removed <<<"$LAST_OUT")"

# --- features that must not be pretended ---------------------------------------
capture sw create --template base --hidepid 2
if [[ "$LAST_RC" == 5 ]]; then
    pass "create --hidepid 2: exit 5 (runtime lacks hidepid)"
    assert_match "create --hidepid 2: the message says hidepid" "hidepid" "$LAST_ERR"
    assert_eq "create --hidepid 2: refused without leaving a sandbox" 1 "$(sw_count)"
elif [[ "$LAST_RC" == 0 ]]; then
    H="$LAST_OUT"
    assert_eq "create --hidepid 2: inspect says hidepid 2" 2 "$(sw inspect "$H" | jq -r .spec.runtime_options.hidepid)"
    capture sw run "$H" --user 1001:1001 -- ls /proc
    assert_no_match "hidepid 2 in force: uid 1001 does not see root's PID 1" '(^|[[:space:]])1($|[[:space:]])' "$LAST_OUT"
    capture sw run "$H" --user 1001:1001 -- cat /proc/1/cmdline
    assert_ne "hidepid 2 in force: uid 1001 cannot read /proc/1" 0 "$LAST_RC"
    capture sw run "$H" -- ls /proc
    assert_match "hidepid 2: root still sees PID 1" '(^|[[:space:]])1($|[[:space:]])' "$LAST_OUT"
    sw rm "$H" >/dev/null 2>&1
else
    fail "create --hidepid 2: exit 5 or 0" "got $LAST_RC: $LAST_ERR"
fi

capture sw create --template base --audit
if [[ "$LAST_RC" == 5 ]]; then
    pass "create --audit: exit 5 (audit not available)"
    assert_match "create --audit: the message says audit" "audit" "$LAST_ERR"
    assert_eq "create --audit: refused without leaving a sandbox" 1 "$(sw_count)"
elif [[ "$LAST_RC" == 0 ]]; then
    A="$LAST_OUT"
    assert_eq "create --audit: inspect says audit true" true "$(sw inspect "$A" | jq -r .spec.runtime_options.audit)"
    capture sw audit status "$A"
    assert_eq "create --audit: the audit writer reports status" 0 "$LAST_RC"
    sw rm "$A" >/dev/null 2>&1
else
    fail "create --audit: exit 5 or 0" "got $LAST_RC: $LAST_ERR"
fi

# --- everything goes ---------------------------------------------------------------------
capture sw rm "$REUSED"
assert_eq "rm the last sandbox" 0 "$LAST_RC"
assert_no_leftovers "after the lifecycle"

finish
