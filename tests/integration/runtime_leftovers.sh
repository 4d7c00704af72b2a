#!/usr/bin/env bash
# What a runtime killed half-way leaves on the host under a sandbox's id: an
# empty host cgroup in every hierarchy (runsc makes /<id> in each when the
# bundle names no cgroupsPath, and removes them only at `runsc delete`) and a
# lock without a state in the runtime's root. Two ways to get there:
#   1. the pool's background refill SIGKILLed while it creates members (a
#      resize wakes it, the kill comes 0.1-0.6 s later, or just after a
#      member's runsc started its create): that runsc runs on, and whoever
#      clears the abandoned member kills it inside its create; then
#      `pool rm`, `rm --all` and `prune` at once, no waiting;
#   2. a create whose runsc is SIGKILLed in its create once it has made the
#      cgroups (a wrapper does it), the create itself killed at its next
#      fault point (create.launched); then `rm`, and again `prune`;
#   3. the same, with the sandbox's directory and name then removed by hand
#      (as an rm that knew nothing of them left them): doctor names them at
#      once, and prune removes them;
#   4. runsc's state and lock of a sandbox the store does not have (what a
#      runsc killed after it wrote its state leaves, made here from a real
#      sandbox's state file): doctor names them and prune removes them, but
#      not while a runsc (here: flock) still holds the lock.
# After each: no cgroup of this test's sandboxes in any hierarchy, no runsc
# lock without its state, no runsc file of a sandbox the store does not
# have, and doctor says there are no leftovers. Only ids this state
# directory had are looked at: other tests' cgroups are not ours.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
sw_setup
require_env SANDWEAVE_FAULTS
[[ -x "$SANDWEAVE_FAULTS" ]] || fatal "sandweave-faults is built" "$SANDWEAVE_FAULTS is missing"
[[ -d /sys/fs/cgroup ]] || skip "no cgroup filesystem at /sys/fs/cgroup"

IDS="$SCRATCH/ids"
: >"$IDS"
# Every sandbox id this state directory has had: its sandbox directories
# (also a reservation's, before its record) and the runtime's files.
record_ids() {
    { ls -A "$STATE/sandboxes" "$STATE/runsc"; } 2>/dev/null | grep -oE '^sw-[0-9a-f]{12}' >>"$IDS"
}
watch_ids() {
    while [[ ! -e "$SCRATCH/stop-watch" ]]; do
        record_ids
        sleep 0.02
    done
}
stop_watch() {
    [[ -e "$SCRATCH/stop-watch" ]] && return 0
    touch "$SCRATCH/stop-watch"
    wait "$WATCHER" 2>/dev/null
}
# The host cgroup directories of this test's sandboxes, in any hierarchy
# (cgroup v1: /sys/fs/cgroup/<controller>/<id>; v2: /sys/fs/cgroup/<id>).
cgroups_left() {
    local id
    for id in $(sort -u "$IDS"); do
        find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name "$id" 2>/dev/null
    done
}
# runsc's lock files whose state file is gone: a runsc killed in its create.
locks_without_state() {
    local f
    for f in "$STATE"/runsc/*.lock; do
        [[ -e "$f" && ! -e "${f%.lock}.state" ]] && basename "$f"
    done
}
# runsc's files (state or lock) of a sandbox this store does not have.
runsc_files_unknown() {
    local f id
    for f in "$STATE"/runsc/sw-*; do
        [[ -e "$f" ]] || continue
        id="$(basename "$f")"
        id="${id%%_sandbox:*}"
        [[ -d "$STATE/sandboxes/$id" ]] || basename "$f"
    done
}
doctor_leftovers_ok() {
    sw doctor --json 2>/dev/null | jq -r '.checks[] | select(.name == "leftovers") | .ok'
}
assert_nothing_left() {  # LABEL
    local label="$1"
    record_ids
    assert_true "$label: the test saw its sandboxes' ids" test -s "$IDS"
    assert_eq "$label: no host cgroup of this test's sandboxes in any hierarchy" "" "$(cgroups_left)"
    assert_eq "$label: no runsc lock without its state" "" "$(locks_without_state)"
    assert_eq "$label: no runsc file of a sandbox the store does not have" "" "$(runsc_files_unknown)"
    assert_eq "$label: doctor reports no leftovers" true "$(doctor_leftovers_ok)"
}

# --- 1. a pool's refill killed while it creates members ---------------------------------

watch_ids &
WATCHER=$!
on_cleanup stop_watch
assert_exit "pool create p --size 1" 0 sw pool create p --size 1
[[ "$LAST_RC" == 0 ]] || finish
refill_pid() { pgrep -f -- "__pool-refill --state-dir $STATE p" | head -1; }
# Kills the standing refill of pool p (PID, when looked up beforehand: a
# pgrep takes long enough here for a member's create to end meanwhile);
# true when there was one.
kill_refill() {
    local pid="${1:-$(refill_pid)}"
    [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
}
runsc_creating() { [[ -n "$(locks_without_state)" ]]; }
# Waits up to 3 s for a member's runsc to be in its create (its lock, no
# state yet: a window of about 0.2 s).
wait_runsc_creating() {
    local j
    for ((j = 0; j < 150; j++)); do
        runsc_creating && return 0
        sleep 0.02
    done
    return 1
}
kills=0
inside=0  # kills while a member's runsc was in its create
kill_counted() {  # [PID]
    if kill_refill "$@"; then
        kills=$((kills + 1))
        record_ids
        runsc_creating && inside=$((inside + 1))
    fi
}
deadline=$((SECONDS + 30))
for ((i = 0; i < 30 && SECONDS < deadline; i++)); do
    # Each resize wakes (or starts) a refill; the next one's refill clears
    # what the kill left (killing a runsc that is still in its create).
    if ((i % 2)); then
        sw pool resize p 2 >/dev/null 2>&1
        # 0.1-0.6 s later, whatever the refill is doing (clearing what the
        # last kill left, preparing a member, waiting on runsc).
        sleep "0.$((1 + RANDOM % 6))"
    else
        sw pool resize p 3 >/dev/null 2>&1
        # Within a moment of a member's runsc starting its create: a refill
        # killed every time before it got there would never get there. The
        # resize has started or woken the refill by the time it returns.
        pid="$(refill_pid)"
        wait_runsc_creating
        sleep "0.0$((RANDOM % 5))"
    fi
    kill_counted ${pid:+"$pid"}
    pid=
    ((kills >= 6 && inside >= 2)) && break
done
# Last, the sequence that leaked: a refill killed while a member's runsc is in its
# create, and the pool removed at once.
sw pool resize p 4 >/dev/null 2>&1
pid="$(refill_pid)"
wait_runsc_creating
kill_counted ${pid:+"$pid"}
assert_true "kill loop: refills were killed ($kills)" test "$kills" -ge 3
assert_true "kill loop: some kills came while a member's runsc was in its create ($inside)" \
    test "$inside" -ge 1
assert_exit "pool rm p" 0 sw pool rm p
assert_exit "rm --all" 0 sw rm --all
assert_exit "prune, at once" 0 sw prune
stop_watch
assert_nothing_left "killed refills"
assert_no_leftovers "killed refills"

# --- 2. a create killed after runsc made its cgroups, inside runsc's create ------------

# A runsc killed inside `run` once it has made the sandbox's host cgroups
# (with what it started), which then exits 0 so that the create goes on to
# its next fault point; every other command is the real runsc's.
DYING_RUNSC="$SCRATCH/runsc-dies-in-create"
cat >"$DYING_RUNSC" <<EOF
#!/bin/bash
real='$(runsc_bin)'
run=0 bundle="" prev=""
for a in "\$@"; do
    [[ "\$a" == run ]] && run=1
    [[ "\$prev" == --bundle ]] && bundle="\$a"
    prev="\$a"
done
((run)) || exec "\$real" "\$@"
id="\${@: -1}"
"\$real" "\$@" &
pid=\$!
for ((i = 0; i < 1000; i++)); do
    [[ -n "\$(find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name "\$id" 2>/dev/null)" ]] && break
    sleep 0.01
done
kill -9 "\$pid" \$(pgrep -f -- "^runsc-[a-z]+ .*\$bundle") 2>/dev/null
wait
exit 0
EOF
chmod 755 "$DYING_RUNSC"

# crash_create NAME: `create --name NAME` with that runsc, dying at
# create.launched (the record still says creating). Sets ID to its id.
crash_create() {
    ID=""
    SANDWEAVE_RUNSC="$DYING_RUNSC" SANDWEAVE_FAULT=create.launched "$SANDWEAVE_FAULTS" \
        create --name "$1" >"$SCRATCH/crash.out" 2>"$SCRATCH/crash.err" </dev/null
    local rc=$?
    assert_eq "create --name $1: died at create.launched (SIGKILL)" 137 "$rc"
    local id
    id="$(readlink "$STATE/names/$1")"
    id="${id##*/}"
    [[ -n "$id" ]] || { fail "create --name $1: its name points at a sandbox"; return 1; }
    echo "$id" >>"$IDS"
    assert_true "$1: runsc made its host cgroups before it was killed" \
        test -n "$(find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name "$id")"
    ID="$id"
}

crash_create crashed-rm
if [[ -n "$ID" ]]; then
    assert_exit "rm of the crashed create" 0 sw rm "$ID"
    assert_nothing_left "create killed in runsc's create, then rm"
fi
crash_create crashed-prune
if [[ -n "$ID" ]]; then
    assert_exit "prune of the crashed create, at once" 0 sw prune
    assert_nothing_left "create killed in runsc's create, then prune"
fi

# --- 3. leftovers whose sandbox is gone from the store ------------------------------------

# As an rm that did not know about them (an earlier sandweave) leaves them:
# the sandbox's directory and name gone, its cgroups and runsc lock still
# there. doctor names them at once, not only after the cgroups' age guard
# (the lock says this store's create made them), and prune removes them.
crash_create forgotten
if [[ -n "$ID" ]]; then
    pids="$(pgrep -f -- "$STATE/sandboxes/$ID/")"
    [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null
    wait_for 5 no_procs_matching "$STATE/sandboxes/$ID/"
    umount -l "$STATE/sandboxes/$ID/rootfs" 2>/dev/null
    rm -rf "${STATE:?}/sandboxes/$ID" "$STATE/names/forgotten"
    assert_eq "forgotten: ls lists nothing" 0 "$(sw_count)"
    capture sw doctor --json
    assert_eq "forgotten: doctor reports leftovers" false \
        "$(jq -r '.checks[] | select(.name == "leftovers") | .ok' <<<"$LAST_OUT")"
    assert_match "forgotten: doctor names the sandbox whose runtime was killed, and prune" \
        "host cgroups or runtime files of 1 sandbox.*$ID.*prune" \
        "$(jq -r '.checks[] | select(.name == "leftovers") | .detail' <<<"$LAST_OUT")"
    assert_exit "prune of the forgotten runtime, at once" 0 sw prune
    assert_nothing_left "a runtime whose sandbox is gone from the store, then prune"
fi
# --- 4. runsc's state and lock of a sandbox the store does not have ------------------------

# Made from a real sandbox's state file, as a runsc killed after it wrote it
# leaves one: another id throughout, still "creating", its processes gone.
REAL="$(sw_create --template base)"
if [[ -n "$REAL" ]]; then
    GHOST="sw-$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    echo "$GHOST" >>"$IDS"
    true &
    dead=$!
    wait "$dead"
    base="$STATE/runsc/${GHOST}_sandbox:$GHOST"
    sed "s/$REAL/$GHOST/g" "$STATE/runsc/${REAL}_sandbox:$REAL.state" |
        jq -c --argjson pid "$dead" '.status = "creating" | .sandbox.pid = $pid | .goferPid = $pid' \
            >"$base.state"
    : >"$base.lock"
    assert_exit "rm of the real sandbox" 0 sw rm "$REAL"
    capture sw doctor --json
    assert_eq "ghost state: doctor reports leftovers" false \
        "$(jq -r '.checks[] | select(.name == "leftovers") | .ok' <<<"$LAST_OUT")"
    assert_match "ghost state: doctor names the sandbox, and prune" \
        "runtime files of 1 sandbox.*$GHOST.*prune" \
        "$(jq -r '.checks[] | select(.name == "leftovers") | .detail' <<<"$LAST_OUT")"
    # A runsc holding the lock is alive and owns them.
    python3 -c 'import fcntl, sys, time
f = open(sys.argv[1], "a")
fcntl.flock(f, fcntl.LOCK_EX)
time.sleep(600)' "$base.lock" &
    holder=$!
    wait_for 5 bash -c '! flock -n "$1" true' _ "$base.lock"
    assert_exit "prune while a runsc holds the lock" 0 sw prune
    assert_true "... leaves the state" test -e "$base.state"
    assert_true "... and the lock" test -e "$base.lock"
    kill "$holder" 2>/dev/null
    wait "$holder" 2>/dev/null
    assert_exit "prune once nothing holds it" 0 sw prune
    assert_true "... removes the state" test ! -e "$base.state"
    assert_true "... and the lock" test ! -e "$base.lock"
    assert_nothing_left "runsc state of a sandbox the store does not have, then prune"
fi
assert_no_leftovers "end"

finish
