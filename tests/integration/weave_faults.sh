#!/usr/bin/env bash
# Weave's faults and lifetimes, through weave:// on the one-machine cluster
# (ports of its own, so it runs beside the other Weave tests): a worker whose
# slurmd dies shows its sandboxes `lost` (Slurm's failure detection), their
# export says complete false naming the worker, rm drops them, the other
# workers' sandboxes keep working; a create's --ttl becomes the job's
# --time, --cpus/--memory its --cpus-per-task/--mem, and a request Slurm
# can never grant is one line with Slurm's reason; a job that ends behind
# the controller's back (scancel) ends its sandbox through the workers'
# epilog, final audit barrier first, and its export through the controller
# stays complete; a killed relay step, a controller
# killed during a create, a create pending across a controller restart and
# a slurmctld restart leave no sandbox without its job and no job of ours
# without its sandbox; doctor reports the controller, Slurm and each worker.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "Slurm's daemons start job steps as their users; runsc"
require_cmd jq ss python3
test_setup
CTL="$SANDWEAVE_SOURCE_DIR/scripts/weave-controller.sh"
chmod 0711 "$SCRATCH"  # munged wants every directory above its socket searchable
DIR="$SCRATCH/c"  # short: a sandbox's audit socket path must stay under 100 bytes
PORT=7843
SLURMD_TIMEOUT=6  # small, so a dead worker is seen quickly (docs/weave.md, "Lost workers")
MSG_TIMEOUT=2
ctl() {
    "$CTL" --dir "$DIR" --port "$PORT" --port-base 17700 --slurmd-timeout "$SLURMD_TIMEOUT" \
        --message-timeout "$MSG_TIMEOUT" --sandweave "$SW" "$@"
}
ctl_stop() { weave_stop "$DIR" "$PORT"; }
on_cleanup ctl_stop
weave_slurm_tools
note() { printf "[%3d s] $1\n" $((SECONDS - _t0)) "${@:2}"; }

note "start"
capture ctl start
slurm_started_or_skip "start exits 0"
eval "$LAST_OUT"
local_sw() { env -u SANDWEAVE_HOST "$SW" --state-dir "$DIR/workers/$1/state" "${@:2}"; }
job_of() { squeue -h -o '%i %j' | awk -v id="$1" '$2 == id { print $1 }'; }
worker_of() { "$SW" inspect --json "$1" | jq -r .worker; }
state_of() { "$SW" inspect --json "$1" 2>/dev/null | jq -r .state; }
restart_controller() {  # SIGNAL
    kill "-$1" "$(cat "$DIR/run/controller.pid")"
    wait_for 10 bash -c "! ss -Hltn 'sport = :$PORT' | grep -q ."
    capture ctl start
    assert_eq "the controller starts again" 0 "$LAST_RC"
}
# Fills NODE's free sandbox slots with jobs of no sandbox, so the next create
# lands elsewhere (Slurm places; this only leaves it no room there).
FILLERS=()
fill() { slurm_fill 4 filler "$1"; }  # NODE: its four slots
unfill() { ((${#FILLERS[@]} == 0)) || scancel "${FILLERS[@]}"; FILLERS=(); }

# No sandbox runs without its job, no job of ours runs without its sandbox.
invariants() {  # WHEN
    local n j id running_jobs bad=""
    running_jobs=" $(squeue -h -t RUNNING -o %i | tr '\n' ' ') "
    for n in w1 w2 w3; do
        while read -r id j; do
            [[ -n "$id" ]] || continue
            [[ "$running_jobs" == *" $j "* ]] || bad+=" sandbox $id on $n runs without its job $j;"
        done < <(local_sw "$n" ls --json 2>/dev/null |
            jq -r '.[] | select(.state == "running") | "\(.id) \(.spec.labels.slurm_job // "none")"')
    done
    while read -r j id n; do
        [[ -n "$j" ]] || continue
        local_sw "$n" inspect --json "$id" 2>/dev/null | jq -e '.state == "running"' >/dev/null ||
            bad+=" job $j ($id on $n) runs without its sandbox;"
    done < <(squeue --json | jq -r '.jobs[] | select((.comment | test("^sandweave/[a-z0-9]+:")) and .job_state == "RUNNING")
        | "\(.job_id) \(.comment | sub("^sandweave/[a-z0-9]+:"; "") | split(":")[0] | if . == "" then "(unnamed)" else . end) \(.nodes)"')
    [[ -z "$bad" ]] || { echo "$1:$bad"; return 1; }
}

# --- resources and time limits become the job's -----------------------------------
note "resources"
capture "$SW" create --template base --audit --ttl 10m --cpus 2 --memory 512MiB
assert_eq "create --ttl --cpus --memory exits 0" 0 "$LAST_RC"
A="$LAST_OUT"
assert_eq "its job asks Slurm for 10 minutes, 2 CPUs and 512M" "10:00 2 512M" \
    "$(squeue -h -j "$(job_of "$A")" -o '%l %C %m')"
assert_eq "the sandbox has the resources too" "2 536870912" \
    "$("$SW" inspect --json "$A" | jq -r '"\(.spec.resources.cpus) \(.spec.resources.memory)"')"
capture "$SW" create --template base --cpus 64
assert_ne "a request Slurm can never grant fails" 0 "$LAST_RC"
assert_match "... with Slurm's reason on one line" '^sandweave: Slurm gave no allocation: .*(More processors requested than permitted|Requested node configuration is not available)$' "$LAST_ERR"
assert_eq "... and only that line" 1 "$(line_count "$LAST_ERR")"
assert_eq "... and leaves no job" "" "$(squeue -h -t PENDING,RUNNING -o '%j' | grep '^sandweave-' || true)"

# --- a lost worker -----------------------------------------------------------------
note "a lost worker"
WA="$(worker_of "$A")"
"$SW" run "$A" -- sh -c 'echo audited' >/dev/null
fill "$WA"
B="$("$SW" create --template base)"
WB="$(worker_of "$B")"
assert_ne "a second sandbox lands on another worker" "$WA" "$WB"
unfill
# A pool of one whose member Slurm puts on the worker about to be lost.
for n in w1 w2 w3; do [[ $n == "$WA" ]] || fill "$n"; done
capture "$SW" pool create lp --size 1
assert_eq "a pool of one is made" 0 "$LAST_RC"
pool_member() { "$SW" ls --json | jq -r '.[] | select(.pool.name == "lp" and .pool.state == "idle" and .state == "running") | "\(.id) \(.worker)"'; }
wait_for 30 bash -c '[[ -n "$("$0" ls --json | jq -r ".[] | select(.pool.name == \"lp\" and .pool.state == \"idle\") | .id")" ]]' "$SW" ||
    fail "the pool's member did not start"
read -r M MW < <(pool_member)
assert_eq "... its member on the same worker" "$WA" "$MW"
unfill
# The fillers must have left w1 before its slurmd dies, or their ending
# waits for it (Slurm resends TERMINATE_JOB only every minute).
no_fillers() { ! squeue -h -o %j | grep -qx filler; }
wait_for 15 no_fillers || fail "the fillers did not end"
JA="$(job_of "$A")"
kill -KILL "$(cat "$DIR/run/slurmd-$WA.pid")"
t0=$SECONDS
lost() { [[ "$(state_of "$A")" == lost ]]; }
bound=$((SLURMD_TIMEOUT + SLURMD_TIMEOUT / 3 + 3 * (MSG_TIMEOUT + 1) + 4))
assert_true "within ${bound}s of its slurmd's death, its sandbox is lost" wait_for "$bound" lost
note "lost after %d s (SlurmdTimeout=%d, MessageTimeout=%d)" $((SECONDS - t0)) "$SLURMD_TIMEOUT" "$MSG_TIMEOUT"
capture "$SW" ls
assert_match "ls shows it lost" "^$A .* lost " "$(grep -F "$A" <<<"$LAST_OUT")"
assert_match "inspect says why, naming the worker" "^worker $WA lost: Slurm reports node $WA " \
    "$("$SW" inspect --json "$A" | jq -r .error)"
LOG="$SCRATCH/lost.jsonl"
capture "$SW" audit export "$A" "$LOG"
assert_eq "its audit export exits 3 (incomplete)" 3 "$LAST_RC"
assert_eq "its status says complete false, worker lost" "false worker_lost" \
    "$(jq -r '"\(.complete) \(.reasons | join(","))"' "$LOG.status.json")"
assert_match "... naming the worker" "worker $WA lost" "$(jq -r .error "$LOG.status.json")"
assert_eq "... and claims nothing it did not write" "0 $(sha256sum "$LOG" | cut -d' ' -f1)" \
    "$(jq -r '"\(.bytes) \(.sha256)"' "$LOG.status.json")"
capture "$SW" run "$A" -- true
assert_ne "a command in the lost sandbox fails" 0 "$LAST_RC"
assert_match "... saying it is lost" "is lost: worker $WA lost" "$LAST_ERR"
capture "$SW" ps "$A"
ps_rc=$LAST_RC
assert_ne "ps of the lost sandbox fails" 0 "$ps_rc"
capture "$SW" snapshot create "$A" --kind fs
assert_eq "a snapshot of the lost sandbox fails as ps does (exit $ps_rc)" "$ps_rc" "$LAST_RC"
assert_match "... saying it is lost, in one line" "^sandweave: .*is lost: worker $WA lost" "$LAST_ERR"
assert_eq "... and only that line" 1 "$(line_count "$LAST_ERR")"
capture "$SW" run "$B" -- echo still here
assert_eq "the other worker's sandbox keeps working (the controller is up)" "still here" "$LAST_OUT"
elsewhere() { local id w; read -r id w < <(pool_member); [[ -n "$id" && "$id" != "$M" && "$w" != "$WA" ]]; }
assert_true "the pool refills elsewhere: a warm member on a live worker" wait_for 60 elsewhere
assert_eq "... and ls shows the old member lost" lost "$(state_of "$M")"
capture "$SW" pool acquire lp
assert_eq "acquire hands out the new member" 0 "$LAST_RC"
ACQ="$LAST_OUT"
assert_ne "... not the lost one" "$M" "$ACQ"
assert_exit "pool rm exits 0" 0 "$SW" pool rm lp
"$SW" rm -f "$ACQ" "$M" >/dev/null 2>&1
assert_exit "rm of the lost sandbox exits 0" 0 "$SW" rm -f "$A"
assert_eq "it leaves the controller's view" "" "$("$SW" ls --json | jq -r --arg id "$A" '.[] | select(.id == $id) | .id')"
assert_eq "its job is no longer running" "" "$(squeue -h -t RUNNING,PENDING -j "$JA" -o %i 2>/dev/null)"
note "the worker comes back"
capture ctl start  # the killed slurmd comes back
assert_eq "the worker comes back" 0 "$LAST_RC"

# --- doctor through weave:// ----------------------------------------------------------
note "doctor"
capture "$SW" doctor
assert_eq "doctor through weave:// exits 0" 0 "$LAST_RC"
assert_match "it reports the controller" "ok +controller +sandweave [0-9.]+; clients: TLS, token required" "$LAST_OUT"
assert_match "... slurmctld" "ok +slurmctld +answers: 3 node" "$LAST_OUT"
for n in w1 w2 w3; do
    assert_match "... node $n" "ok +node $n +(idle|mixed|allocated)" "$LAST_OUT"
    assert_match "... and $n's own doctor" "ok +$n: [a-z]" "$LAST_OUT"
done
assert_match "... and the verdict" "sandweave can run sandboxes on weave://" "$LAST_OUT"

# --- a job that ends behind the controller's back -------------------------------------
note "scancel"
C="$("$SW" create --template base --audit)"
WC="$(worker_of "$C")"
JC="$(job_of "$C")"
"$SW" run "$C" -- sh -c 'echo before the end' >/dev/null
assert_eq "the worker records the job with the sandbox" "$JC" \
    "$("$SW" inspect --json "$C" | jq -r .spec.labels.slurm_job)"
scancel "$JC"
stopped() { [[ "$(state_of "$C")" == stopped ]]; }
assert_true "once Slurm ends its job, the sandbox is stopped" wait_for 10 stopped
assert_match "... saying why" "its Slurm job $JC ended \(CANCELLED" "$("$SW" inspect --json "$C" | jq -r .error)"
capture "$SW" ps "$C"
ps_rc=$LAST_RC
assert_ne "ps of the ended sandbox fails" 0 "$ps_rc"
capture "$SW" snapshot create "$C" --kind fs
assert_eq "a snapshot of the ended sandbox fails as ps does (exit $ps_rc)" "$ps_rc" "$LAST_RC"
assert_match "... saying its job ended" "is stopped: its Slurm job $JC ended" "$LAST_ERR"
assert_exit "... and the controller is still up" 0 "$SW" ls
worker_stopped() { [[ "$(local_sw "$WC" inspect --json "$C" | jq -r '"\(.state) \(.ended_by)"')" == "stopped slurm_job" ]]; }
assert_true "the worker's epilog terminated it (ended_by slurm_job)" wait_for 10 worker_stopped
capture local_sw "$WC" audit export "$C" "$SCRATCH/ended.jsonl"
assert_eq "its audit log on the worker is complete (barrier first)" 0 "$LAST_RC"
assert_match "... and holds the command" "before the end" "$(cat "$SCRATCH/ended.jsonl")"
capture "$SW" audit export "$C" "$SCRATCH/ended-ctl.jsonl"
assert_eq "its export through the controller, after its job ended, exits 0 and is complete" "0 true" \
    "$LAST_RC $(jq -r .complete "$SCRATCH/ended-ctl.jsonl.status.json" 2>/dev/null)"
assert_true "... the same log its worker keeps" cmp "$SCRATCH/ended.jsonl" "$SCRATCH/ended-ctl.jsonl"
assert_exit "rm of it through the controller exits 0" 0 "$SW" rm "$C"

# --- a killed relay step ---------------------------------------------------------------
note "killed relay step"
JB="$(job_of "$B")"
# (Restarting a slurmd on this host ends the other nodes' sruns too: the
# controller makes a new link when it sees one ended.)
has_srun() { pgrep -f -- "^([^ ]*/)?srun --jobid=$JB --overlap" >/dev/null; }
assert_true "the controller keeps a link to each sandbox" wait_for 10 has_srun
pkill -KILL -f -- "^([^ ]*/)?srun --jobid=$JB --overlap" || fail "no srun for job $JB"
capture "$SW" run "$B" -- true  # may fail: its link broke under it
again() { [[ "$("$SW" run "$B" -- echo again 2>/dev/null)" == again ]]; }
assert_true "after its relay step is killed, the sandbox is reachable again" wait_for 10 again

# --- the controller killed during a create ---------------------------------------------
note "controller killed during a create"
"$SW" create --template base >/dev/null 2>&1 &
creating=$!
unnamed() { squeue -h -t RUNNING -o '%j' | grep -q '^sandweave-'; }
assert_true "a create's job runs before it is named" wait_for 10 unnamed
kill -KILL "$(cat "$DIR/run/controller.pid")"
wait "$creating" 2>/dev/null
restart_controller TERM
gone() { ! squeue -h -t RUNNING,PENDING -o '%j' | grep -q '^sandweave-'; }
assert_true "the restarted controller cancels the unnamed job" wait_for 10 gone
settled() { invariants "after the killed create" >/dev/null; }
assert_true "no sandbox runs without its job, no job without its sandbox" wait_for 15 settled

# --- a create pending across a controller restart ---------------------------------------
note "pending create across a restart"
slurm_fill 12 filler  # every free slot of the three workers
"$SW" create --template base >/dev/null 2>&1 &
creating=$!
pending() { squeue -h -t PENDING -o '%j' | grep -q '^sandweave-'; }
assert_true "with no room, the create's job is pending" wait_for 10 pending
restart_controller TERM
wait "$creating" 2>/dev/null
assert_true "the restarted controller cancels the pending create's job" wait_for 10 gone
unfill
sleep 2
assert_eq "it never runs" "" "$(squeue -h -t RUNNING,PENDING -o '%j' | grep '^sandweave-' || true)"

# --- slurmctld restarts ------------------------------------------------------------------
note "slurmctld restart"
D="$("$SW" create --template base)"
kill -TERM "$(cat "$DIR/run/slurmctld.pid")"
wait_for 15 bash -c "! kill -0 $(cat "$DIR/run/slurmctld.pid") 2>/dev/null"
sleep 2  # the controller polls a missing slurmctld meanwhile
capture ctl start
assert_eq "slurmctld starts again with its state" 0 "$LAST_RC"
sleep 3
all_running() { "$SW" ls --json | jq -e --arg b "$B" --arg d "$D" '[.[] | select((.id == $b or .id == $d) and .state == "running")] | length == 2' >/dev/null; }
assert_true "every sandbox is still running through the controller" wait_for 10 all_running
assert_eq "and still runs commands" "yes" "$("$SW" run "$D" -- echo yes)"
capture invariants "after the slurmctld restart"
assert_eq "no sandbox runs without its job, no job without its sandbox" "" "$LAST_OUT"

# --- stop ----------------------------------------------------------------------------------
note "stop"
"$SW" rm -f "$B" "$D" >/dev/null || fail "rm -f"
capture env -u SANDWEAVE_HOST "$CTL" --dir "$DIR" --port "$PORT" --sandweave "$SW" stop
assert_eq "stop exits 0" 0 "$LAST_RC"
assert_eq "no controller, Slurm or sandbox process is left" "" \
    "$(pgrep -af -- "$DIR" | grep -v -e '^[0-9]* pgrep ' || true)"
note "done"
finish
