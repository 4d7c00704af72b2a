#!/usr/bin/env bash
# Warm pools as a user sees them: `pool create --hidepid 2 --audit` applies the
# same options to every sandbox of the pool:
#   5. `pool create p --size 3 --hidepid 2 --audit` starts 3 sandboxes with those
#      options, each with its own audit writer; `pool ls --json` reports them;
#      `pool acquire` hands out a running one (marked acquired, with the audit
#      position at hand-out) and the pool refills; 16 parallel acquires on a
#      pool of 8 get 16 distinct running sandboxes.
#   6. `pool resize` shrinks (idle extras removed, acquired untouched) and grows;
#      `pool rm` leaves no runsc process, mount, directory or writer of its idle
#      members; acquired sandboxes stay the caller's.
#   7. faults: unknown pool, a template that cannot start, a killed refill.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup
T0=$SECONDS

jqe() { jq -e "$@" >/dev/null; }
pool_json() { "$SW" pool ls --json 2>/dev/null | jq -c --arg n "$1" '.[] | select(.name == $n)'; }
pool_field() { pool_json "$1" | jq -r "$2"; }
pool_names() { "$SW" pool ls --json 2>/dev/null | jq -r '.[].name' | sort | tr '\n' ' '; }
# Member ids of pool $1 whose pool state is $2 (idle / acquired), sorted.
members() {
    "$SW" ls --json 2>/dev/null |
        jq -r --arg n "$1" --arg s "$2" '.[] | select(.pool.name? == $n and .pool.state? == $s) | .id' | sort
}
writer_count() { pgrep -fc -- "__audit-writer .*--sandbox-id $1( |\$)" || true; }
warm_is() { [[ "$(pool_field "$1" .warm)" == "$2" ]]; }  # POOL N
# The first non-empty output of COMMAND..., looked for every 5 ms for 2 s.
first_output() {
    local out
    for _ in $(seq 400); do
        out="$("$@")"
        [[ -n "$out" ]] && printf '%s\n' "$out" && return 0
        sleep 0.005
    done
    return 1
}
# Asserts nothing of sandbox $2 is left on the host (label $1).
assert_gone() {
    local label="$1" id="$2"
    assert_true "$label: $id has no directory" test ! -e "$STATE/sandboxes/$id"
    wait_for 5 no_mounts_under "$STATE/sandboxes/$id"
    assert_eq "$label: $id has no mounts" "" "$(mounts_under "$STATE/sandboxes/$id")"
    wait_for 5 no_procs_matching "$id"
    assert_eq "$label: $id has no runsc or writer process" "" "$(procs_matching "$id")"
    assert_eq "$label: $id is not listed" "" "$(sw_state "$id")"
}

# --- 5. create, ls, acquire, refill ----------------------------------------------------

assert_exit "pool create p --size 3 --hidepid 2 --audit" 0 sw pool create p --size 3 --hidepid 2 --audit
[[ "$LAST_RC" == 0 ]] || finish
# stderr says "checking that RUNSC enforces hidepid (once per runtime)": the
# verdict is cached per runtime, so three members need at most one probe.
assert_true "pool create: hidepid support is probed at most once (cached verdict)" \
    test "$(grep -c 'enforces hidepid' <<<"$LAST_ERR")" -le 1
assert_no_match "pool create: no progress when stderr is not a terminal" 'warm|starting sandboxes' "$LAST_ERR"
assert_exit "pool create with --progress" 0 sw --progress pool create pp --size 1
assert_match "--progress: the members started, as plain lines" "creating pool pp: starting sandboxes +1 / 1 +100%" "$LAST_ERR"
assert_exit "... removed" 0 sw pool rm pp
assert_exit "pool create of an existing name: exit 2" 2 sw pool create p --size 1
assert_exit "pool create --name: exit 2 (members have no names)" 2 sw pool create p2 --size 1 --name x
assert_eq "... neither made a pool" "p" "$(pool_names | tr -d ' ')"
IDLE="$(members p idle)"
assert_eq "3 idle members" 3 "$(line_count "$IDLE")"
for id in $IDLE; do
    assert_eq "member $id is running" running "$(sw_state "$id")"
    assert_eq "member $id has exactly one audit writer naming it" 1 "$(writer_count "$id")"
    assert_eq "member $id settings hidepid 2 audit on" '2 true' \
        "$(sw inspect "$id" 2>/dev/null | jq -r '"\(.spec.runtime_options.hidepid) \(.spec.runtime_options.audit)"')"
done
FIRST="$(head -n 1 <<<"$IDLE")"
assert_match "a member's /proc is mounted hidepid=2" 'hidepid=2' "$(sw run "$FIRST" -- grep ' /proc proc ' /proc/mounts 2>&1)"
P="$(pool_json p)"
assert_eq "pool ls --json: size 3, warm 3, in_use 0" '3 3 0' "$(jq -r '"\(.size) \(.warm) \(.in_use)"' <<<"$P")"
assert_eq "pool ls --json: options hidepid 2, audit true" '2 true' "$(jq -r '"\(.options.hidepid) \(.options.audit)"' <<<"$P")"
capture sw pool ls
assert_match "plain pool ls shows name, size, warm, in use" '(^|'$'\n'')p +3 +3 +0 ' "$LAST_OUT"

assert_exit "pool acquire p" 0 sw pool acquire p
ACQ="$LAST_OUT"
assert_match "acquire prints one sandbox id" '^sw-[0-9a-f]+$' "$ACQ"
assert_true "the acquired sandbox was one of the warm members" grep -qx -- "$ACQ" <<<"$IDLE"
assert_eq "the acquired sandbox is running" running "$(sw_state "$ACQ")"
INS="$(sw inspect "$ACQ" 2>/dev/null)"
assert_eq "inspect: pool name p, state acquired" 'p acquired' "$(jq -r '"\(.pool.name) \(.pool.state)"' <<<"$INS")"
SEQ="$(jq -r '.pool.acquired_audit_seq // "missing"' <<<"$INS")"
assert_match "inspect: acquired_audit_seq is a positive integer" '^[1-9][0-9]*$' "$SEQ"
assert_eq "the acquired sandbox still has its writer" 1 "$(writer_count "$ACQ")"
# The per-sandbox helpers run from the small helper binary beside sandweave.
helper_exes() {
    for pid in $(pgrep -f -- "(__audit-writer|__shim) .*$1( |/|\$)"); do
        basename "$(readlink "/proc/$pid/exe")"
    done | sort | uniq -c | awk '{ print $1, $2 }' | tr '\n' ' '
}
assert_eq "its writer and its shim run from sandweave-helper" "2 sandweave-helper " "$(helper_exes "$ACQ")"

# acquired_audit_seq separates warm-up from the caller's episode.
MARK="episode-$RANDOM$RANDOM"
capture sw run "$ACQ" -c "/bin/ls /tmp/$MARK >/dev/null 2>&1; echo ok"
assert_eq "the acquired sandbox runs the caller's command" ok "$LAST_OUT"
sw audit export "$ACQ" "$SCRATCH/acq.jsonl" >/dev/null 2>&1
if [[ "$SEQ" =~ ^[0-9]+$ ]]; then
    assert_true "episode command is logged after acquired_audit_seq" \
        jqe -s --argjson s "$SEQ" --arg m "$MARK" 'any(.seq > $s and (tostring | contains($m)))' "$SCRATCH/acq.jsonl"
    assert_true "nothing at or before acquired_audit_seq is from the episode" \
        jqe -s --argjson s "$SEQ" --arg m "$MARK" 'all(.seq > $s or (tostring | contains($m) | not))' "$SCRATCH/acq.jsonl"
fi

wait_for 10 warm_is p 3
assert_eq "the pool refills to warm 3 in the background" 3 "$(pool_field p .warm)"

# The pool's index of its members (what an acquire reads first, instead of
# every sandbox's record on the host): the idle ones, not the handed-out one.
index_ids() { ls "$STATE/pools/$1/members" 2>/dev/null | sort; }
assert_eq "the pool's index names its idle members" "$(members p idle)" "$(index_ids p)"
assert_true "... and the acquired one no more" bash -c '! grep -qx -- "$1" <<<"$2"' _ "$ACQ" "$(index_ids p)"
# Only a hint: a stale entry is dropped where it is seen, and members missing
# from it are still found (and indexed again).
rm -f "$STATE/pools/p/members/"*
touch "$STATE/pools/p/members/sw-0123456789ab"
assert_exit "pool acquire p with only a stale entry in the index" 0 sw pool acquire p
ACQ2="$LAST_OUT"
assert_eq "... hands out a running member" running "$(sw_state "$ACQ2")"
assert_true "... the stale entry is gone" test ! -e "$STATE/pools/p/members/sw-0123456789ab"
index_whole() { [[ "$(members p idle)" == "$(index_ids p)" ]]; }
wait_for 10 index_whole
assert_eq "... and the refill indexes the idle members again" "$(members p idle)" "$(index_ids p)"
rm -rf "$STATE/pools/p/members"
for _ in 1 2; do
    assert_exit "pool acquire p without an index" 0 sw pool acquire p
    assert_eq "... hands out a running member" running "$(sw_state "$LAST_OUT")"
    ACQ_MORE+=" $LAST_OUT"
done
wait_for 10 warm_is p 3
wait_for 10 index_whole
assert_eq "the index is whole again once the pool refilled" "$(members p idle)" "$(index_ids p)"
for id in $ACQ2 $ACQ_MORE; do sw rm -f "$id" >/dev/null 2>&1; done
assert_eq "pool ls: in_use 1" 1 "$(pool_field p .in_use)"
assert_true "the acquired sandbox is no longer idle" bash -c '! grep -qx -- "$1" <<<"$2"' _ "$ACQ" "$(members p idle)"
assert_eq "new members get their own writers too" "$(members p idle | while read -r i; do writer_count "$i"; done | tr '\n' ' ')" "1 1 1 "

# An acquire that finds no warm member but one the refill is creating waits
# for that one instead of starting a create of its own beside it.
assert_exit "pool create w --size 1" 0 sw pool create w --size 1
assert_exit "pool acquire w: the warm member" 0 sw pool acquire w
W1="$LAST_OUT"
creating_member() {
    "$SW" ls --json 2>/dev/null | jq -r '.[] | select(.pool.name? == "w" and .state == "creating") | .id'
}
W_ON_WAY="$(first_output creating_member || true)"
assert_match "the refill is creating w's next member" '^sw-[0-9a-f]+$' "$W_ON_WAY"
assert_exit "pool acquire w while it does" 0 sw pool acquire w
assert_eq "that acquire hands out the member on its way, not a sandbox of its own" "$W_ON_WAY" "$LAST_OUT"
assert_eq "... which is running" running "$(sw_state "$W_ON_WAY")"
sw pool rm w >/dev/null 2>&1
for id in $W1 $W_ON_WAY; do sw rm "$id" >/dev/null 2>&1; done

# A member whose sandbox died while it waited is never handed out: its relay
# stops vouching for it (the flag acquire and ls read instead of asking), and
# the acquire marks it failed and gives the caller a running sandbox; the
# refill removes it.
assert_exit "pool create d --size 1 --audit" 0 sw pool create d --size 1 --audit
D_DEAD="$(members d idle)"
kill_runtime "$D_DEAD" "d's member has a sandbox process"
assert_eq "ls: the member whose sandbox was killed is failed" failed "$(sw_state "$D_DEAD")"
assert_exit "pool acquire d" 0 sw pool acquire d
D_GOT="$LAST_OUT"
assert_ne "the acquire did not hand out the dead member" "$D_DEAD" "$D_GOT"
assert_eq "... but a running sandbox" running "$(sw_state "$D_GOT")"
not_listed() { [[ -z "$(sw_state "$1")" ]]; }
wait_for 10 not_listed "$D_DEAD"
assert_eq "the refill removes the dead member" "" "$(sw_state "$D_DEAD")"
wait_for 10 warm_is d 1
assert_eq "... and brings d back to warm 1" 1 "$(pool_field d .warm)"
sw pool rm d >/dev/null 2>&1
for id in $D_DEAD $D_GOT; do sw rm -f "$id" >/dev/null 2>&1; done

# 16 parallel acquires on a pool of 8: 8 warm, the rest made on demand or
# taken from the refill as its creates finish, none twice.
assert_exit "pool create q --size 8" 0 sw pool create q --size 8
for i in $(seq 16); do
    "$SW" pool acquire q >"$SCRATCH/acq.$i" 2>"$SCRATCH/acq.$i.err" </dev/null &
done
wait
GOT="$(cat "$SCRATCH"/acq.{1..16} | sort)"
assert_eq "16 parallel acquires all succeed" "" "$(cat "$SCRATCH"/acq.*.err | grep -v '^sandweave: warning' || true)"
assert_eq "16 parallel acquires print 16 ids" 16 "$(grep -c '^sw-[0-9a-f]*$' <<<"$GOT")"
assert_eq "the 16 ids are distinct" 16 "$(sort -u <<<"$GOT" | grep -c .)"
LIVE="$("$SW" ls --json 2>/dev/null)"
assert_eq "all 16 are running and marked acquired from q" 16 \
    "$(jq -r '.[] | select(.state == "running" and .pool.name? == "q" and .pool.state? == "acquired") | .id' <<<"$LIVE" |
        grep -cxFf <(printf '%s\n' "$GOT"))"
ALL_Q="$(members q acquired)"
assert_eq "q has exactly those 16 acquired members" "$GOT" "$ALL_Q"
wait_for 15 warm_is q 8
assert_eq "q refills to warm 8" 8 "$(pool_field q .warm)"
assert_eq "no refill member is one of the 16 handed out" "" "$(comm -12 <(members q idle) <(printf '%s\n' "$GOT"))"
# Not needed any more; keep the machine quiet.
sw pool rm q >/dev/null 2>&1
for id in $GOT; do sw rm "$id" >/dev/null 2>&1; done

# --- 6. resize and rm ------------------------------------------------------------------

BEFORE="$(members p idle)"
assert_exit "pool resize p 1" 0 sw pool resize p 1
AFTER="$(members p idle)"
assert_eq "resize 1: warm 1" 1 "$(pool_field p .warm)"
assert_eq "resize 1: one idle member left" 1 "$(line_count "$AFTER")"
assert_eq "resize 1: size 1" 1 "$(pool_field p .size)"
assert_eq "resize 1: the acquired sandbox is untouched" running "$(sw_state "$ACQ")"
assert_eq "resize 1: in_use still 1" 1 "$(pool_field p .in_use)"
for id in $(comm -23 <(printf '%s\n' "$BEFORE") <(printf '%s\n' "$AFTER")); do assert_gone "resize 1" "$id"; done
sleep 1
assert_eq "resize 1: the pool stays at warm 1 (no refill beyond size)" 1 "$(pool_field p .warm)"

assert_exit "pool resize p 2" 0 sw pool resize p 2
wait_for 10 warm_is p 2
assert_eq "resize 2: refills to warm 2" 2 "$(pool_field p .warm)"

IDLE="$(members p idle)"
assert_exit "pool rm p" 0 sw pool rm p
assert_eq "pool rm: p is gone from pool ls" "" "$(pool_json p)"
assert_true "pool rm: its state directory is gone" test ! -e "$STATE/pools/p"
for id in $IDLE; do assert_gone "pool rm" "$id"; done
assert_eq "pool rm: the acquired sandbox still exists and runs" running "$(sw_state "$ACQ")"
assert_eq "pool rm: the acquired sandbox still works" ok "$(sw run "$ACQ" -- echo ok 2>&1)"
assert_eq "pool rm: the acquired sandbox keeps its writer" 1 "$(writer_count "$ACQ")"
assert_exit "pool rm again: exit 4" 4 sw pool rm p
assert_exit "rm of the acquired sandbox" 0 sw rm "$ACQ"
assert_gone "acquired after rm" "$ACQ"

# A pool started from a filesystem snapshot: members carry its files and settings.
SRC="$("$SW" create --hidepid 2 2>/dev/null </dev/null)"
"$SW" run "$SRC" -c 'printf from-snapshot > /root/s' >/dev/null 2>&1
SNAP="$("$SW" snapshot create "$SRC" --kind fs 2>/dev/null </dev/null)"
assert_match "a source snapshot for a pool" '^snap-[0-9a-f]+$' "$SNAP"
assert_exit "pool create --from-snapshot with --template: exit 2" 2 sw pool create ps --size 1 --from-snapshot "$SNAP" --template base
assert_exit "pool create ps --size 2 --from-snapshot" 0 sw pool create ps --size 2 --from-snapshot "$SNAP"
assert_exit "pool acquire ps" 0 sw pool acquire ps
PS1ID="$LAST_OUT"
assert_eq "a snapshot pool member has the snapshot's file" from-snapshot "$(sw run "$PS1ID" -- cat /root/s 2>&1)"
assert_match "a snapshot pool member keeps the snapshot's hidepid=2" 'hidepid=2' "$(sw run "$PS1ID" -- grep ' /proc proc ' /proc/mounts 2>&1)"
wait_for 10 warm_is ps 2
assert_eq "the snapshot pool refills to warm 2" 2 "$(pool_field ps .warm)"
assert_eq "... without an error" "null" "$(pool_field ps .last_error)"
sw pool rm ps >/dev/null 2>&1
sw rm "$PS1ID" "$SRC" >/dev/null 2>&1
sw snapshot rm "$SNAP" >/dev/null 2>&1

# --- 7. faults -------------------------------------------------------------------------

assert_exit "acquire from an unknown pool: exit 4" 4 sw pool acquire nosuchpool
assert_match "... names the pool" 'nosuchpool' "$LAST_ERR"

N_BEFORE="$(sw_count)"
capture sw pool create bad --size 2 --template '{"extends": "base", "image": "nosuchimage"}'
assert_ne "pool create with an image that does not exist fails" 0 "$LAST_RC"
assert_match "... and says why" 'nosuchimage' "$LAST_ERR"
assert_eq "... one line on stderr" 1 "$(line_count "$(grep -v '^sandweave: warning' <<<"$LAST_ERR")")"
assert_eq "... pool ls has no pool 'bad'" "" "$(pool_json bad)"
assert_true "... no pool directory is left" test ! -e "$STATE/pools/bad"
assert_eq "... no sandbox is left" "$N_BEFORE" "$(sw_count)"
assert_exit "... acquire from it: exit 4" 4 sw pool acquire bad

# A refill that fails records the pool's last_error; one that works again clears it.
assert_exit "pool create f --size 1" 0 sw pool create f --size 1
# The refill this acquire starts inherits a runtime that cannot start.
capture env SANDWEAVE_RUNSC=/bin/false "$SW" pool acquire f
assert_eq "acquire f hands out the warm member" 0 "$LAST_RC"
F1="$LAST_OUT"
error_set() { [[ "$(pool_field f .last_error)" != "null" ]]; }
assert_true "a failing refill records last_error" wait_for 20 error_set
assert_exit "a later acquire from f works (a member made on demand)" 0 sw pool acquire f
F2="$LAST_OUT"
error_gone() { [[ "$(pool_field f .last_error)" == "null" ]]; }
assert_true "a refill that works again clears last_error" wait_for 30 error_gone
wait_for 20 warm_is f 1
assert_exit "pool rm f" 0 sw pool rm f
for id in $F1 $F2; do sw rm "$id" >/dev/null 2>&1; done

# A refill killed with SIGKILL while it creates a member.
assert_exit "pool create r --size 2" 0 sw pool create r --size 2
KNOWN="$(find "$STATE/sandboxes" -mindepth 1 -maxdepth 1 -name 'sw-*' -printf '%f\n' | sort)"
assert_exit "pool acquire r" 0 sw pool acquire r
R1="$LAST_OUT"
refill_pid() { pgrep -f -- "__pool-refill --state-dir $STATE r( |\$)"; }
new_dir() { [[ -n "$(comm -13 <(printf '%s\n' "$KNOWN") <(find "$STATE/sandboxes" -mindepth 1 -maxdepth 1 -name 'sw-*' -printf '%f\n' | sort))" ]]; }
RPID="$(first_output refill_pid || true)"
if [[ -n "$RPID" ]]; then
    wait_for 5 new_dir  # the refill has started creating a member
    kill -9 $RPID 2>/dev/null
    pass "a refill was killed with SIGKILL (pid $RPID)"
else
    fail "the refill process of r was not seen after acquire"
fi
sleep 0.5
assert_exit "a later acquire from r works" 0 sw pool acquire r
R2="$LAST_OUT"
assert_ne "... and hands out another sandbox" "$R1" "$R2"
assert_eq "... which is running" running "$(sw_state "$R2")"
wait_for 10 warm_is r 2
assert_eq "after the killed refill, a later refill brings r back to warm 2" 2 "$(pool_field r .warm)"
assert_eq "... with nothing stuck starting" 0 "$(pool_field r .starting)"
assert_eq "... and no failed member lingering" "" \
    "$("$SW" ls --json 2>/dev/null | jq -r '.[] | select(.pool.name? == "r" and .state != "running") | "\(.id) \(.state)"')"
NONACQ="$("$SW" ls --json 2>/dev/null | jq -r '.[] | select(.pool.name? == "r" and .pool.state? != "acquired") | .id')"
assert_exit "pool rm r" 0 sw pool rm r
for id in $NONACQ; do assert_gone "pool rm after a killed refill" "$id"; done
for id in $R1 $R2; do assert_exit "acquired $id survives pool rm and is removable" 0 sw rm "$id"; done
assert_no_leftovers "end"

printf '(%d s)\n' "$((SECONDS - T0))"
finish
