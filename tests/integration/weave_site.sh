#!/usr/bin/env bash
# Weave on the one-machine cluster configured as a real site runs Slurm
# (proctrack/cgroup, task/cgroup, PrologFlags=contain, cgroup v1): each
# node's worker daemon owns its sandboxes outside every job's cgroups, and
# the controller reaches it through a relay step that only forwards bytes.
# Faults: the controller killed with SIGKILL mid-run (the command in flight
# fails with one line; the sandbox's audit writer, shim and ttl clock
# survive; the restarted controller adopts it again and its export is
# complete with nothing dropped); a killed relay step (nothing lost); a
# job's time limit (final audit barrier, then its export through the
# controller is complete, from the worker daemon that keeps it); a killed
# worker daemon (its sandbox is reported, its commands fail with one line
# naming the daemon, nothing runs unaudited, and once the daemon is back
# the sandbox is whole again); a job that ends while the controller is
# away (the restarted controller lists its sandbox stopped, saying how the
# job ended, and its export is complete).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "Slurm's daemons start job steps as their users; runsc"
require_cmd jq ss
[[ -d /sys/fs/cgroup/freezer ]] || skip "Slurm's cgroup/v1 plugin needs the cgroup v1 freezer hierarchy"
test_setup
CTL="$SANDWEAVE_SOURCE_DIR/scripts/weave-controller.sh"
chmod 0711 "$SCRATCH"  # munged wants every directory above its socket searchable
DIR="$SCRATCH/s"       # short: a sandbox's audit socket path must stay under 100 bytes
PORT=7721
ctl() { "$CTL" --dir "$DIR" --port "$PORT" --port-base 17300 --sandweave "$SW" "$@"; }
ctl_stop() { weave_stop "$DIR" "$PORT"; }
on_cleanup ctl_stop
weave_slurm_tools
srun() { SLURM_CONF="$DIR/etc/slurm.conf" command srun "$@"; }
scontrol() { SLURM_CONF="$DIR/etc/slurm.conf" command scontrol "$@"; }
note() { printf "[%3d s] $1\n" $((SECONDS - _t0)) "${@:2}"; }

note "start"
capture ctl start
slurm_started_or_skip "start exits 0"
eval "$LAST_OUT"
local_sw() { env -u SANDWEAVE_HOST "$SW" --state-dir "$DIR/workers/$1/state" "${@:2}"; }
job_of() { squeue -h -o '%i %j' | awk -v id="$1" '$2 == id { print $1 }'; }
worker_of() { "$SW" inspect --json "$1" | jq -r .worker; }
state_of() { "$SW" inspect --json "$1" 2>/dev/null | jq -r .state; }
writer_of() { jq -r .pid "$DIR/workers/$1/state/sandboxes/$2/audit/writer-state.json"; }
shim_of() { pgrep -f -- "__shim .*/sandboxes/$2/" | head -1; }
in_slurm_cgroup() { grep -q 'slurm' "/proc/$1/cgroup"; }
export_says() {  # FILE: "complete dropped"
    jq -r '"\(.complete) \(.dropped)"' "$1.status.json"
}

# --- configured as a site ---------------------------------------------------------------
note "site configuration"
conf_line() { grep -E "^$1=" "$DIR/etc/$2" | tail -1; }
assert_eq "slurm.conf tracks processes by cgroup" "ProctrackType=proctrack/cgroup" "$(conf_line ProctrackType slurm.conf)"
assert_eq "... confines tasks by cgroup" "TaskPlugin=task/cgroup" "$(conf_line TaskPlugin slurm.conf)"
assert_eq "... holds each allocation in an extern step" "PrologFlags=contain" "$(conf_line PrologFlags slurm.conf)"
assert_eq "cgroup.conf uses this host's cgroup v1" "CgroupPlugin=cgroup/v1" "$(conf_line CgroupPlugin cgroup.conf)"
daemon_user() { ps -o user= -p "$(cat "$1")" | tr -d ' '; }
assert_eq "slurmctld runs as SlurmUser slurm, not root" "slurm" "$(daemon_user "$DIR/run/ctld/slurmctld.pid")"
assert_eq "munged runs as munge, not root" "munge" "$(daemon_user "$DIR/munge/munged.pid")"
assert_eq "the controller runs as its system user, not root" "sandweave-weave" \
    "$(daemon_user "$DIR/run/controller.pid")"
caps_of() { grep -E "^Cap$2:" "/proc/$(cat "$1")/status" | cut -f2; }
assert_eq "... holding CAP_SETUID and CAP_SETGID only" "00000000000000c0" \
    "$(caps_of "$DIR/run/controller.pid" Eff)"
assert_eq "... also after an exec (ambient), and no more ever (bounding set)" \
    "00000000000000c0 00000000000000c0" \
    "$(caps_of "$DIR/run/controller.pid" Amb) $(caps_of "$DIR/run/controller.pid" Bnd)"
J="$(salloc --no-shell -n1 --mem=64M --time=2 2>&1 | sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p')"
capture srun --jobid "$J" --overlap --quiet cat /proc/self/cgroup
assert_match "a job step really runs in the job's cgroup" "freezer:/slurm[^:]*/uid_0/job_$J/step_" "$LAST_OUT"
scancel "$J"
for n in w1 w2 w3; do
    pid="$(cat "$DIR/run/worker-$n.pid")"
    assert_true "the worker daemon of $n runs" kill -0 "$pid"
    assert_true "... outside every Slurm cgroup" eval "! in_slurm_cgroup $pid"
    assert_eq "... listening on its socket (0666 in a 0711 directory: it judges each peer itself)" "666 711" \
        "$(stat -c %a "$DIR/workers/$n/run/worker.sock") $(stat -c %a "$DIR/workers/$n/run")"
done

# A sandbox for the time limit, made first: its job must have run a minute
# before a limit of one minute ends it.
T="$("$SW" create --template base --audit)"
JT="$(job_of "$T")"
"$SW" run "$T" -- sh -c 'echo before the limit' >/dev/null
t_made=$SECONDS

# --- a sandbox belongs to its node's worker daemon ---------------------------------------
note "the controller killed mid-run"
capture "$SW" create --template base --audit --ttl 30m
assert_eq "create through weave:// exits 0" 0 "$LAST_RC"
A="$LAST_OUT"
WA="$(worker_of "$A")"
JA="$(job_of "$A")"
PW="$(writer_of "$WA" "$A")"
PS="$(shim_of "$WA" "$A")"
EXP="$(local_sw "$WA" inspect --json "$A" | jq -r .expires_at_ms)"
assert_true "its audit writer runs outside every Slurm cgroup" eval "kill -0 $PW && ! in_slurm_cgroup $PW"
assert_true "... and so does its shim (reaper and ttl clock)" eval "[[ -n '$PS' ]] && ! in_slurm_cgroup $PS"
relay_of() {  # JOB: the relay step's pid in that job
    local p
    for p in $(pgrep -f -- "__relay --socket $DIR/workers/"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_JOB_ID=$1" && echo "$p"
    done
}
RP="$(relay_of "$JA" | head -1)"
assert_true "the controller reaches it through a relay step in its job" \
    eval "[[ -n '$RP' ]] && grep -q 'job_$JA/step_' /proc/$RP/cgroup"
"$SW" run "$A" -- sh -c 'echo started in flight; exec sleep 60' >"$SCRATCH/flight.out" 2>"$SCRATCH/flight.err" &
runner=$!
started() { grep -q "started in flight" "$SCRATCH/flight.out"; }
assert_true "a command is in flight" wait_for 20 started
kill -KILL "$(cat "$DIR/run/controller.pid")"
wait "$runner"
rc=$?
assert_eq "the command in flight fails as a lost connection (exit 255)" 255 "$rc"
assert_eq "... with one line" 1 "$(line_count "$(cat "$SCRATCH/flight.err")")"
assert_match "... saying the connection was lost" "^sandweave: .*(lost|closed)" "$(cat "$SCRATCH/flight.err")"
relay_gone() { [[ -z "$(relay_of "$JA")" ]]; }
assert_true "the relay step ends with the controller" wait_for 15 relay_gone
assert_true "the sandbox's audit writer survives (the same process)" kill -0 "$PW"
assert_true "... and its shim, which holds its ttl clock" kill -0 "$PS"
assert_eq "... whose deadline is unchanged" "$EXP" "$(local_sw "$WA" inspect --json "$A" | jq -r .expires_at_ms)"
assert_eq "the worker still runs it" running "$(local_sw "$WA" inspect --json "$A" | jq -r .state)"
capture ctl start
assert_eq "the controller starts again" 0 "$LAST_RC"
back() { [[ "$("$SW" run "$A" -- echo back 2>/dev/null)" == back ]]; }
assert_true "the restarted controller adopts it again" wait_for 20 back
capture "$SW" audit export "$A" "$SCRATCH/a.jsonl"
assert_eq "its export exits 0" 0 "$LAST_RC"
assert_eq "... complete, nothing dropped" "true 0" "$(export_says "$SCRATCH/a.jsonl")"
assert_match "... and it holds the command that was in flight" "started in flight" "$(cat "$SCRATCH/a.jsonl")"

# --- a killed relay step ------------------------------------------------------------------
note "a killed relay"
RP="$(relay_of "$JA" | head -1)"
assert_true "the new link has its relay step" test -n "$RP"
kill -KILL "$RP"
again() { [[ "$("$SW" run "$A" -- echo again 2>/dev/null)" == again ]]; }
assert_true "after its relay is killed, the sandbox is reachable again" wait_for 15 again
assert_true "... its audit writer never stopped" kill -0 "$PW"
capture "$SW" audit export "$A" "$SCRATCH/a2.jsonl"
assert_eq "... and its export is complete, nothing dropped" "0 true 0" "$LAST_RC $(export_says "$SCRATCH/a2.jsonl")"
assert_match "... holding the commands before and after" "again" "$(cat "$SCRATCH/a2.jsonl")"

# --- a killed worker daemon ------------------------------------------------------------------
note "a killed worker daemon"
WPID="$(cat "$DIR/run/worker-$WA.pid")"
kill -KILL "$WPID"
capture "$SW" run "$A" -- echo unreachable
assert_eq "a command fails as sandweave's failure (exit 125)" 125 "$LAST_RC"
assert_match "... its error one line, naming the worker daemon that does not answer" \
    "sandbox $A: its worker $WA cannot be reached: [^"$'\n'"]*worker daemon at $DIR/workers/$WA/run/worker.sock does not answer[^"$'\n'"]*\$" "$LAST_ERR"
assert_eq "... and nothing ran" "" "$LAST_OUT"
capture "$SW" ls --json
assert_match "ls still reports the sandbox, with why it cannot be reached" \
    "cannot be reached: .*does not answer" "$(jq -r --arg id "$A" '.[] | select(.id == $id) | .error' <<<"$LAST_OUT")"
assert_true "the sandbox keeps running with its audit writer" kill -0 "$PW"
assert_true "... and its shim" kill -0 "$PS"
capture "$SW" audit export "$A" "$SCRATCH/a3.jsonl"
assert_ne "its export fails meanwhile" 0 "$LAST_RC"
assert_true "... and nothing claims to be complete" eval "[[ ! -e '$SCRATCH/a3.jsonl.status.json' ]] || jq -e '.complete == false' '$SCRATCH/a3.jsonl.status.json'"
capture ctl start  # the cluster starts what is missing: the worker daemon
assert_eq "the worker daemon starts again" 0 "$LAST_RC"
whole() { [[ "$("$SW" run "$A" -- echo whole 2>/dev/null)" == whole ]]; }
assert_true "once its daemon is back, the sandbox answers again" wait_for 20 whole
capture "$SW" audit export "$A" "$SCRATCH/a4.jsonl"
assert_eq "... and its export is complete, nothing dropped" "0 true 0" "$LAST_RC $(export_says "$SCRATCH/a4.jsonl")"
clear() { [[ "$("$SW" inspect --json "$A" | jq -r '.error // ""')" == "" ]]; }
assert_true "... and it no longer reports an error" wait_for 20 clear

# --- a job's time limit --------------------------------------------------------------------
note "a job's time limit"
while ((SECONDS - t_made < 62)); do sleep 1; done
scontrol update "JobId=$JT" TimeLimit=1
timed_out() { [[ "$(state_of "$T")" == stopped ]]; }
assert_true "Slurm ends its job at the limit; the sandbox is stopped" wait_for 60 timed_out
assert_match "... saying why" "its Slurm job $JT ended \(TIMEOUT" "$("$SW" inspect --json "$T" | jq -r .error)"
capture "$SW" audit export "$T" "$SCRATCH/t.jsonl"
assert_eq "its export through the controller, after the job ended, exits 0" 0 "$LAST_RC"
assert_eq "... complete (the epilog's final barrier), nothing dropped" "true 0" "$(export_says "$SCRATCH/t.jsonl")"
assert_match "... and holds its command" "before the limit" "$(cat "$SCRATCH/t.jsonl")"
assert_eq "the sha256 is the worker's" "$(jq -r .sha256 "$SCRATCH/t.jsonl.status.json")" "$(sha256sum "$SCRATCH/t.jsonl" | cut -d' ' -f1)"
WT="$(worker_of "$T")"
assert_exit "rm through the controller exits 0" 0 "$SW" rm "$T"
capture local_sw "$WT" inspect "$T"
assert_eq "... and removes it on its worker" 4 "$LAST_RC"

# --- a job that ends while the controller is away ------------------------------------------
note "a job that ends while the controller is away"
capture "$SW" create --template base --audit
assert_eq "create exits 0" 0 "$LAST_RC"
E="$LAST_OUT"
WE="$(worker_of "$E")"
JE="$(job_of "$E")"
"$SW" run "$E" -- sh -c "echo before the controller went away" >/dev/null || fail "run in $E"
kill -KILL "$(cat "$DIR/run/controller.pid")"
scancel "$JE"
cancelled() { [[ "$(squeue -h -t all -j "$JE" -o %T 2>/dev/null)" == CANCELLED ]]; }
assert_true "Slurm ends its job (CANCELLED, its epilog done)" wait_for 30 cancelled
assert_eq "... and its epilog stopped the sandbox on its worker" stopped \
    "$(local_sw "$WE" inspect --json "$E" | jq -r .state)"
capture ctl start
assert_eq "the controller starts again" 0 "$LAST_RC"
capture "$SW" inspect --json "$E"
assert_eq "the restarted controller lists it, stopped" "0 stopped" "$LAST_RC $(jq -r .state <<<"$LAST_OUT")"
assert_match "... saying how its job ended" "its Slurm job $JE ended \(CANCELLED\)" "$(jq -r .error <<<"$LAST_OUT")"
capture "$SW" audit export "$E" "$SCRATCH/e.jsonl"
assert_eq "its export through the new controller is complete, nothing dropped" "0 true 0" \
    "$LAST_RC $(export_says "$SCRATCH/e.jsonl")"
assert_match "... holding its command" "before the controller went away" "$(cat "$SCRATCH/e.jsonl")"
assert_exit "rm through the controller exits 0" 0 "$SW" rm "$E"
capture local_sw "$WE" inspect "$E"
assert_eq "... and removes it on its worker" 4 "$LAST_RC"

# --- stop ----------------------------------------------------------------------------------
note "stop"
"$SW" rm -f "$A" >/dev/null || fail "rm -f"
capture env -u SANDWEAVE_HOST "$CTL" --dir "$DIR" --port "$PORT" --sandweave "$SW" stop
assert_eq "stop exits 0" 0 "$LAST_RC"
assert_eq "no controller, Slurm, worker daemon or sandbox process is left" "" \
    "$(pgrep -af -- "$DIR" | grep -v -e '^[0-9]* pgrep ' || true)"
note "done"
finish
