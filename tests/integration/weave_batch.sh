#!/usr/bin/env bash
# `sandweave batch run` through weave:// with a worker lost in the middle:
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
