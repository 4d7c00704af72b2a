#!/usr/bin/env bash
# Selecting sandboxes by label, state, template, pool and age: `ls --filter`,
# and the same filters on terminate, prune and rm (plus `rm --all`). Terms are
# ANDed; a bad term is a usage error naming it; nothing outside the selection
# is touched.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

ids_of() { jq -r '[.[].id] | sort | join(" ")' <<<"$1"; }
sorted() { printf '%s\n' "$@" | sort | tr '\n' ' ' | sed 's/ $//'; }

A1=$(sw create --label team=a --label run=1) || fatal "create A1"
A2=$(sw create --label team=a --label run=2) || fatal "create A2"
B1=$(sw create --label team=b) || fatal "create B1"

# --- ls --filter -------------------------------------------------------------------------
capture sw ls --json --filter label=team=a
assert_eq "ls --filter label=team=a: exactly A1 and A2" "$(sorted "$A1" "$A2")" "$(ids_of "$LAST_OUT")"
capture sw ls --json --filter label=team=a --filter label=run=2
assert_eq "two terms are ANDed: only A2" "$A2" "$(ids_of "$LAST_OUT")"
capture sw ls --json --filter label=team
assert_eq "label=KEY: any value" "$(sorted "$A1" "$A2" "$B1")" "$(ids_of "$LAST_OUT")"
capture sw ls --json --filter template=base --filter state=running
assert_eq "template=base, state=running: all three" "$(sorted "$A1" "$A2" "$B1")" "$(ids_of "$LAST_OUT")"
capture sw ls --json --filter older-than=1h
assert_eq "older-than=1h: none (all were just created)" "" "$(ids_of "$LAST_OUT")"
sleep 1
capture sw ls --json --filter older-than=1ms --filter label=team=b
assert_eq "older-than=1ms and label=team=b: B1" "$B1" "$(ids_of "$LAST_OUT")"
assert_exit "older-than=0s (no age at all): exit 2" 2 sw ls --filter older-than=0s
capture sw ls --ids --filter label=team=b
assert_eq "ls --ids --filter: one id per line" "$B1" "$LAST_OUT"

# --- bad terms -----------------------------------------------------------------------------
assert_exit "a misspelt key: exit 2" 2 sw ls --filter lable=team=a
assert_match "a misspelt key: named, with a suggestion" "lable.*did you mean 'label'" "$LAST_ERR"
assert_eq "a misspelt key: one line on stderr" 1 "$(line_count "$LAST_ERR")"
assert_exit "a bad state: exit 2" 2 sw ls --filter state=runing
assert_match "a bad state: suggestion" "did you mean 'running'" "$LAST_ERR"
assert_exit "a term without =: exit 2" 2 sw ls --filter team
assert_exit "rm with neither ids nor --filter nor --all: exit 2" 2 sw rm
assert_match "rm without a selection says how to select" "--filter.*--all" "$LAST_ERR"
assert_exit "ids and --filter together: exit 2" 2 sw rm "$A1" --filter label=team=a
assert_eq "nothing was removed by the refused calls" 3 "$(sw_count)"

# --- terminate / prune by filter ------------------------------------------------------------
capture sw terminate --filter label=team=b
assert_eq "terminate --filter label=team=b: exit 0" 0 "$LAST_RC"
assert_eq "terminate --filter: prints the id it stopped" "$B1" "$LAST_OUT"
assert_eq "B1 is stopped" stopped "$(sw_state "$B1")"
assert_eq "A1 still runs" running "$(sw_state "$A1")"
capture sw prune --filter label=team=a
assert_eq "prune --filter label=team=a: nothing (they run)" "" "$LAST_OUT"
assert_eq "prune --filter: the running A1 and A2 are kept" 3 "$(sw_count)"
capture sw prune --filter label=team=b
assert_eq "prune --filter label=team=b: removes B1" "$B1" "$LAST_OUT"
assert_eq "B1 is gone" "" "$(sw_state "$B1")"

# --- rm by filter, rm --all --------------------------------------------------------------------
capture sw rm --filter label=run=1 --json
assert_eq "rm --filter label=run=1: removes A1 only" "[\"$A1\"]" "$(jq -c .removed <<<"$LAST_OUT")"
assert_eq "A2 remains" running "$(sw_state "$A2")"
C1=$(sw create --label team=c) || fatal "create C1"
D1=$(sw create --label team=d) || fatal "create D1"
capture sw rm "$D1" no-such-sandbox --json
assert_eq "rm of an existing and a missing id: exit 4" 4 "$LAST_RC"
assert_eq "... the existing one is removed all the same" "[\"$D1\"]" "$(jq -c .removed <<<"$LAST_OUT")"
assert_eq "... the missing one is listed in errors" "no-such-sandbox:4" \
    "$(jq -r '.errors[] | "\(.id):\(.exit_status)"' <<<"$LAST_OUT")"
assert_match "... and named on stderr" "no such sandbox: no-such-sandbox" "$LAST_ERR"
capture sw rm --all
assert_eq "rm --all: exit 0" 0 "$LAST_RC"
assert_eq "rm --all: prints both ids" "$(sorted "$A2" "$C1")" "$(sorted $LAST_OUT)"
assert_eq "rm --all: none left" 0 "$(sw_count)"
capture sw rm --all
assert_eq "rm --all with nothing there: exit 0, nothing printed" "0|" "$LAST_RC|$LAST_OUT"

assert_no_leftovers "after the filter tests"
finish
