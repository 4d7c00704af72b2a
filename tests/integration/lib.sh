# Shared helpers for the integration tests (sourced, never run by ctest).
#
# Each test script: source this file, call `sw_setup`, make assertions, end with
# `finish`. sw_setup gives the script its own state directory ($STATE, exported
# as SANDWEAVE_STATE_DIR) and an EXIT trap that removes every sandbox made there,
# unmounts leftovers, kills leftover runsc processes and deletes the directory,
# also when the script fails or is interrupted.
#
# Environment (set by tests/CMakeLists.txt): SANDWEAVE (the binary under test),
# SANDWEAVE_SOURCE_DIR, SANDWEAVE_BUILD_DIR.

set -uo pipefail

: "${SANDWEAVE:?SANDWEAVE must name the sandweave binary under test}"
SW="$SANDWEAVE"
TEST_NAME="$(basename "${BASH_SOURCE[1]:-$0}" .sh)"

_passed=0
_failed=0
_finished=0
STATE=""
SCRATCH=""
LAST_OUT="" LAST_ERR="" LAST_RC=0

pass() { _passed=$((_passed + 1)); printf 'PASS %s\n' "$1"; }
fail() {
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

assert_true() {  # NAME COMMAND... (passes when the command succeeds)
    local name="$1"
    shift
    if "$@"; then pass "$name"; else fail "$name" "command failed: $*"; fi
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

sw_cleanup() {
    set +e
    [[ -n "$STATE" && -d "$STATE" ]] || return 0
    local d id rb
    rb="$(runsc_bin)"
    for d in "$STATE"/sandboxes/sw-*; do
        [[ -d "$d" ]] || continue
        id="$(basename "$d")"
        timeout 60 "$SW" rm "$id" >/dev/null 2>&1 </dev/null
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
    for m in $( (mounts_under "$STATE"; [[ -n "$SCRATCH" ]] && mounts_under "$SCRATCH") | sort -r); do
        umount -l "$m" 2>/dev/null
    done
    rm -rf "$STATE" "$SCRATCH"
}

_on_exit() {
    local rc=$?
    sw_cleanup
    if ((_finished == 0)); then
        fail "$TEST_NAME ended early (status $rc) before finish"
        printf '%s: %d passed, %d failed\n' "$TEST_NAME" "$_passed" "$_failed"
        exit 1
    fi
}

# Gives the script its own state directory and the cleanup trap.
sw_setup() {
    command -v jq >/dev/null || { echo "$TEST_NAME: jq is needed (apt-get install jq)" >&2; exit 1; }
    [[ -x "$SW" ]] || { echo "$TEST_NAME: $SW is not executable" >&2; exit 1; }
    STATE="$(mktemp -d "${TMPDIR:-/tmp}/sw-it-$TEST_NAME.XXXXXX")"
    SCRATCH="$(mktemp -d "${TMPDIR:-/tmp}/sw-it-scratch-$TEST_NAME.XXXXXX")"
    export SANDWEAVE_STATE_DIR="$STATE"
    trap _on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# Prints the summary and exits non-zero on any failure.
finish() {
    _finished=1
    if [[ -s "$SCRATCH/subshell-failures" ]]; then
        _failed=$((_failed + $(wc -l <"$SCRATCH/subshell-failures")))
    fi
    printf '%s: %d passed, %d failed\n' "$TEST_NAME" "$_passed" "$_failed"
    ((_failed == 0))
    exit $?
}
