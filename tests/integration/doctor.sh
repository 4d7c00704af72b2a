#!/usr/bin/env bash
# sandweave doctor: says this host can run sandboxes (exit 0), lists its checks
# as JSON, and fails (exit 5) when the runtime is missing.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

capture sw doctor
assert_eq "doctor exits 0 on this host" 0 "$LAST_RC"
assert_match "doctor reports the runsc check" 'runsc' "$LAST_OUT"
assert_match "doctor says sandboxes can run" 'can run sandboxes' "$LAST_OUT"
assert_no_match "doctor reports no FAIL" '(^|'$'\n'')FAIL' "$LAST_OUT"

jq_true() { jq -e "$1" >/dev/null 2>&1; }  # FILTER (JSON on stdin)

capture sw doctor --json
assert_eq "doctor --json exits 0" 0 "$LAST_RC"
J="$LAST_OUT"
assert_true "doctor --json is one JSON document" jq_true . <<<"$J"
assert_eq "doctor --json: ok" true "$(jq -r .ok <<<"$J")"
assert_true "doctor --json: a non-empty checks array" jq_true '(.checks | type == "array") and (.checks | length > 0)' <<<"$J"
assert_true "doctor --json: every check has name, ok, required, detail" \
    jq_true 'all(.checks[]; has("name") and (.ok | type == "boolean") and (.required | type == "boolean") and (.detail | type == "string"))' <<<"$J"
for check in runsc overlayfs "guest init" "state directory"; do
    assert_eq "doctor --json: check '$check' passes" true \
        "$(jq -r --arg n "$check" '.checks[] | select(.name == $n) | .ok' <<<"$J")"
done
assert_eq "doctor --json: every required check passes" "" \
    "$(jq -r '.checks[] | select(.required and (.ok | not)) | .name' <<<"$J")"
assert_eq "doctor leaves no mounts behind" "" "$(mounts_under)"
assert_eq "doctor leaves no scratch directories behind" "" \
    "$(find "$STATE" -mindepth 1 -maxdepth 1 -name 'doctor-*')"

capture env SANDWEAVE_RUNSC=/nonexistent "$SW" doctor
assert_eq "doctor with SANDWEAVE_RUNSC=/nonexistent exits 5" 5 "$LAST_RC"
assert_match "doctor names the missing runtime" '/nonexistent' "$LAST_OUT$LAST_ERR"
assert_match "doctor says sandboxes cannot run" 'cannot run sandboxes' "$LAST_OUT"
capture env SANDWEAVE_RUNSC=/nonexistent "$SW" doctor --json
assert_eq "doctor --json without runsc: ok false" false "$(jq -r .ok <<<"$LAST_OUT")"
assert_eq "doctor --json without runsc: the runsc check fails" false \
    "$(jq -r '.checks[] | select(.name == "runsc") | .ok' <<<"$LAST_OUT")"
assert_ne "doctor --json without runsc: non-zero exit" 0 "$LAST_RC"

finish
