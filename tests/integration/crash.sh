#!/usr/bin/env bash
# Crash consistency: sandweave killed with SIGKILL at each step of create, run,
# terminate, rm, snapshot create and restore, pool create, acquire, resize and
# rm (the fault points of lib/core/fault.hpp, through the test build's
# sandweave-faults), then killed at random moments. After each crash: ls is
# truthful, the interrupted object can be used or removed, rm/prune/pool rm
# remove everything, and no process, mount, directory, name or pool claim is
# left; no audit sidecar claims more than its log holds.
#
# CRASH_RANDOM_ROUNDS and CRASH_CREATE_ROUNDS set the randomized loops' lengths
# (short here; bench/soak.sh runs them long).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
sw_setup
require_env SANDWEAVE_FAULTS
[[ -x "$SANDWEAVE_FAULTS" ]] || fatal "sandweave-faults is built" "$SANDWEAVE_FAULTS is missing"
SWF="$SANDWEAVE_FAULTS"

# crash POINT ARGS...: runs `sandweave ARGS` dying at POINT; it must die there.
crash() {
    local point="$1"
    shift
    SANDWEAVE_FAULT="$point" "$SWF" "$@" >"$SCRATCH/crash.out" 2>"$SCRATCH/crash.err" </dev/null
    local rc=$?
    assert_eq "$point: sandweave died there (SIGKILL)" 137 "$rc"
}

# ls is truthful: what it calls running runs a command; what it calls failed or
# stopped has no running runtime.
assert_truthful() {  # LABEL
    local label="$1" id state rs bad=""
    while read -r id state; do
        [[ -n "$id" ]] || continue
        rs="$("$(runsc_bin)" --root "$STATE/runsc" state "$id" 2>/dev/null | jq -r '.status // "gone"')"
        [[ -n "$rs" ]] || rs=gone
        case "$state" in
            running) sw run "$id" -- true >/dev/null 2>&1 </dev/null || bad+=" $id:running-but-cannot-run($rs)" ;;
            failed | stopped) [[ "$rs" != running ]] || bad+=" $id:$state-but-runsc-running" ;;
            creating) bad+=" $id:creating-with-no-creator" ;;
        esac
    done < <(sw ls --json | jq -r '.[] | "\(.id) \(.state)"')
    assert_eq "$label: ls is truthful" "" "$bad"
}

# Every sidecar in DIR claims no more than its log holds.
assert_sidecars_honest() {  # LABEL DIR
    local f st bad=""
    for st in "$2"/*.status.json; do
        [[ -e "$st" ]] || continue
        f="${st%.status.json}"
        [[ -f "$f" ]] || { bad+=" $(basename "$f"):missing"; continue; }
        [[ "$(jq -r .bytes "$st")" == "$(stat -c %s "$f")" ]] || bad+=" $(basename "$f"):bytes"
        [[ "$(jq -r .sha256 "$st")" == "$(sha256sum "$f" | cut -d' ' -f1)" ]] || bad+=" $(basename "$f"):sha256"
    done
    assert_eq "$1: no sidecar claims more than its log" "" "$bad"
}

# Everything goes: pools, sandboxes, snapshots; then nothing is left.
assert_all_removable() {  # LABEL
    local label="$1" p s
    for p in $(sw pool ls --json 2>/dev/null | jq -r '.[].name'); do sw pool rm "$p" >/dev/null 2>&1; done
    capture sw prune
    assert_eq "$label: prune succeeds" 0 "$LAST_RC"
    capture sw rm --all
    assert_eq "$label: rm --all succeeds" 0 "$LAST_RC"
    for s in $(sw snapshot ls --json 2>/dev/null | jq -r '.[].id'); do sw snapshot rm "$s" >/dev/null 2>&1; done
    assert_no_leftovers "$label"
    assert_eq "$label: no names left" "" "$(ls "$STATE/names")"
    assert_eq "$label: no pool directories left" "" "$(ls -A "$STATE/pools" | grep -v '^\.' || true)"
    assert_eq "$label: no snapshot leftovers" "" "$(ls -A "$STATE/snapshots" | grep -v '\.lock$' || true)"
    assert_eq "$label: no lifetime watchers or helpers left" "" "$(procs_matching "$STATE")"
}

# --- create ----------------------------------------------------------------------------
for point in create.reserved create.mounted audit.points-written create.writer-started create.launched; do
    crash "$point" create --audit --name crashy
    assert_eq "$point: ls shows it failed" "failed" "$(sw ls --json | jq -r '.[] | select(.name == "crashy") | .state')"
    assert_truthful "$point"
    assert_all_removable "$point"
    assert_true "$point: the name is free again" sw_create --name crashy
    sw rm crashy >/dev/null
done

# A create killed after making its directory and before its first record: ls
# has nothing to show, doctor names the directory, prune removes it and frees
# the name (found by a long random-kill loop).
crash reserve.dir-made create --audit --name crashy
assert_eq "reserve.dir-made: ls lists nothing" 0 "$(sw_count)"
assert_match "reserve.dir-made: doctor reports the directory" \
    'interrupted creates without a record.*prune' "$(sw doctor 2>&1)"
assert_all_removable "reserve.dir-made"
assert_true "reserve.dir-made: the name is free again" sw_create --name crashy
sw rm crashy >/dev/null

# --- run, terminate, rm ------------------------------------------------------------------
S=$(sw_create --audit --idle-timeout 1h) || fatal "create"
crash run.started run "$S" -- true
assert_eq "run.started: still running" running "$(sw_state "$S")"
assert_eq "run.started: not left busy (its activity lock went with it)" false \
    "$(sw inspect "$S" | jq -r .time_left.busy)"
for point in terminate.barrier-done terminate.stopped; do
    S=$(sw_create --audit --name t) || fatal "create"
    sw run "$S" -- echo hello >/dev/null
    crash "$point" terminate "$S"
    assert_truthful "$point"
    assert_exit "$point: terminate again completes" 0 sw terminate "$S"
    assert_eq "$point: stopped" stopped "$(sw_state "$S")"
    capture sw audit export "$S" "$SCRATCH/$point.jsonl"
    assert_match "$point: the audit log still exports (0 or 3)" '^(0|3)$' "$LAST_RC"
    assert_sidecars_honest "$point" "$SCRATCH"
    assert_all_removable "$point"
done
for point in rm.stopped rm.renamed; do
    S=$(sw_create --audit --name r) || fatal "create"
    crash "$point" rm "$S"
    assert_truthful "$point"
    assert_all_removable "$point"
    assert_true "$point: the name is free again" sw_create --name r
    sw rm r >/dev/null
done
# rm --audit-log (an episode's end in one request), killed at each step: the
# runtime is stopped or still whole, a sidecar never claims what was not
# written, and the sandbox is left stopped with its log, or gone.
for point in terminate.barrier-done finish.terminated finish.exported rm.stopped rm.renamed; do
    S=$(sw_create --audit --name f) || fatal "create"
    sw run "$S" -- echo hello >/dev/null
    crash "$point" rm --audit-log "$SCRATCH/finish-$point.jsonl" "$S"
    assert_truthful "rm --audit-log at $point"
    assert_sidecars_honest "rm --audit-log at $point" "$SCRATCH"
    if [[ "$(sw_state "$S")" == stopped ]]; then
        capture sw audit export "$S" "$SCRATCH/finish-$point-again.jsonl"
        assert_eq "rm --audit-log at $point: the stopped sandbox's log still exports whole" 0 "$LAST_RC"
    fi
    assert_all_removable "rm --audit-log at $point"
    assert_true "rm --audit-log at $point: the name is free again" sw_create --name f
    sw rm f >/dev/null
done
# Whole: the export verifies and holds the command, and the sandbox is gone.
S=$(sw_create --audit --hidepid 2) || fatal "create"
sw run "$S" --user 1001:1001 -- echo hello >/dev/null
capture sw rm --audit-log "$SCRATCH/finish.jsonl" "$S"
assert_eq "rm --audit-log: exit 0" 0 "$LAST_RC"
assert_eq "rm --audit-log: prints the id, then the export's summary" "$S" "$(head -1 <<<"$LAST_OUT")"
assert_match "rm --audit-log: ... complete" '^complete=true ' "$(sed -n 2p <<<"$LAST_OUT")"
assert_true "rm --audit-log: the export verifies" sw audit verify "$SCRATCH/finish.jsonl"
assert_true "rm --audit-log: the export has the command" \
    jq -se 'map(select(.point == "sentry/execve" and .argv[0] == "echo")) | length == 1' "$SCRATCH/finish.jsonl"
assert_eq "rm --audit-log: the sandbox is gone" 4 "$(sw inspect "$S" >/dev/null 2>&1; echo $?)"
capture sw rm --audit-log "$SCRATCH/x.jsonl" a b
assert_eq "rm --audit-log with two sandboxes: usage error" 2 "$LAST_RC"
S=$(sw_create) || fatal "create"
capture sw rm --audit-log "$SCRATCH/y.jsonl" "$S"
assert_eq "rm --audit-log of a sandbox without audit: usage error" 2 "$LAST_RC"
assert_eq "... and the sandbox is still running" running "$(sw_state "$S")"
sw rm "$S" >/dev/null

# --- snapshots ---------------------------------------------------------------------------
S=$(sw_create --name snapsrc) || fatal "create"
sw run "$S" -- sh -c 'echo kept > /data' >/dev/null
for point in snapshot.paused snapshot.verified; do
    crash "$point" snapshot create "$S" --kind fs --name "s-$point"
    assert_eq "$point: ls shows the source running" running "$(sw_state "$S")"
    assert_truthful "$point"
    assert_eq "$point: no half-made snapshot is listed" 0 "$(sw snapshot ls --json | jq length)"
done
for point in snapshot.checkpointed snapshot.deleted; do
    crash "$point" snapshot create "$S" --kind memory
    # The fix: the next ls restores the source from the checkpoint it left.
    assert_eq "$point: ls shows the source running again" running "$(sw_state "$S")"
    assert_truthful "$point"
    assert_eq "$point: its files survived" kept "$(sw run "$S" -- cat /data 2>&1)"
    assert_eq "$point: no half-made snapshot is listed" 0 "$(sw snapshot ls --json | jq length)"
done
SNAP=$(sw snapshot create "$S" --kind fs --json | jq -r .id) || fatal "snapshot"
for point in create.reserved create.mounted create.launched; do
    crash "$point" create --from-snapshot "$SNAP"
    assert_truthful "restore $point"
done
assert_eq "after the restore crashes: the snapshot still restores" kept \
    "$(R=$(sw create --from-snapshot "$SNAP") && sw run "$R" -- cat /data)"
assert_all_removable "snapshots"

# --- pools -------------------------------------------------------------------------------
crash pool.created pool create pc --size 2
assert_truthful "pool.created"
assert_exit "pool.created: the pool is usable (acquire)" 0 sw pool acquire pc
assert_all_removable "pool.created"
crash pool.member-made pool create pc --size 2
assert_truthful "pool.member-made"
assert_all_removable "pool.member-made"

sw pool create pa --size 2 >/dev/null || fatal "pool create"
crash pool.acquired pool acquire pa
assert_truthful "pool.acquired"
assert_eq "pool.acquired: the claimed member is listed as acquired" 1 \
    "$(sw ls --json | jq '[.[] | select(.pool.name == "pa" and .pool.state == "acquired")] | length')"
crash pool.resize-claimed pool resize pa 0
assert_truthful "pool.resize-claimed"
assert_exit "pool.resize-claimed: resize again finishes the claim" 0 sw pool resize pa 0
assert_eq "pool.resize-claimed: no idle or removing member left" 0 \
    "$(sw ls --json | jq '[.[] | select(.pool.name == "pa" and .pool.state != "acquired")] | length')"
sw pool resize pa 1 >/dev/null
wait_for 30 bash -c '[[ $("$0" pool ls --json | jq ".[0].warm") == 1 ]]' "$SW"
crash pool.rm-record-gone pool rm pa
assert_exit "pool.rm-record-gone: pool rm again finishes it" 0 sw pool rm pa
assert_exit "pool.rm-record-gone: the name is free again" 0 sw pool create pa --size 0
sw pool rm pa >/dev/null
sw pool create pb --size 1 >/dev/null
crash pool.rm-record-gone pool rm pb
capture sw prune
assert_eq "pool.rm-record-gone: prune finishes a half-removed pool" "" "$(ls -A "$STATE/pools" | grep -v '^\.' || true)"
assert_all_removable "pools"

# --- a dead idle member is never handed out -------------------------------------------------
sw pool create pd --size 1 >/dev/null
M=$(sw ls --json | jq -r '.[] | select(.pool.name == "pd") | .id')
kill -9 "$(runsc_pid "$M")" 2>/dev/null
wait_for 10 state_is "$M" failed
A=$(sw pool acquire pd) || fail "acquire with a dead idle member"
assert_ne "acquire does not hand out the dead member" "$M" "$A"
assert_exit "the acquired one runs" 0 sw run "$A" -- true
assert_all_removable "dead idle member"

# --- creates killed at random moments ------------------------------------------------
# Anywhere from process start to the sandbox running (a create takes about
# CREATE_MS): afterwards nothing may be left that prune cannot clear.
rounds="${CRASH_CREATE_ROUNDS:-24}"
RANDOM=7
t0=$(date +%s%N)
sw_create --audit --name timing >/dev/null && sw rm timing >/dev/null
CREATE_MS=$((($(date +%s%N) - t0) / 1000000))
for ((i = 0; i < rounds; i++)); do
    ms=$((RANDOM % (CREATE_MS + 1)))
    if ((i % 2)); then
        timeout -s KILL "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))" "$SW" create --audit --name "rk$i" >/dev/null 2>&1
    else
        timeout -s KILL "$(printf '%d.%03d' $((ms / 1000)) $((ms % 1000)))" "$SW" create >/dev/null 2>&1
    fi
done
assert_truthful "after $rounds creates killed at random (create takes ${CREATE_MS} ms)"
assert_all_removable "after $rounds creates killed at random"

# --- random kills ----------------------------------------------------------------------------
rounds="${CRASH_RANDOM_ROUNDS:-6}"
RANDOM=42
for ((i = 0; i < rounds; i++)); do
    delay="0.$((RANDOM % 10))$((RANDOM % 10))"
    case $((i % 4)) in
        0) timeout -s KILL "$delay" "$SW" create --audit >/dev/null 2>&1 ;;
        1) X=$(sw_create) && timeout -s KILL "$delay" "$SW" rm "$X" >/dev/null 2>&1 ;;
        2) X=$(sw_create --audit) && timeout -s KILL "$delay" "$SW" terminate "$X" >/dev/null 2>&1 ;;
        3) X=$(sw_create) && timeout -s KILL "$delay" "$SW" snapshot create "$X" --kind memory >/dev/null 2>&1 ;;
    esac
    sleep 0.5
    assert_truthful "random kill $i (op $((i % 4)), after ${delay}s)"
done
assert_all_removable "after the random kills"
finish
