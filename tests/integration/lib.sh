# Shared helpers for the integration tests (sourced, never run by ctest).
#
# Each test script: source this file, call `sw_setup` (or `test_setup`), make
# assertions, end with `finish`.
#
# sw_setup gives the script its own state directory ($STATE, exported as
# SANDWEAVE_STATE_DIR) and an EXIT trap that removes every sandbox made there,
# unmounts leftovers, kills leftover runsc processes and deletes the directory,
# also when the script fails or is interrupted. Scripts that keep their own
# state (a bare runsc root, a persistent image cache) call test_setup instead
# and register their own cleanup with on_cleanup. Both give a scratch
# directory, $SCRATCH, removed at exit.
#
# Environment (set by tests/CMakeLists.txt): SANDWEAVE (the binary under test),
# SANDWEAVE_SOURCE_DIR, SANDWEAVE_BUILD_DIR, SANDWEAVE_TEST_HELPERS (the helper
# programs of tests/helpers/, see require_helpers).
#
# Exit status: 0 when every assertion passed, 1 otherwise, 77 when the test
# cannot run on this machine (skip; ctest reports it as skipped), 2 when the
# environment above is missing.

set -uo pipefail

TEST_NAME="$(basename "${BASH_SOURCE[1]:-$0}" .sh)"

# Each VARIABLE must be set (ctest sets them). Run by hand without them, a test
# stops with one clear line, not a confusing failure later.
require_env() {  # VARIABLE...
    local v
    for v in "$@"; do
        if [[ -z "${!v:-}" ]]; then
            printf '%s: %s is not set (run the test through ctest: cd build && ctest -R %s)\n' \
                "$TEST_NAME" "$v" "$TEST_NAME" >&2
            exit 2
        fi
    done
}
require_env SANDWEAVE SANDWEAVE_SOURCE_DIR SANDWEAVE_BUILD_DIR
SW="$SANDWEAVE"

_passed=0
_failed=0
_skipped=0
_finished=0
_seq=0
_t0=$SECONDS
_cleanups=()
STATE=""
SCRATCH=""
HELPERS=""
LAST_OUT="" LAST_ERR="" LAST_RC=0

# After `capture` of the one-machine Slurm cluster's start (scripts/weave-*.sh):
# pass NAME when it started; skip (77) when a Slurm package is still missing,
# since the start could not install it; fail otherwise.
slurm_started_or_skip() {  # NAME
    if ((LAST_RC != 0)); then
        local pkg
        for pkg in slurmctld slurmd slurm-client munge; do
            dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
                skip "Slurm cannot be installed here ($pkg): $LAST_ERR"
        done
        fatal "$1" "exit $LAST_RC" "$LAST_ERR"
    fi
    pass "$1"
}

# Stops a one-machine Weave (scripts/weave-controller.sh) in DIR whose
# controller listens on PORT: the workers' sandboxes first (they are the
# workers' children, not Slurm's), then the controller and the cluster.
weave_stop() {  # DIR PORT
    local d
    for d in "$1"/workers/*/state; do
        [[ -d "$d" ]] && env -u SANDWEAVE_HOST "$SW" --state-dir "$d" rm -f --all >/dev/null 2>&1
    done
    env -u SANDWEAVE_HOST "$SANDWEAVE_SOURCE_DIR/scripts/weave-controller.sh" --dir "$1" \
        --port "$2" --sandweave "$SW" stop >/dev/null 2>&1
}

# Slurm's tools with the cluster's configuration in $DIR, not exported:
# `weave-cluster.sh stop` ends every process that carries it.
weave_slurm_tools() {
    squeue() { SLURM_CONF="$DIR/etc/slurm.conf" command squeue "$@"; }
    salloc() { SLURM_CONF="$DIR/etc/slurm.conf" command salloc "$@"; }
    scancel() { SLURM_CONF="$DIR/etc/slurm.conf" command scancel "$@"; }
}

# Takes up to COUNT sandbox slots (on NODE, when given) with allocations of no
# sandbox named NAME, and appends their job ids to FILLERS. All at once: each
# salloc waits about 3 s for its allocation's prolog (PrologFlags=contain;
# salloc polls it every 3 s), and one that finds no slot gives up after 2 s.
slurm_fill() {  # COUNT NAME [NODE]
    local out i pids=() node=()
    (($1 > 0)) || return 0
    out="$(mktemp -d "$SCRATCH/fill.XXXXXX")"
    [[ -n "${3:-}" ]] && node=(-w "$3")
    for ((i = 0; i < $1; i++)); do
        salloc --no-shell --gres=sbx:1 -n1 "${node[@]}" --immediate=2 -J "$2" >"$out/$i" 2>&1 &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
    FILLERS+=($(cat "$out"/* | sed -n 's/.*Granted job allocation \([0-9]*\).*/\1/p'))
    rm -rf "$out"
}

# The one-machine Weave (scripts/weave-controller.sh) in DIR=$SCRATCH/NAME, its controller on
# 127.0.0.1:PORT and Slurm's daemons from PORT_BASE, so Weave tests can run
# side by side: defines CTL, DIR, PORT, ctl (its commands), Slurm's tools
# (weave_slurm_tools) and ctl_stop (run
# at cleanup): the workers' sandboxes first (they are the workers' children,
# not Slurm's), then the controller and the cluster.
weave_setup() {  # NAME PORT PORT_BASE
    require_root "Slurm's daemons start job steps as their users; runsc"
    require_cmd jq ss
    test_setup
    CTL="$SANDWEAVE_SOURCE_DIR/scripts/weave-controller.sh"
    chmod 0711 "$SCRATCH"  # munged wants every directory above its socket searchable
    DIR="$SCRATCH/$1" PORT="$2" _weave_port_base="$3"
    ctl() { "$CTL" --dir "$DIR" --port "$PORT" --port-base "$_weave_port_base" --sandweave "$SW" "$@"; }
    ctl_stop() { weave_stop "$DIR" "$PORT"; }
    on_cleanup ctl_stop
    weave_slurm_tools
}

# Stops the controller (not the cluster) and waits until it is gone, not only
# its port: it closes its sandboxes' connections after it stops listening, and
# a start meanwhile would find it still running.
weave_controller_kill() {
    local pid
    pid="$(cat "$DIR/run/controller.pid")"
    kill -TERM "$pid"
    wait_for 30 bash -c "! kill -0 $pid 2>/dev/null"
}

# --- assertions -------------------------------------------------------------------
# Every check ends in pass or fail. A failure prints FAIL NAME and, indented,
# what was expected and what happened.

pass() { _passed=$((_passed + 1)); printf 'PASS %s\n' "$1"; }
fail() {  # NAME [DETAIL...]
    _failed=$((_failed + 1))
    # A failure inside $(...) runs in a subshell: record it where finish() sees it.
    if [[ "$BASHPID" != "$$" && -n "$SCRATCH" ]]; then echo "$1" >>"$SCRATCH/subshell-failures"; fi
    printf 'FAIL %s\n' "$1" >&2
    shift
    local line
    for line in "$@"; do printf '     %s\n' "$line" >&2; done
}

# Shows a value on one line, with control characters visible.
_shown() { printf '%q' "$1"; }

assert_eq() {  # NAME EXPECTED ACTUAL
    if [[ "$2" == "$3" ]]; then pass "$1"; else fail "$1" "expected: $(_shown "$2")" "actual:   $(_shown "$3")"; fi
}

assert_ne() {  # NAME UNEXPECTED ACTUAL
    if [[ "$2" != "$3" ]]; then pass "$1"; else fail "$1" "expected anything but: $(_shown "$2")"; fi
}

assert_match() {  # NAME EXTENDED_REGEX ACTUAL
    if [[ "$3" =~ $2 ]]; then pass "$1"; else fail "$1" "expected to match: $2" "actual: $(_shown "$3")"; fi
}

assert_no_match() {  # NAME EXTENDED_REGEX ACTUAL
    if [[ ! "$3" =~ $2 ]]; then pass "$1"; else fail "$1" "expected not to match: $2" "actual: $(_shown "$3")"; fi
}

# Passes when COMMAND... succeeds. Its output (stdout and stderr) is kept and
# shown only on failure, with its exit status; stdin is left alone. It runs in
# a subshell: a predicate that trips `set -u` or calls exit fails this check
# instead of ending the script (its variable assignments do not persist).
assert_true() {  # NAME COMMAND...
    local __at_name="$1" __at_out __at_rc
    shift
    _seq=$((_seq + 1))
    __at_out="${SCRATCH:-${TMPDIR:-/tmp}}/.assert_true.$BASHPID.$_seq"
    ("$@") >"$__at_out" 2>&1
    __at_rc=$?
    if ((__at_rc == 0)); then
        pass "$__at_name"
    else
        local __at_lines=()
        mapfile -t __at_lines < <(tail -n 20 "$__at_out")
        fail "$__at_name" "command failed (exit $__at_rc): $*" "${__at_lines[@]/#/| }"
    fi
    rm -f "$__at_out"
}

# Runs COMMAND..., keeping stdout, stderr and the exit status in LAST_OUT,
# LAST_ERR and LAST_RC (stdout/stderr without their final newline, like $(...)).
capture() {
    local out="$SCRATCH/capture.out" err="$SCRATCH/capture.err"
    "$@" >"$out" 2>"$err" </dev/null
    LAST_RC=$?
    LAST_OUT="$(cat "$out")"
    LAST_ERR="$(cat "$err")"
    rm -f "$out" "$err"
    return 0
}

assert_exit() {  # NAME EXPECTED_STATUS COMMAND...  (also captures, see capture)
    local name="$1" want="$2"
    shift 2
    capture "$@"
    if [[ "$LAST_RC" == "$want" ]]; then
        pass "$name"
    else
        fail "$name" "expected exit $want, got $LAST_RC: $*" "stdout: $(_shown "$LAST_OUT")" \
            "stderr: $(_shown "$LAST_ERR")"
    fi
}

# Lines in a string ("" has none).
line_count() { if [[ -z "$1" ]]; then echo 0; else printf '%s\n' "$1" | wc -l | tr -d ' '; fi; }

# Waits up to SECONDS for COMMAND... to succeed; returns its last status.
# COMMAND is re-run each time: pass a function, not "$(...)" (expanded once).
wait_for() {  # SECONDS COMMAND...
    local deadline=$((SECONDS + $1))
    shift
    while true; do
        "$@" && return 0
        ((SECONDS >= deadline)) && return 1
        sleep 0.1
    done
}

# Records a failure and ends the test now (for a check nothing after it can
# do without).
fatal() {  # NAME [DETAIL...]
    fail "$@"
    finish
}

# Ends the test as skipped (exit 77): this machine cannot run it. Only for a
# missing privilege or tool, never for a failure of the code under test; a test
# that already failed a check is not skipped, it fails.
skip() {  # REASON
    if ((_failed > 0)) || [[ -s "${SCRATCH:-/nonexistent}/subshell-failures" ]]; then
        fail "cannot go on: $1"
        finish
    fi
    printf 'SKIP %s: %s\n' "$TEST_NAME" "$1"
    _finished=1
    exit 77
}

# Notes that one part of the test could not run here (the rest goes on); the
# summary counts it.
skipped() {  # REASON
    _skipped=$((_skipped + 1))
    printf 'SKIP %s\n' "$1"
}

require_root() {  # WHY
    [[ "$(id -u)" == 0 ]] || skip "needs root (${1:-runsc})"
}

require_cmd() {  # COMMAND...: each must be installed
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null || skip "$c is not installed"
    done
}

# The helper programs of tests/helpers/, built (C) or copied (scripts) by
# tests/CMakeLists.txt into $SANDWEAVE_TEST_HELPERS; sets HELPERS to that
# directory. A missing helper is a broken build, so a failure, not a skip.
require_helpers() {  # NAME...
    require_env SANDWEAVE_TEST_HELPERS
    HELPERS="$SANDWEAVE_TEST_HELPERS"
    local h
    for h in "$@"; do
        [[ -x "$HELPERS/$h" ]] || fatal "helper $h is built" "$HELPERS/$h is missing (cmake --build build)"
    done
}

# --- guest probe results ----------------------------------------------------------
# A probe script (tests/helpers/hidepid_probe_*.sh) prints one line per
# observation, "NAME|EXIT STATUS|OUTPUT" (output on one line); a test keeps
# them in PROBE and checks them with probe_expect and probe_listed.
PROBE=""

probe_rc() { printf '%s\n' "$PROBE" | awk -F'|' -v n="$1" '$1 == n { print $2; exit }'; }
probe_out() {
    printf '%s\n' "$PROBE" | awk -v n="$1" 'index($0, n "|") == 1 { sub("^[^|]*[|][^|]*[|]", ""); print; exit }'
}

# probe_expect LABEL NAME WANT. WANT is one of
#   ok          exit 0
#   ok:TEXT     exit 0, output contains TEXT
#   is:TEXT     exit 0, output is exactly TEXT
#   fail        exit != 0
#   fail:TEXT   exit != 0, output is exactly TEXT ("fail:" means no output)
#   EPERM, ENOENT, EACCES   exit != 0, output contains that error's message
probe_expect() {
    local label="$1" name="$2" want="$3" rc out msg=""
    rc="$(probe_rc "$name")"
    out="$(probe_out "$name")"
    if [[ -z "$rc" ]]; then
        fail "$label: $name -> $want" "no result for $name from the probe"
        return
    fi
    case "$want" in
        EPERM) msg="Operation not permitted" ;;
        ENOENT) msg="No such file or directory" ;;
        EACCES) msg="Permission denied" ;;
    esac
    if case "$want" in
        ok) [[ "$rc" == 0 ]] ;;
        ok:*) [[ "$rc" == 0 && "$out" == *"${want#ok:}"* ]] ;;
        is:*) [[ "$rc" == 0 && "$out" == "${want#is:}" ]] ;;
        fail) [[ "$rc" != 0 ]] ;;
        fail:*) [[ "$rc" != 0 && "$out" == "${want#fail:}" ]] ;;
        EPERM | ENOENT | EACCES) [[ "$rc" != 0 && "$out" == *"$msg"* ]] ;;
        *) false ;;
    esac; then
        pass "$label: $name -> $want"
    else
        fail "$label: $name -> $want" "got exit $rc, output: '$out'"
    fi
}

# probe_listed LABEL NAME PID yes|no: PID is (not) one of the words of NAME's output.
probe_listed() {
    local label="$1" name="$2" pid="$3" want="$4" out
    out="$(probe_out "$name")"
    if [[ "$(probe_rc "$name")" != 0 ]]; then
        fail "$label: $name: $pid listed=$want" "$name failed (exit $(probe_rc "$name")): '$out'"
        return
    fi
    local got=no
    [[ " $out " == *" $pid "* ]] && got=yes
    if [[ "$got" == "$want" ]]; then
        pass "$label: $name: $pid listed=$want"
    else
        fail "$label: $name: $pid listed=$want" "listed: $got, output: '$out'"
    fi
}

# --- sandweave helpers -----------------------------------------------------------

sw() { "$SW" "$@"; }

# Creates a sandbox (extra args go to create) and prints its id; fails the test
# and returns 1 when create fails.
sw_create() {
    local id
    if ! id="$("$SW" create "$@" 2>"$SCRATCH/create.err" </dev/null)"; then
        fail "create $*" "stderr: $(cat "$SCRATCH/create.err")"
        return 1
    fi
    printf '%s\n' "$id"
}

# The live state of a sandbox as `ls --json` reports it ("" when not listed).
sw_state() { "$SW" ls --json 2>/dev/null | jq -r --arg id "$1" '.[] | select(.id == $id) | .state'; }

# Number of sandboxes `ls --json` lists.
sw_count() { "$SW" ls --json 2>/dev/null | jq 'length'; }

# The runsc binary sandweave would use (for inspecting runsc's own view).
runsc_bin() {
    if [[ -n "${SANDWEAVE_RUNSC:-}" && -x "${SANDWEAVE_RUNSC}" ]]; then echo "$SANDWEAVE_RUNSC"
    elif [[ -x /usr/local/lib/sandweave/runsc ]]; then echo /usr/local/lib/sandweave/runsc
    else command -v runsc; fi
}

# Host pid of a sandbox's runsc sandbox process (runsc state).
runsc_pid() { "$(runsc_bin)" --root "$STATE/runsc" state "$1" 2>/dev/null | jq -r '.pid // empty'; }

# SIGKILLs sandbox $1's runtime process, asserting (label $2) that runsc gave
# its pid, and waits up to 5 s for ls to say failed.
kill_runtime() {  # ID LABEL
    local pid
    pid="$(runsc_pid "$1")"
    assert_match "$2" '^[0-9]+$' "$pid"
    [[ -n "$pid" ]] && kill -9 "$pid"
    wait_for 5 state_is "$1" failed
}

# Mount points at or below DIR (default: the state directory).
mounts_under() {
    local dir="${1:-$STATE}"
    awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo
}

# Host processes whose command line mentions PATTERN (default: the state dir).
procs_matching() { pgrep -af -- "${1:-$STATE}" | grep -v -e '^[0-9]* pgrep ' || true; }

# Predicates for wait_for.
no_mounts_under() { [[ -z "$(mounts_under "$@")" ]]; }
no_procs_matching() { [[ -z "$(procs_matching "$@")" ]]; }
state_is() { [[ "$(sw_state "$1")" == "$2" ]]; }  # ID STATE

# How many episodes of a batch's output folder are finished: OUT/<id>/result.json.
# A killed run's temp folder (.tmp-*) may hold a result.json not yet renamed
# into place; that episode is not finished, and a rerun runs it again.
finished_episodes() {  # OUT
    local f n=0
    for f in "$1"/[!.]*/result.json; do [[ -f "$f" ]] && n=$((n + 1)); done
    echo "$n"
}

# The guest's process list (busybox ps: pid, stat, comm, args).
guest_ps() { "$SW" run "$1" -- ps -o pid,stat,comm,args 2>/dev/null; }

# Asserts that nothing of any sandbox is left in $STATE: ls is empty, no
# sandbox directories, no mounts, no runsc processes. Gives asynchronous
# teardown (gofer exit, lazy unmount) a few seconds.
assert_no_leftovers() {  # LABEL
    local label="$1"
    assert_eq "$label: ls --json is empty" "0" "$(sw_count)"
    local dirs
    dirs="$(find "$STATE/sandboxes" -mindepth 1 -maxdepth 1 2>/dev/null)"
    assert_eq "$label: no sandbox directories left" "" "$dirs"
    wait_for 5 no_mounts_under
    assert_eq "$label: no mounts left under the state dir" "" "$(mounts_under)"
    wait_for 5 no_procs_matching
    assert_eq "$label: no runsc processes left for the state dir" "" "$(procs_matching)"
}

# --- setup and cleanup -----------------------------------------------------------

# Registers FUNCTION to run at exit, before $STATE and $SCRATCH go (the last
# registered runs first): a script's own sandboxes, runsc roots, mounts.
on_cleanup() { _cleanups+=("$1"); }  # FUNCTION

# Removes every sandbox of $STATE and what runsc left behind.
sw_cleanup() {
    [[ -n "$STATE" && -d "$STATE" ]] || return 0
    local d id rb
    rb="$(runsc_bin)"
    for d in "$STATE"/sandboxes/sw-*; do
        [[ -d "$d" ]] || continue
        id="$(basename "$d")"
        SANDWEAVE_STATE_DIR="$STATE" timeout 60 "$SW" rm "$id" >/dev/null 2>&1 </dev/null
    done
    if [[ -n "$rb" && -d "$STATE/runsc" ]]; then
        for id in $("$rb" --root "$STATE/runsc" list -quiet 2>/dev/null); do
            timeout 30 "$rb" --root "$STATE/runsc" delete --force "$id" >/dev/null 2>&1 </dev/null
        done
    fi
    local pids
    pids="$(pgrep -f -- "$STATE")"
    [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null
    local m
    for m in $(mounts_under "$STATE" | sort -r); do umount -l "$m" 2>/dev/null; done
    rm -rf "$STATE"
}

_on_exit() {
    local rc=$? i m
    set +e
    for ((i = ${#_cleanups[@]} - 1; i >= 0; i--)); do "${_cleanups[i]}"; done
    sw_cleanup
    if [[ -n "$SCRATCH" && -d "$SCRATCH" ]]; then
        for m in $(mounts_under "$SCRATCH" | sort -r); do umount -l "$m" 2>/dev/null; done
    fi
    if ((_finished == 0)); then
        fail "$TEST_NAME ended early (status $rc) before finish"
        _summary
        rm -rf "$SCRATCH"
        exit 1
    fi
    rm -rf "$SCRATCH"
}

# Gives the script a scratch directory ($SCRATCH) and the cleanup trap.
test_setup() {
    SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/sw-it-scratch-$TEST_NAME.XXXXXX")"
    trap _on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Gives the script its own state directory, a scratch directory and the cleanup trap.
sw_setup() {
    require_cmd jq
    [[ -x "$SW" ]] || { echo "$TEST_NAME: $SW is not executable" >&2; exit 1; }
    test_setup
    STATE="$(mktemp -d "${TMPDIR:-/tmp}/sw-it-$TEST_NAME.XXXXXX")"
    export SANDWEAVE_STATE_DIR="$STATE"
}

_summary() {
    local skipped=""
    ((_skipped > 0)) && skipped=", $_skipped skipped"
    printf '%s: %d passed, %d failed%s (%d s)\n' "$TEST_NAME" "$_passed" "$_failed" "$skipped" \
        $((SECONDS - _t0))
}

# Prints the summary and exits non-zero on any failure.
finish() {
    _finished=1
    if [[ -n "$SCRATCH" && -s "$SCRATCH/subshell-failures" ]]; then
        _failed=$((_failed + $(wc -l <"$SCRATCH/subshell-failures")))
    fi
    _summary
    ((_failed == 0))
    exit $?
}
