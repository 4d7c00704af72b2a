#!/usr/bin/env bash
# `sandweave batch run` through weave://. Its episodes' sandboxes live in
# the slots of one Slurm job array: 15 at once on 12 sandbox slots run 12
# and Slurm queues the rest; SIGINT ends the runner and every slot, pending
# or running; a rerun after SIGKILL ends what the killed run left. Then a
# worker lost in the middle:
# the one-machine cluster runs a batch at concurrency 6; one worker's slurmd
# and its sandweave processes are killed while episodes run on it; Slurm declares it failed, its episodes'
# tries fail as infrastructure failures and are retried on the live workers,
# and the batch ends with every episode done once, each audit complete and
# verified, and nothing of the batch left running.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_cmd python3
weave_setup c 7663 17660  # short: a worker's audit socket path must stay under 100 bytes
note() { printf "[%3d s] $1\n" $((SECONDS - _t0)) "${@:2}"; }

capture ctl start --slurmd-timeout 6 --message-timeout 2
slurm_started_or_skip "the cluster and its controller start"
eval "$LAST_OUT"

# Slurm's view: the tasks of job arrays (ids ARRAY_TASK), running or pending.
array_tasks() { squeue -h -r -t "$1" -o '%i' | grep -c _ || true; }
arrays() { squeue -h -r -o '%F %i' | awk '$2 ~ /_/ {print $1}' | sort -u | wc -l | tr -d ' '; }
no_jobs() { [[ -z "$(squeue -h -o %i)" ]]; }
# How many episode folders OUT/<P><n> hold exactly the line WORD-<n> as stdout.
own_outputs() {  # OUT P WORD
    local d n=0
    for d in "$1/$2"*/; do
        [[ "$(cat "$d/stdout")" == "$3-$(basename "$d" | tr -d "$2")" ]] && n=$((n + 1))
    done
    echo "$n"
}
running_is() { [[ "$(array_tasks RUNNING)" == "$1" ]]; }
# Every node idle: a job gone from squeue may still hold its node while its
# epilog runs (COMPLETING), and Slurm starts nothing there meanwhile.
nodes_idle() { ! sinfo -h -N -o '%T' | grep -qv '^idle$'; }

# --- the episodes as one Slurm job array ------------------------------------------
# 15 episodes at concurrency 15 on 12 slots (3 workers, 4 each): the runner
# reserves a job array of 15 slots, 15 at once; Slurm runs 12 and queues 3.
ASPEC="$SCRATCH/array.jsonl"
AOUT="$SCRATCH/array-out"
for i in $(seq -w 1 15); do
    printf '{"id": "a%s", "hidepid": 2, "user": "1001:1001", "script": "sleep 5; echo array-%s"}\n' "$i" "$i"
done >"$ASPEC"
"$SW" batch run "$ASPEC" --out "$AOUT" --concurrency 15 --json >"$SCRATCH/array.out" 2>"$SCRATCH/array.err" &
BATCH=$!
wait_for 60 running_is 12 || true
assert_eq "the batch's slots are one Slurm job array" 1 "$(arrays)"
assert_eq "Slurm runs 12 of its slots at once (every sandbox slot there is)" 12 "$(array_tasks RUNNING)"
assert_ne "... and queues the rest" 0 "$(array_tasks PENDING)"
wait "$BATCH"
assert_eq "the array batch exits 0" 0 "$?"
assert_eq "summary: 15 done, no infrastructure failure" "15 15 0" \
    "$(jq -r '"\(.total) \(.done) \(.infrastructure)"' "$SCRATCH/array.out")"
assert_eq "every episode's output is its own" 15 "$(own_outputs "$AOUT" a array)"
assert_eq "their sandboxes ran on all three workers" "w1 w2 w3" \
    "$(jq -r .worker "$AOUT"/a*/result.json | sort -u | tr '\n' ' ' | sed 's/ $//')"
assert_true "no job of the array is left" wait_for 15 no_jobs

# SIGINT while slots are still queued, two creates waiting for theirs (14
# at once on 12 slots): the runner ends at once, and so does every slot of
# its array, pending or running; the episodes it broke off count as not
# run, not as infrastructure failures.
for i in $(seq -w 1 30); do printf '{"id": "i%s", "script": "sleep 60"}\n' "$i"; done >"$SCRATCH/int.jsonl"
wait_for 60 nodes_idle || true  # the slots of the batch before, freed on every node
"$SW" batch run "$SCRATCH/int.jsonl" --out "$SCRATCH/int-out" --concurrency 14 --json \
    >"$SCRATCH/int.out" 2>"$SCRATCH/int.err" &
BATCH=$!
wait_for 60 running_is 12 || true
assert_eq "12 slots run" 12 "$(array_tasks RUNNING)"
assert_ne "... the rest is queued" 0 "$(array_tasks PENDING)"
t0=$SECONDS
kill -INT "$BATCH"
wait "$BATCH"
assert_eq "SIGINT: the runner exits 130" 130 "$?"
assert_true "... within 10 s" test $((SECONDS - t0)) -le 10
assert_eq "... counting the 30 episodes not run, none as an infrastructure failure" "30 0" \
    "$(jq -r '"\(.not_run) \(.infrastructure)"' "$SCRATCH/int.out")"
assert_true "... leaving no job of its array" wait_for 15 no_jobs
assert_eq "... and no sandbox" 0 "$("$SW" ls --json | jq length)"

# SIGKILL of the runner, then the same command again: the rerun ends the
# killed run's array and sandboxes, skips what finished, and runs the rest
# once.
KSPEC="$SCRATCH/kill.jsonl"
KOUT="$SCRATCH/kill-out"
for i in $(seq -w 1 12); do printf '{"id": "k%s", "script": "sleep 2; echo kill-%s"}\n' "$i" "$i"; done >"$KSPEC"
"$SW" batch run "$KSPEC" --out "$KOUT" --concurrency 4 --json >/dev/null 2>&1 &
BATCH=$!
finished_some() { (($(finished_episodes "$KOUT") >= 4)); }
wait_for 90 finished_some || true
kill -KILL "$BATCH"
wait "$BATCH" 2>/dev/null
before="$(finished_episodes "$KOUT")"
assert_ne "the killed run left its array behind" 0 "$(squeue -h -o %i | wc -l | tr -d ' ')"
"$SW" batch run "$KSPEC" --out "$KOUT" --concurrency 4 --json >"$SCRATCH/kill.out" 2>"$SCRATCH/kill.err"
assert_eq "the rerun exits 0" 0 "$?"
assert_eq "... skipping the $before that finished, running the rest" "12 12 $before" \
    "$(jq -r '"\(.total) \(.done) \(.skipped)"' "$SCRATCH/kill.out")"
assert_eq "every episode's output is its own" 12 "$(own_outputs "$KOUT" k kill)"
assert_true "... and no job of either run is left" wait_for 15 no_jobs
assert_eq "... nor a sandbox" 0 "$("$SW" ls --json | jq length)"

SPEC="$SCRATCH/spec.jsonl"
OUT="$SCRATCH/out"
for i in $(seq -w 1 12); do
    printf '{"id": "e%s", "hidepid": 2, "user": "1001:1001", "script": "sleep 6; echo done-%s"}\n' "$i" "$i"
done >"$SPEC"

note "batch starts"
"$SW" batch run "$SPEC" --out "$OUT" --concurrency 6 --retries 8 --json \
    >"$SCRATCH/batch.out" 2>"$SCRATCH/batch.err" &
BATCH=$!
on_worker_w() {  # the worker of a running episode sandbox, if any
    "$SW" ls --json 2>/dev/null |
        jq -r '[.[] | select(.state == "running" and (.spec.labels["sandweave.episode"] // "") != "") | .worker] | .[0] // empty'
}
assert_true "episodes run on the workers" wait_for 60 bash -c '[[ -n "$("$0" ls --json 2>/dev/null | jq -r ".[] | select(.state == \"running\") | .id" | head -1)" ]]' "$SW"
W="$(on_worker_w)"
assert_match "an episode runs on a worker" '^w[123]$' "$W"
on_w=$("$SW" ls --json | jq --arg w "$W" '[.[] | select(.worker == $w and .state == "running")] | length')
note "worker $W dies ($on_w episode sandboxes there)"
# As a machine that dies: its slurmd, and every sandweave and runsc process
# working in its state directory (serve, shims, writers, sandboxes).
kill -KILL "$(cat "$DIR/run/slurmd-$W.pid")"
pkill -KILL -f -- "$DIR/workers/$W/state" || true

finished() { ! kill -0 "$BATCH" 2>/dev/null; }
assert_true "the batch finishes" wait_for 240 finished
wait "$BATCH"
rc=$?
note "batch ended: exit $rc"
assert_eq "it exits 0: every episode done after its retries" 0 "$rc"
summary="$(cat "$SCRATCH/batch.out")"
assert_eq "summary: 12 done, none failed, no infrastructure failure left" "12 12 0 0" \
    "$(jq -r '"\(.total) \(.done) \(.failed) \(.infrastructure)"' <<<"$summary")"
assert_eq "summary: every audit complete" 12 "$(jq .audit.complete <<<"$summary")"
retried=0 on_lost=0 twice=0
for d in "$OUT"/e*/; do
    n="$(jq '.tries | length' "$d/result.json")"
    ((n > 1)) && retried=$((retried + 1))
    [[ "$(jq -r .worker "$d/result.json")" == "$W" ]] && on_lost=$((on_lost + 1))
    [[ "$(cat "$d/stdout")" == "done-$(basename "$d" | tr -d e)" ]] || twice=$((twice + 1))
done
assert_ne "episodes on the lost worker were retried (tries recorded)" 0 "$retried"
assert_eq "... and none finished on the lost worker" 0 "$on_lost"
assert_eq "every episode's folder has its own output" 0 "$twice"
assert_match "the lost try is recorded as an infrastructure failure naming the worker" "$W" \
    "$(jq -r '.tries[] | select(.error) | .error' "$OUT"/e*/result.json | head -5)"
assert_eq "12 folders, no temp folder left" 12 "$(find "$OUT" -mindepth 1 -maxdepth 1 -type d | wc -l | tr -d ' ')"
left="$("$SW" ls --json | jq '[.[] | select(.state != "lost" and (.spec.labels["sandweave.episode"] // "") != "")] | length')"
assert_eq "no episode sandbox is left on the live workers" 0 "$left"
finish
