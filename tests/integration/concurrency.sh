#!/usr/bin/env bash
# Many sandweave processes on one state directory at once: 8 parallel loops of
# create/run/rm (the first creates also race to build the image), concurrent ls,
# and a race for one name. Everything succeeds and nothing is left behind.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

LOOPS=8
ROUNDS=3

worker() {  # N: create/run/rm ROUNDS times; one line per failure in $SCRATCH/fail.N
    local n="$1" r id out
    for ((r = 0; r < ROUNDS; r++)); do
        if ! id="$("$SW" create --template base 2>>"$SCRATCH/err.$n")"; then
            echo "loop $n round $r: create failed" >>"$SCRATCH/fail.$n"
            continue
        fi
        out="$("$SW" run "$id" -c "echo $n-$r" 2>>"$SCRATCH/err.$n")"
        [[ "$out" == "$n-$r" ]] || echo "loop $n round $r: run printed '$out'" >>"$SCRATCH/fail.$n"
        "$SW" rm "$id" >/dev/null 2>>"$SCRATCH/err.$n" || echo "loop $n round $r: rm failed" >>"$SCRATCH/fail.$n"
    done
}

lister() {  # ls keeps working (and parsing) while the others change the state dir
    while [[ ! -e "$SCRATCH/done" ]]; do
        "$SW" ls --json 2>>"$SCRATCH/err.ls" | jq -e 'type == "array"' >/dev/null \
            || echo "ls --json failed" >>"$SCRATCH/fail.ls"
        sleep 0.2
    done
}

t0=$SECONDS
lister &
lister_pid=$!
pids=()
for ((n = 0; n < LOOPS; n++)); do
    worker "$n" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
touch "$SCRATCH/done"
wait "$lister_pid"

failures="$(cat "$SCRATCH"/fail.* 2>/dev/null)"
assert_eq "$LOOPS parallel loops x $ROUNDS create/run/rm all succeed ($((SECONDS - t0))s)" "" "$failures"
[[ -n "$failures" ]] && cat "$SCRATCH"/err.* 2>/dev/null | sort | uniq -c | head -20
assert_eq "the image was built once" 1 "$(find "$STATE/images" -mindepth 1 -maxdepth 1 -not -name '.*' | wc -l | tr -d ' ')"
assert_eq "no half-built image left" "" "$(find "$STATE/images" -mindepth 1 -maxdepth 1 -name '.build-*')"
assert_no_leftovers "after $LOOPS parallel loops"

# Eight creates race for one name: exactly one gets it, the others get exit 2.
rm -f "$SCRATCH"/name.*
for ((n = 0; n < 8; n++)); do
    ( "$SW" create --template base --name contested >/dev/null 2>&1; echo $? >"$SCRATCH/name.$n" ) &
done
wait
codes="$(cat "$SCRATCH"/name.* | sort | uniq -c | awk '{ print $2 "x" $1 }' | paste -sd ' ')"
assert_eq "a contested name: one create wins, seven get exit 2" "0x1 2x7" "$codes"
assert_eq "exactly one sandbox holds the name" 1 "$(sw ls --json | jq '[.[] | select(.name == "contested")] | length')"
assert_eq "no other sandbox was left by the losers" 1 "$(sw_count)"
sw rm contested >/dev/null 2>&1

# Concurrent rm of the same sandbox: one succeeds, none leaves a mess.
ID="$(sw_create --template base)"
for ((n = 0; n < 4; n++)); do
    ( "$SW" rm "$ID" >/dev/null 2>&1; echo $? >"$SCRATCH/rm.$n" ) &
done
wait
assert_eq "concurrent rm of one sandbox: exactly one succeeds" 1 "$(grep -lx 0 "$SCRATCH"/rm.* | wc -l | tr -d ' ')"
assert_eq "concurrent rm: the others say no such sandbox (exit 4)" 3 "$(grep -lx 4 "$SCRATCH"/rm.* | wc -l | tr -d ' ')"
assert_no_leftovers "after concurrent rm"
finish
