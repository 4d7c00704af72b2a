#!/usr/bin/env bash
# The one-machine Slurm cluster Weave's tests and new users start with
# scripts/weave-cluster.sh: three workers (w1..w3, 4 sandbox slots each) come
# up idle on loopback only, a second start changes nothing, 13 one-slot
# allocations land 4/4/4 with the 13th waiting until a slot frees, a killed
# slurmd makes its node DOWN within the time SlurmdTimeout and MessageTimeout
# allow and takes its job with it, start brings the node back, and stop leaves
# no process.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "Slurm's daemons start job steps as their users; installing packages"
require_cmd jq ss
test_setup
CLUSTER="$SANDWEAVE_SOURCE_DIR/scripts/weave-cluster.sh"
chmod 0711 "$SCRATCH"  # munged wants every directory above its socket searchable
DIR="$SCRATCH/cluster"
PORT_BASE=17300
TIMEOUT=10     # SlurmdTimeout, seconds
MSG_TIMEOUT=3  # MessageTimeout, seconds
cluster() { "$CLUSTER" --dir "$DIR" --port-base "$PORT_BASE" --slurmd-timeout "$TIMEOUT" --message-timeout "$MSG_TIMEOUT" "$@"; }
cluster_stop() { cluster stop >/dev/null 2>&1; }
on_cleanup cluster_stop

# Processes that belong to this cluster: its daemons and their job steps carry
# its SLURM_CONF; munged is known by its socket.
cluster_procs() {
    local p
    for p in /proc/[0-9]*; do
        { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$DIR/etc/slurm.conf" &&
            echo "${p#/proc/} $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)"
    done
    pgrep -a -f -- "--socket=$DIR/munge/" || true
}

note() { printf "[%3d s] $1\n" $((SECONDS - _t0)) "${@:2}"; }

# --- start --------------------------------------------------------------------------
note "start"
capture cluster start
slurm_started_or_skip "start exits 0"
assert_match "start says how long it took" 'ready in [0-9.]+s: nodes w1 w2 w3, 4 sandbox slots each' "$LAST_ERR"
assert_match "start says how to use it" 'eval "\$\(.*weave-cluster.sh --dir [^ ]+ env\)"' "$LAST_OUT"
eval "$(cluster env)"
assert_eq "env points at the cluster's slurm.conf" "$DIR/etc/slurm.conf" "$SLURM_CONF"
assert_eq "env names the workers" "w1 w2 w3" "$SANDWEAVE_WEAVE_WORKERS"
for n in w1 w2 w3; do
    v="SANDWEAVE_WEAVE_STATE_$n"
    assert_true "worker $n has its own sandweave state directory" test -d "${!v}" -a "${!v}" = "$DIR/workers/$n/state"
done

# Slurm's text output, not its JSON, whose shape differs between 22.05 and
# 24.11 (the controller reads both through lib/controller/slurm_json.cpp).
nodes_text() {
    scontrol -o show node | awk '{
        delete v; for (i = 1; i <= NF; i++) { k = $i; sub(/=.*/, "", k); x = $i; sub(/^[^=]*=/, "", x); v[k] = x }
        print v["NodeName"], tolower(v["State"]), v["Gres"], v["NodeAddr"], v["Port"] }' | sort | paste -sd';'
}
assert_eq "Slurm shows three idle nodes with 4 sbx slots each on 127.0.0.1" \
    "w1 idle sbx:4 127.0.0.1 17301;w2 idle sbx:4 127.0.0.1 17302;w3 idle sbx:4 127.0.0.1 17303" \
    "$(nodes_text)"

# Every socket the cluster listens on is on loopback.
pids="$(cluster_procs | awk '{print $1}' | paste -sd'|')"
listening="$(ss -Hltnup | grep -E "pid=($pids)," | awk '{print $5}' | sort)"
assert_eq "slurmctld and the three slurmd listen on 127.0.0.1 only" \
    "$(printf '127.0.0.1:%s\n' 17300 17301 17302 17303)" "$listening"

before="$(cluster status)"
capture cluster start
assert_eq "a second start exits 0" 0 "$LAST_RC"
assert_eq "a second start keeps the same daemons" "$before" "$(cluster status)"

note "13 allocations"
# --- 13 one-slot allocations on 3 x 4 slots -------------------------------------------
for i in $(seq 13); do
    salloc --no-shell --gres=sbx:1 -n1 --mem=256M --time=10 -J "slot$i" >/dev/null 2>&1 &
done
# id name state reason node, of the allocations above
jobs_text() { squeue -h -o '%i %j %T %r %N' | awk '$2 ~ /^slot/'; }
granted() { (($(jobs_text | awk '$3 == "RUNNING"' | wc -l) == 12)); }
assert_true "12 of 13 allocations are granted" wait_for 20 granted
# The 13th salloc may reach slurmctld, or its scheduler, a moment after the
# twelfth is granted: it must then be listed as waiting for resources.
waiting() { [[ "$(jobs_text | awk '$3 == "PENDING" { print $3, $4 }')" == "PENDING Resources" ]]; }
assert_true "the 13th waits for resources" wait_for 10 waiting
J="$(jobs_text)"
assert_eq "running allocations per node are 4/4/4" "w1:4 w2:4 w3:4" \
    "$(awk '$3 == "RUNNING" { c[$5]++ } END { printf "w1:%d w2:%d w3:%d", c["w1"], c["w2"], c["w3"] }' <<<"$J")"
pending="$(awk '$3 == "PENDING" { print $1 }' <<<"$J")"
scancel "$(awk '$3 == "RUNNING" { print $1; exit }' <<<"$J")"
running() { [[ "$(squeue -h -j "$1" -o %T 2>/dev/null)" == RUNNING ]]; }
assert_true "the 13th starts when a slot frees" wait_for 15 running "$pending"
wait  # the salloc processes exit once granted

note "a lost worker"
# --- a lost worker ---------------------------------------------------------------------
scancel $(jobs_text | awk '{ print $1 }')
jw3="$(salloc --no-shell --gres=sbx:1 -n1 --mem=256M --time=10 -J onw3 -w w3 2>&1 | sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p')"
assert_match "an allocation is granted on w3" '^[0-9]+$' "$jw3"
kill -KILL "$(cat "$DIR/run/slurmd-w3.pid")"
t0=$SECONDS
w3_state() { sinfo -h -n w3 -o %t; }
not_responding() { [[ "$(w3_state)" == *'*' || "$(w3_state)" == down* ]]; }
down() { [[ "$(w3_state)" == down* ]]; }
# Slurm pings a node it has not heard from for SlurmdTimeout/3; a ping of a
# dead slurmd fails after MessageTimeout (refused connections are retried each
# second); the node is DOWN at the first ping cycle that starts SlurmdTimeout
# after its last answer. Measured here: not responding after 9-10 s, DOWN after
# 15-19 s. The bounds allow one more ping, as a loaded machine needs.
nr_bound=$((TIMEOUT + MSG_TIMEOUT))
down_bound=$((TIMEOUT + TIMEOUT / 3 + 3 * (MSG_TIMEOUT + 1)))
assert_true "w3 shows not responding within ${nr_bound}s of its slurmd's death" wait_for "$nr_bound" not_responding
assert_true "w3 is DOWN within ${down_bound}s" wait_for $((down_bound - (SECONDS - t0))) down
note 'w3 DOWN %d s after kill -9 of its slurmd (SlurmdTimeout=%d, MessageTimeout=%d)' \
    $((SECONDS - t0)) "$TIMEOUT" "$MSG_TIMEOUT"
# squeue's default state filter hides ended jobs: --states=all.
assert_eq "the job on w3 ends with NODE_FAIL" "NODE_FAIL" "$(squeue -h -t all -j "$jw3" -o %T)"
assert_eq "w1 and w2 stay idle" "w1 idle w2 idle" "$(sinfo -h -N -n w1,w2 -o '%N %t' | sort | paste -sd' ')"

capture cluster start
assert_eq "start restarts the killed slurmd" 0 "$LAST_RC"
assert_eq "w3 is idle again" "idle" "$(w3_state)"

note "stop"
# --- stop ------------------------------------------------------------------------------
salloc --no-shell --gres=sbx:1 -n1 --mem=256M --time=10 -J left-running >/dev/null 2>&1
capture cluster stop
assert_eq "stop exits 0" 0 "$LAST_RC"
[[ $LAST_RC == 0 ]] || printf "     %s\n" "$LAST_ERR" >&2
assert_eq "stop leaves no slurmctld, slurmd, slurmstepd or munged of the cluster" "" "$(cluster_procs)"
capture cluster status
assert_eq "status says everything is stopped (exit 3)" 3 "$LAST_RC"
assert_match "status lists the stopped daemons" 'slurmd-w3 +stopped' "$LAST_OUT"
capture cluster stop
assert_eq "a second stop exits 0" 0 "$LAST_RC"
note "done"
finish
