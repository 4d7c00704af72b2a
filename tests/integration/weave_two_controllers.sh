#!/usr/bin/env bash
# Two controllers on one Slurm cluster (ports of their own, so the test runs
# beside the other Weave tests): each marks its jobs with its own id, sees
# and touches only its own. A create of one that Slurm keeps pending is not
# cancelled by the other (which took any unnamed job of ours for a create of
# a controller that is gone); neither lists, adopts after a restart, or
# removes (rm --all) the other's sandboxes.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
weave_setup c 7711 17100
# Short: a sandbox's socket paths under the workers' state directories stay
# under 108 bytes even from a long TMPDIR.
DIR="$(mktemp -d "${TMPDIR:-/tmp}/sw2c.XXXXXX")"
chmod 0711 "$DIR"
PORT2=7712
note() { printf "[%3d s] $1\n" $((SECONDS - _t0)) "${@:2}"; }

note "start"
capture ctl start
slurm_started_or_skip "the cluster and the first controller start"
eval "$LAST_OUT"
C1=("env" "SANDWEAVE_HOST=$SANDWEAVE_HOST" "SANDWEAVE_WEAVE_TOKEN_FILE=$SANDWEAVE_WEAVE_TOKEN_FILE"
    "SANDWEAVE_WEAVE_FINGERPRINT=$SANDWEAVE_WEAVE_FINGERPRINT" "$SW")

# The second controller: the same cluster file, a directory and port of its own.
start_second() {
    setsid env -u SANDWEAVE_HOST "$SW" controller --controller-dir "$DIR/controller2" \
        --listen "127.0.0.1:$PORT2" --cluster-env "$DIR/cluster.env" \
        </dev/null >>"$DIR/log/controller2.log" 2>&1 &
    echo $! >"$DIR/run/controller2.pid"
    wait_for 20 bash -c "ss -Hltn 'sport = :$PORT2' | grep -q ."
}
stop_second() {
    local pid
    pid="$(cat "$DIR/run/controller2.pid" 2>/dev/null)" || return 0
    kill -TERM "$pid" 2>/dev/null
    wait_for 30 bash -c "! kill -0 $pid 2>/dev/null"
}
# At exit (cleanups run last first, so before weave_setup's ctl_stop, which
# then finds nothing left): the second controller, the first and the
# cluster, then the directory.
stop_all() { stop_second; ctl_stop; rm -rf "$DIR"; }
on_cleanup stop_all
assert_true "a second controller starts on the same cluster" start_second
C2=("env" "SANDWEAVE_HOST=weave://127.0.0.1:$PORT2" "SANDWEAVE_WEAVE_TOKEN_FILE=$DIR/controller2/token"
    "SANDWEAVE_WEAVE_FINGERPRINT=$(cat "$DIR/controller2/fingerprint")" "$SW")
ID1="$(cat "$DIR/controller/id")"
ID2="$(cat "$DIR/controller2/id")"
assert_match "each controller has an id of its own" '^[0-9a-f]{12} [0-9a-f]{12}$' "$ID1 $ID2"
assert_ne "... not the same" "$ID1" "$ID2"

job_of() { squeue -h -o '%i %j' | awk -v id="$1" '$2 == id { print $1 }'; }
comment_of() { squeue -h -j "$1" -o '%k'; }
ids() { "$@" ls --json | jq -r '[.[].id] | sort | join(" ")'; }

# --- each controller's jobs carry its id ---------------------------------------------
note "creates"
A="$("${C1[@]}" create --template base)" || fail "create through the first controller"
B="$("${C2[@]}" create --template base)" || fail "create through the second controller"
assert_eq "the first one's job carries its id" "sandweave/$ID1:$A" "$(comment_of "$(job_of "$A")")"
assert_eq "the second one's job carries its id" "sandweave/$ID2:$B" "$(comment_of "$(job_of "$B")")"
sleep 4  # a few polls of each watcher
assert_eq "the first controller lists only its sandbox" "$A" "$(ids "${C1[@]}")"
assert_eq "the second controller lists only its sandbox" "$B" "$(ids "${C2[@]}")"
capture "${C2[@]}" run "$A" -- true
assert_eq "the second controller does not know the first one's sandbox (exit 4)" 4 "$LAST_RC"

# --- a create pending in one is not the other's to cancel ----------------------------
note "a pending create"
FILLERS=()
slurm_fill 12 filler  # every free slot of the three workers
"${C1[@]}" create --template base >"$DIR/pending.out" 2>"$DIR/pending.err" &
creating=$!
pending() { squeue -h -t PENDING -o '%k' | grep -qx "sandweave/$ID1:"; }
assert_true "with no room, the first controller's create waits in a pending job" wait_for 10 pending
sleep 6  # four polls of the second controller's watcher
assert_true "... which the second controller leaves alone" pending
scancel "${FILLERS[0]}"
wait "$creating"
assert_eq "once Slurm has room, the create finishes" 0 "$?"
P="$(cat "$DIR/pending.out")"
assert_eq "... with its sandbox running" running "$("${C1[@]}" inspect --json "$P" | jq -r .state)"
scancel "${FILLERS[@]:1}"

# --- restarts and rm --all ------------------------------------------------------------
note "a restart of the second controller"
stop_second
assert_true "the second controller starts again" start_second
sleep 3
assert_eq "it takes back only its own sandbox" "$B" "$(ids "${C2[@]}")"
assert_eq "the first controller still lists its own" "$(printf '%s\n' "$A" "$P" | LC_ALL=C sort | paste -sd' ')" \
    "$(ids "${C1[@]}")"
capture "${C2[@]}" rm -f --all
assert_eq "rm --all through the second controller exits 0" 0 "$LAST_RC"
assert_eq "... and removes only its own" "" "$(ids "${C2[@]}")"
assert_eq "the first controller's sandboxes still run commands" "yes yes" \
    "$("${C1[@]}" run "$A" -- echo yes) $("${C1[@]}" run "$P" -- echo yes)"
assert_eq "... and their jobs run" "RUNNING RUNNING" \
    "$(squeue -h -j "$(job_of "$A")" -o %T) $(squeue -h -j "$(job_of "$P")" -o %T)"
"${C1[@]}" rm -f "$A" "$P" >/dev/null || fail "rm through the first controller"

finish
