#!/usr/bin/env bash
# What keeps a host clean and truthful: an image cannot be replaced or removed
# under running sandboxes; prune finishes an rm a crash interrupted; SIGTERM
# ends `serve --stdio` like a closed connection (its command is killed); a
# hidepid probe that could not run is not remembered as a verdict.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

# --- images in use -------------------------------------------------------------------------
ID=$(sw create) || fatal "create"
assert_exit "image build --force while a sandbox runs on it: exit 2" 2 sw image build base --force
assert_match "image build --force: names the sandbox" "cannot rebuild image 'base'.*$ID" "$LAST_ERR"
assert_eq "image build --force: one line on stderr" 1 "$(line_count "$LAST_ERR")"
assert_exit "image rm while a sandbox runs on it: exit 2" 2 sw image rm base
assert_match "image rm: names the sandbox" "cannot remove image 'base'.*$ID" "$LAST_ERR"
capture sw run "$ID" -- /bin/sh -c 'echo still-here'
assert_eq "the sandbox still has its filesystem" "still-here" "$LAST_OUT"
sw terminate "$ID" >/dev/null
assert_exit "image build --force once the sandbox is stopped: exit 0" 0 sw image build base --force

# --- prune finishes an interrupted rm ---------------------------------------------------------
# rm renames the directory away before deleting it; a crash in between leaves
# the graveyard (its record and name already gone).
mv "$STATE/sandboxes/$ID" "$STATE/sandboxes/.rm-$ID-0123abcd"
rm -f "$STATE/names/"* 2>/dev/null
capture sw ls --ids
assert_eq "ls does not show a half-removed sandbox" "" "$LAST_OUT"
capture sw prune
assert_eq "prune: exit 0" 0 "$LAST_RC"
assert_true "prune removed the half-removed directory" test ! -e "$STATE/sandboxes/.rm-$ID-0123abcd"

# --- SIGTERM ends serve --stdio, and its command ------------------------------------------------
ID=$(sw create) || fatal "create"
# A fifo, not a coproc: bash forks a coproc's group in a subshell (so its
# pid is not serve's) and unsets the pid variable whenever it reaps it.
mkfifo "$SCRATCH/serve.in"
"$SW" serve --stdio <"$SCRATCH/serve.in" >"$SCRATCH/serve.out" 2>"$SCRATCH/serve.err" &
SERVE_PID=$!
exec 7>"$SCRATCH/serve.in"
printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"hello","params":{"protocol":1}}' \
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"sandbox.run\",\"params\":{\"id\":\"$ID\",\"argv\":[\"sleep\",\"301\"]}}" >&7
wait_for 10 sh -c "\"$SW\" run '$ID' -- ps -o args | grep -q '^sleep 301'"
assert_true "the served command runs in the guest" sh -c "\"$SW\" run '$ID' -- ps -o args | grep -q '^sleep 301'"
kill -TERM "$SERVE_PID"
assert_true "serve exits on SIGTERM within 10 s" wait_for 10 sh -c "! kill -0 $SERVE_PID 2>/dev/null"
assert_true "its command was killed in the guest" wait_for 10 sh -c "! \"$SW\" run '$ID' -- ps -o args | grep -q '^sleep 301'"
assert_eq "the sandbox still runs" running "$(sw_state "$ID")"
exec 7>&-
sw rm "$ID" >/dev/null

# --- a hidepid probe that could not run is not cached -------------------------------------------
FAKE="$SCRATCH/runsc-that-fails"
printf '#!/bin/sh\n[ "$1" = --version ] && { echo "runsc version fake"; exit 0; }\nexit 3\n' >"$FAKE"
chmod +x "$FAKE"
assert_exit "hidepid with a runtime whose probe cannot run: exit 5" 5 sw --runsc "$FAKE" create --hidepid 2
assert_match "it says the check could not be made (not 'not enforced')" "could not check whether" "$LAST_ERR"
assert_true "no verdict was cached for that runtime" \
    sh -c "! grep -ls '\"hidepid\"' '$STATE'/runtime/*.json"
assert_exit "the next try probes again (same message, not a cached verdict)" 5 sw --runsc "$FAKE" create --hidepid 2
assert_match "again: could not check" "could not check whether" "$LAST_ERR"

assert_no_leftovers "after the cleanup tests"
finish
