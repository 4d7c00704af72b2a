#!/usr/bin/env bash
# Pools, snapshots, templates and images through weave://, on the one-machine
# cluster and a controller of its own (ports of its own, so it runs beside
# the other Weave tests). A pool of six lands on more than one worker, each
# member a Slurm job; acquire hands out a warm member at once (one of the six,
# on a named worker) and the pool refills; the acquired sandbox runs as 1001
# with hidepid 2; a restarted controller has the pool again (size and
# members); pool rm ends every idle member's job. A snapshot taken on one
# worker restores on another (its own slots filled, so Slurm places the
# restore elsewhere) with the file written before it (and, from a memory
# snapshot, the process started before it); an audited sandbox's
# memory snapshot is refused. template ls and image ls match each worker's
# local answer; a template file on the client works with create. stop leaves
# nothing running.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
weave_setup c 7743 17600  # short: a worker's audit socket path must stay under 100 bytes
note() { printf "[%3d s] $1\n" $((SECONDS - _t0)) "${@:2}"; }
on_worker() { local w="$1"; shift; env -u SANDWEAVE_HOST "$SW" --state-dir "$DIR/workers/$w/state" "$@"; }

note "start"
capture ctl start
slurm_started_or_skip "start exits 0"
eval "$LAST_OUT"
restart_controller() {
    weave_controller_kill
    capture ctl start
    assert_eq "the controller starts again" 0 "$LAST_RC"
}
pool_field() { "$SW" pool ls --json | jq -r --arg p "$1" ".[] | select(.name == \$p) | .$2"; }
members() { "$SW" ls --json --filter pool="$1" | jq -r '.[] | "\(.id) \(.pool.state) \(.worker)"' | sort; }
pool_jobs() { squeue -h -t RUNNING,PENDING -o '%j %k' | grep -c "\"pool\":\"$1\"" || true; }

# --- a pool of six, spread by Slurm -------------------------------------------------
note "pool create"
capture "$SW" pool create p --size 6 --template base --hidepid 2
assert_eq "pool create through weave:// exits 0" 0 "$LAST_RC"
assert_eq "... and prints the pool's name, as locally" "p" "$LAST_OUT"
assert_eq "pool ls: size 6, 6 warm, none in use" "6 6 0" \
    "$(pool_field p size) $(pool_field p warm) $(pool_field p in_use)"
assert_eq "pool ls shows the options as locally" 2 "$("$SW" pool ls --json | jq '.[0].options.hidepid')"
before="$(members p)"
assert_eq "six idle members" 6 "$(grep -c ' idle w[123]$' <<<"$before")"
assert_true "the members are on more than one worker" \
    test "$(awk '{print $3}' <<<"$before" | sort -u | wc -l)" -gt 1
assert_eq "each member is a Slurm job of its own, marked with the pool" 6 "$(pool_jobs p)"

note "acquire"
t0=$(date +%s%N)
capture "$SW" pool acquire --json p
ms=$((($(date +%s%N) - t0) / 1000000))
assert_eq "pool acquire exits 0" 0 "$LAST_RC"
AID="$(jq -r .id <<<"$LAST_OUT")"
assert_true "it was one of the six warm members (no new sandbox)" grep -q "^$AID idle w[123]$" <<<"$before"
assert_eq "it is running, acquired, on a named worker" "running acquired $(grep "^$AID " <<<"$before" | awk '{print $3}')" \
    "$(jq -r '"\(.state) \(.pool.state) \(.worker)"' <<<"$LAST_OUT")"
assert_true "acquire took under a second, a whole CLI call (${ms} ms)" test "$ms" -lt 1000
refilled() { [[ "$(pool_field p warm) $(pool_field p in_use)" == "6 1" ]]; }
assert_true "the pool refills to six warm beside the one in use" wait_for 60 refilled
assert_eq "... each a job of its own" 7 "$(pool_jobs p)"
capture "$SW" run --user 1001:1001 "$AID" -- sh -c 'id; ls /proc'
assert_match "the acquired sandbox runs a command as 1001" '^uid=1001 gid=1001' "$LAST_OUT"
assert_no_match "... and hidepid 2 hides pid 1 from it" $'(^|\n)1(\n|$)' "$LAST_OUT"

note "controller restart"
before="$(members p)"
restart_controller
assert_eq "after a restart pool ls has the pool: size 6, 6 warm, 1 in use" "6 6 1" \
    "$(pool_field p size) $(pool_field p warm) $(pool_field p in_use)"
assert_eq "... with the same members on the same workers" "$before" "$(members p)"
capture "$SW" pool acquire p
assert_eq "acquire works after the restart" 0 "$LAST_RC"
B="$LAST_OUT"
assert_true "... handing out a member from before it" grep -q "^$B idle " <<<"$before"

note "members whose connection died"
dead="$(members p | awk '$2 == "idle" { print $1 }')"
for id in $dead; do
    job="$(squeue -h -o '%i %j' | awk -v id="$id" '$2 == id { print $1 }')"
    # srun and the child it forks both hold the connection.
    pids="$(pgrep -f -- "^([^ ]*/)?srun --jobid=$job --overlap ")" || fail "no srun for $id (job $job)"
    kill -KILL $pids
done
capture "$SW" pool acquire p
assert_eq "acquire still hands out a sandbox when every warm member's connection died" 0 "$LAST_RC"
C="$LAST_OUT"
capture "$SW" run "$C" -- echo handed-out
assert_eq "... which runs commands" handed-out "$LAST_OUT"
# A member's sandbox and job outlive its connection: each is either
# reconnected (Slurm still runs its job) or removed with its job.
settled() {
    local id job
    for id in $dead; do
        job="$(squeue -h -t RUNNING -o '%i %j' | awk -v id="$id" '$2 == id { print $1 }')"
        if [[ -n "$job" ]]; then
            "$SW" run "$id" -- true >/dev/null 2>&1 || return 1
        elif [[ -n "$(for w in w1 w2 w3; do on_worker "$w" ls -q; done | grep -xF -- "$id")" ]]; then
            return 1
        fi
    done
}
assert_true "every member whose connection died is reachable again or gone with its job" wait_for 20 settled
six_warm() { [[ "$(pool_field p warm)" == 6 ]]; }
assert_true "the pool refills to six warm" wait_for 60 six_warm
"$SW" rm -f "$C" >/dev/null || fail "rm -f $C"

note "acquire from an empty pool"
capture "$SW" pool create e --size 0 --template base
assert_eq "a pool of size 0 is made" "e 0 0" "$LAST_OUT $(pool_field e size) $(pool_field e warm)"
capture "$SW" pool acquire --json e
assert_eq "acquire from it creates one, as locally" "0 running acquired e" \
    "$LAST_RC $(jq -r '"\(.state) \(.pool.state) \(.pool.name)"' <<<"$LAST_OUT")"
E="$(jq -r .id <<<"$LAST_OUT")"
assert_eq "pool ls counts it in use" "0 1" "$(pool_field e warm) $(pool_field e in_use)"
"$SW" rm -f "$E" >/dev/null || fail "rm -f $E"
assert_exit "pool rm e exits 0" 0 "$SW" pool rm e

note "rm while Slurm keeps a refill pending"
capture "$SW" pool create f --size 1 --template base
used=$(squeue -h -t RUNNING -o %j | wc -l)
FILLERS=()
slurm_fill $((12 - used)) full
((${#FILLERS[@]} == 12 - used)) || fail "$((12 - used)) fillers: Slurm granted ${#FILLERS[@]}"
F="$("$SW" pool acquire f)"
# marked with the controller's id, its owner (the admin token's user: the controller's own,
# sandweave-weave) and the pool
refill_pending() { squeue -h -t PENDING -o %k | grep -qx 'sandweave/[a-z0-9]*::sandweave-weave/f'; }
assert_true "with every slot taken, the refill's job is pending, marked with the pool" wait_for 10 refill_pending
t0=$SECONDS
assert_exit "pool rm exits 0" 0 "$SW" pool rm f
assert_true "... at once ($((SECONDS - t0)) s), not waiting for Slurm" test $((SECONDS - t0)) -lt 5
assert_eq "... and the pending job is gone" "" "$(squeue -h -t PENDING -o %k | grep -x 'sandweave/[a-z0-9]*::f' || true)"
scancel "${FILLERS[@]}"
"$SW" rm -f "$F" >/dev/null || fail "rm -f $F"

note "resize and rm"
capture "$SW" pool resize p 2
assert_eq "pool resize exits 0" 0 "$LAST_RC"
two() { [[ "$(pool_field p warm) $(pool_field p size)" == "2 2" ]]; }
assert_true "resize 2 leaves two warm" wait_for 30 two
assert_eq "... and ends the other idle members' jobs" 4 "$(pool_jobs p)"
"$SW" rm -f "$B" >/dev/null || fail "rm -f $B"
capture "$SW" pool rm p
assert_eq "pool rm exits 0" 0 "$LAST_RC"
assert_eq "pool ls no longer has it" "" "$("$SW" pool ls --json | jq -r '.[].name')"
assert_eq "pool rm ends every idle member's job (the handed-out one is its caller's)" \
    "$AID" "$(squeue -h -t RUNNING,PENDING -o %j | grep '^sw-' || true)"
"$SW" rm -f "$AID" >/dev/null || fail "rm -f $AID"
assert_eq "no job is left" "" "$(squeue -h -t RUNNING,PENDING -o %j)"
restart_controller
assert_eq "a restarted controller does not bring the removed pool back" "" "$("$SW" pool ls --json | jq -r '.[].name')"
capture "$SW" pool acquire q
assert_ne "acquire from a pool that does not exist fails" 0 "$LAST_RC"
assert_match "... with one line, as locally" '^sandweave: no such pool: q$' "$LAST_ERR"

# --- a snapshot taken on one worker restores on another -----------------------------------
note "snapshots"
S1="$("$SW" create --template base)"
W1="$("$SW" inspect --json "$S1" | jq -r .worker)"
"$SW" run "$S1" -- sh -c 'echo before-the-snapshot >/root/mark; (sleep 1000 &); true' || fail "write /root/mark"
capture "$SW" snapshot create "$S1" --kind fs
assert_eq "snapshot create through weave:// exits 0" 0 "$LAST_RC"
SNAP="$LAST_OUT"
assert_match "... and prints its id" '^snap-[0-9a-f]+$' "$SNAP"
assert_eq "snapshot ls lists it" "$SNAP" "$("$SW" snapshot ls --json | jq -r '.[].id')"
# Every other slot of the source's worker taken: Slurm places the restore elsewhere.
slots=$(($(squeue -h -w "$W1" -t RUNNING -o %j | wc -l)))
FILLERS=()
slurm_fill $((4 - slots)) fill "$W1"
((${#FILLERS[@]} == 4 - slots)) || fail "$((4 - slots)) fillers on $W1: Slurm granted ${#FILLERS[@]}"
capture "$SW" create --from-snapshot "$SNAP"
assert_eq "create --from-snapshot exits 0" 0 "$LAST_RC"
R="$LAST_OUT"
W2="$("$SW" inspect --json "$R" | jq -r .worker)"
assert_match "Slurm put the restore on another worker ($W1 -> $W2)" '^w[123]$' "$W2"
assert_ne "... not the source's" "$W1" "$W2"
capture "$SW" run "$R" -- cat /root/mark
assert_eq "the file written before the snapshot is there" "before-the-snapshot" "$LAST_OUT"
capture "$SW" snapshot create "$S1" --kind memory
assert_eq "a memory snapshot through weave:// exits 0" 0 "$LAST_RC"
MSNAP="$LAST_OUT"
capture "$SW" create --from-snapshot "$MSNAP"
assert_eq "... and restores" 0 "$LAST_RC"
M="$LAST_OUT"
assert_ne "... on another worker too" "$W1" "$("$SW" inspect --json "$M" | jq -r .worker)"
capture "$SW" run "$M" -- sh -c 'cat /root/mark; ps -o args | grep -c "^sleep 1000"'
assert_eq "... with the file and the process from before" $'before-the-snapshot\n1' "$LAST_OUT"
scancel "${FILLERS[@]}"
A="$("$SW" create --template base --audit)"
capture "$SW" snapshot create "$A" --kind memory
assert_ne "a memory snapshot of an audited sandbox is refused" 0 "$LAST_RC"
assert_match "... with the worker's one line" 'has audit on, which rejects memory snapshots' "$LAST_ERR"
for id in "$S1" "$R" "$M" "$A"; do "$SW" rm -f "$id" >/dev/null || fail "rm -f $id"; done
capture "$SW" snapshot rm "$SNAP" "$MSNAP"
assert_eq "snapshot rm exits 0" 0 "$LAST_RC"
assert_eq "snapshot ls no longer lists it" "" "$("$SW" snapshot ls --json | jq -r '.[].id')"

# --- templates and images: every worker's answer --------------------------------------
note "templates and images"
sed 's/^description: .*/description: only on w1/' "$SANDWEAVE_SOURCE_DIR/templates/base.yaml" \
    >"$DIR/workers/w1/state/templates/only-w1.yaml"
capture "$SW" template ls --json
assert_eq "template ls through weave:// exits 0" 0 "$LAST_RC"
assert_eq "it lists what the workers list locally" \
    "$(on_worker w1 template ls --json | jq -c '[.[].name]')" "$(jq -c '[.[].name]' <<<"$LAST_OUT")"
assert_eq "a template only w1 has is flagged as missing on the others" '["w2","w3"]' \
    "$(jq -c '.[] | select(.name == "only-w1") | .missing_on' <<<"$LAST_OUT")"
assert_eq "... and no other one" 1 "$(jq '[.[] | select(.missing_on)] | length' <<<"$LAST_OUT")"
capture "$SW" template ls
assert_match "the table says so" $'(^|\n)only-w1 +user +only on w1  \\(missing on w2, w3\\)(\n|$)' "$LAST_OUT"
capture "$SW" image ls --json
assert_eq "image ls through weave:// exits 0" 0 "$LAST_RC"
weave_images="$LAST_OUT"
for w in w1 w2 w3; do
    here="$(on_worker "$w" image ls --json | jq -c '[.[].name] | sort')"
    there="$(jq -c --arg w "$w" '[.[] | select((.missing_on // []) | index($w) | not) | .name] | sort' <<<"$weave_images")"
    assert_eq "image ls through weave:// says what $w has, as $w says locally" "$here" "$there"
done
mkdir -p "$SCRATCH/client"
printf 'extends: base\nenv:\n  FROM_CLIENT: "yes"\n' >"$SCRATCH/client/mine.yaml"
capture "$SW" create --template "$SCRATCH/client/mine.yaml"
assert_eq "create --template FILE with a file only the client has exits 0" 0 "$LAST_RC"
T="$LAST_OUT"
assert_eq "... the client resolved it and sent it, named after the file" "client:$SCRATCH/client/mine.yaml" \
    "$("$SW" inspect --json "$T" | jq -r .spec.template)"
assert_eq "... and its settings apply" "yes" "$("$SW" run "$T" -- sh -c 'echo $FROM_CLIENT')"
# Desktop calls reach the sandbox's worker (base has no desktop: its answer).
for verb in "screenshot $T $SCRATCH/client/s.png" "click $T 1 1" "key $T Return"; do
    capture "$SW" desktop $verb
    assert_match "desktop ${verb%% *} goes to the worker, which answers as locally" \
        "^sandweave: .*sandbox $T has no desktop" "$LAST_ERR"
done
"$SW" rm -f "$T" >/dev/null || fail "rm -f $T"
capture "$SW" image rm base
assert_ne "image rm through weave:// is refused" 0 "$LAST_RC"
assert_match "... with one line saying where images come from" \
    '^sandweave: image rm: images are installed on each worker .*not through a controller$' "$LAST_ERR"
assert_eq "... and only that line" 1 "$(line_count "$LAST_ERR")"

# --- stop ----------------------------------------------------------------------------------
note "stop"
capture env -u SANDWEAVE_HOST "$CTL" --dir "$DIR" --port "$PORT" --sandweave "$SW" stop
assert_eq "stop exits 0" 0 "$LAST_RC"
assert_eq "no controller, Slurm, srun or sandbox process of the cluster is left" "" \
    "$(pgrep -af -- "$DIR" | grep -v -e '^[0-9]* pgrep ' || true)"
finish
