#!/usr/bin/env bash
# The sandbox verbs through weave://, each with the output and exit status it
# has locally: stdin streaming, the command's own exit code, a pty (-it),
# --detach with logs/ps/kill/wait, --timeout killing the command, cp in and
# out, labels and ls --filter, inspect, audit status and an exported log that
# `audit verify` accepts, terminate, prune, and an unknown id.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_cmd script python3
weave_setup c 7653 17650  # short: a worker's audit socket path must stay under 100 bytes

capture ctl start
slurm_started_or_skip "the cluster and its controller start"
eval "$LAST_OUT"
CLIENT="$SCRATCH/client"
mkdir -p "$CLIENT"

capture "$SW" create --template base --hidepid 2 --audit --label team=blue
assert_eq "create with a label exits 0" 0 "$LAST_RC"
ID="$LAST_OUT"

# --- run ----------------------------------------------------------------------------
assert_eq "stdin streams to the command and back" "through stdin" \
    "$(printf 'through stdin' | "$SW" run -i "$ID" -- cat)"
capture "$SW" run "$ID" -- sh -c 'echo to-err >&2; exit 7'
assert_eq "run exits with the command's own status" 7 "$LAST_RC"
assert_eq "... and its stderr reaches the client's stderr" "to-err" "$LAST_ERR"
capture script -qec "$SW run -it $ID -- sh -c 'tty; exit 3'" /dev/null
assert_match "-it gives the command a terminal" '/dev/pts/[0-9]+' "$LAST_OUT"
assert_eq "... and exits with its status" 3 "$LAST_RC"
capture "$SW" run --timeout 1 "$ID" -- sleep 30
assert_eq "--timeout kills the command: exit 124, as locally" 124 "$LAST_RC"
assert_match "... saying so in one line" 'timed out after 1000 ms' "$LAST_ERR"

# --- detach, logs, ps, kill, wait ---------------------------------------------------
capture "$SW" run --detach "$ID" -- sh -c 'echo started; sleep 60'
assert_eq "run --detach exits 0" 0 "$LAST_RC"
H="$LAST_OUT"
assert_match "... and prints a handle" '^[0-9]+$' "$H"
assert_true "logs shows the detached command's output" \
    wait_for 10 bash -c '[[ "$("$0" logs "$1" "$2" 2>/dev/null)" == started ]]' "$SW" "$ID" "$H"
capture "$SW" ps "$ID" --json
assert_eq "ps lists it running" running \
    "$(jq -r --arg h "$H" '.[] | select((.handle | tostring) == $h) | .state' <<<"$LAST_OUT")"
assert_exit "kill exits 0" 0 "$SW" kill "$ID" "$H"
capture "$SW" wait "$ID" "$H"
assert_eq "wait returns the killed command's status (128 + SIGTERM)" 143 "$LAST_RC"

# --- cp ---------------------------------------------------------------------------------
head -c 300000 /dev/urandom >"$CLIENT/blob"
assert_exit "cp in exits 0" 0 "$SW" cp "$CLIENT/blob" "$ID:/tmp/blob"
capture "$SW" run "$ID" -- sha256sum /tmp/blob
assert_eq "the file arrives whole" "$(sha256sum <"$CLIENT/blob" | cut -d' ' -f1)" "${LAST_OUT%% *}"
assert_exit "cp out exits 0" 0 "$SW" cp "$ID:/tmp/blob" "$CLIENT/back"
assert_true "... and the file comes back whole" cmp -s "$CLIENT/blob" "$CLIENT/back"
capture "$SW" cp "$ID:/no/such/file" "$CLIENT/none"
assert_ne "cp of a missing guest file fails" 0 "$LAST_RC"
assert_eq "... with one line" 1 "$(line_count "$LAST_ERR")"

# --- ls, inspect, audit ----------------------------------------------------------------
capture "$SW" create --template base --label team=red
OTHER="$LAST_OUT"
capture "$SW" ls -q --filter label=team=blue
assert_eq "ls --filter label=team=blue lists only that sandbox" "$ID" "$LAST_OUT"
capture "$SW" inspect "$ID" --json
assert_eq "inspect shows its state, worker and hidepid" "running w 2" \
    "$(jq -r '"\(.state) \(.worker[0:1]) \(.spec.runtime_options.hidepid)"' <<<"$LAST_OUT")"
capture "$SW" audit status "$ID" --json
assert_eq "audit status answers for the live log" "true" "$(jq -r .connected <<<"$LAST_OUT")"
capture "$SW" audit export "$ID" "$CLIENT/audit.jsonl"
assert_eq "audit export exits 0" 0 "$LAST_RC"
capture "$SW" audit verify "$CLIENT/audit.jsonl"
assert_eq "audit verify accepts the exported log" 0 "$LAST_RC"

# --- terminate, prune, unknown ids -------------------------------------------------
assert_exit "terminate exits 0" 0 "$SW" terminate "$ID"
capture "$SW" inspect "$ID" --json
assert_eq "inspect then shows it stopped" stopped "$(jq -r .state <<<"$LAST_OUT")"
capture "$SW" prune
assert_eq "prune exits 0" 0 "$LAST_RC"
assert_eq "... and removes the stopped one (only)" "$OTHER" "$("$SW" ls -q)"
assert_eq "... and its Slurm job has ended" "" "$(squeue -h -t RUNNING,PENDING -o %j | grep -F "$ID" || true)"
capture "$SW" run sw-000000000000 -- true
assert_eq "an unknown id exits 4, as locally" 4 "$LAST_RC"
assert_eq "... with one line" 1 "$(line_count "$LAST_ERR")"
assert_exit "rm of the other exits 0" 0 "$SW" rm -f "$OTHER"
finish
