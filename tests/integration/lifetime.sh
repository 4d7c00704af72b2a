#!/usr/bin/env bash
# Lifetimes: `--ttl` and `--idle-timeout` (flags, template keys, pool options)
# end a sandbox when they pass, with the final audit barrier first, while no
# sandweave command runs; a running command keeps an idle sandbox alive; ls,
# inspect and the API show the time left.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
sw_setup

left_of() { sw ls --json | jq -r --arg id "$1" '.[] | select(.id == $id) | .time_left'; }
ended_by() { sw inspect "$1" | jq -r '.ended_by // ""'; }
# A watcher holds the sandbox's lifetime.lock: the shim's thread, or a
# `__lifetime` process (the brackets keep the pattern from matching the shell
# that runs pgrep).
has_watcher() {
    local lock="$STATE/sandboxes/$1/lifetime.lock"
    [[ -e "$lock" ]] && ! flock -n "$lock" true
}
no_watcher() { ! has_watcher "$1"; }
has_watcher_process() { pgrep -f -- "[_]_lifetime --state-dir $STATE $1" >/dev/null; }
no_watcher_process() { ! has_watcher_process "$1"; }
shim_of() { pgrep -f -- "[_]_shim .*--companions $STATE $1 "; }
recorded_state_is() { [[ "$(jq -r .state "$STATE/sandboxes/$1/sandbox.json")" == "$2" ]]; }

# --- ttl, with audit: ended by itself, barrier first -------------------------------------
T=$(sw_create --ttl 4s --audit) || fatal "create --ttl"
capture sw ls --json
assert_match "ls --json: time_left.ttl_ms counts down from 4 s" '^[1-4][0-9]{3}$' \
    "$(jq -r --arg id "$T" '.[] | select(.id == $id) | .time_left.ttl_ms' <<<"$LAST_OUT")"
capture sw ls
assert_match "ls: a LEFT column with the time left" "LEFT.*"$'\n'".*$T.* [1-4]s " "$LAST_OUT"
assert_match "inspect: the deadline is recorded" '^[0-9]{13}$' "$(sw inspect "$T" | jq -r .expires_at_ms)"
assert_true "it is watched" has_watcher "$T"
assert_true "its shim watches it: no watcher process of its own" no_watcher_process "$T"
assert_true "the shim was started with the lifetime watcher among its companions" shim_of "$T"
sw run "$T" -- sh -c 'echo x > /tmp/before-ttl' >/dev/null
# Nothing of sandweave runs now; the watcher alone must end it.
assert_true "ttl: stopped within 10 s with no sandweave command running" \
    wait_for 10 recorded_state_is "$T" stopped
assert_eq "ttl: ls says stopped" "stopped" "$(sw_state "$T")"
assert_eq "ttl: inspect says why" "ttl" "$(ended_by "$T")"
assert_exit "ttl: audit export after the ttl is complete (exit 0)" 0 sw audit export "$T" "$SCRATCH/ttl.jsonl"
assert_true "ttl: the export covers the command (barrier before the stop)" \
    grep -q '/tmp/before-ttl' "$SCRATCH/ttl.jsonl"
assert_true "ttl: the watcher exited" wait_for 5 no_watcher "$T"
assert_true "ttl: no watcher process left" wait_for 5 no_watcher_process "$T"
assert_eq "ttl: no mounts left" "" "$(mounts_under "$STATE/sandboxes/$T")"

# --- idle timeout: a running command keeps it alive, activity resets it ---------------------
I=$(sw_create --idle-timeout 3s) || fatal "create --idle-timeout"
assert_match "idle: time_left.idle_ms" '^[1-3][0-9]{3}$' "$(left_of "$I" | jq -r .idle_ms)"
# A command longer than the idle timeout: the sandbox must not end under it.
assert_exit "idle: a 5 s command in a 3 s idle sandbox completes" 0 sw run "$I" -- sleep 5
assert_eq "idle: still running right after the command" "running" "$(sw_state "$I")"
(sw run "$I" -- sleep 2 >/dev/null 2>&1 &)
busy_is() { [[ "$(left_of "$I" | jq -r .busy)" == "$1" ]]; }
assert_true "idle: ls says busy while a command runs" wait_for 2 busy_is true
sleep 2
assert_true "idle: stopped about 3 s after the last command" \
    wait_for 8 recorded_state_is "$I" stopped
assert_eq "idle: inspect says why" "idle_timeout" "$(ended_by "$I")"
assert_exit "idle: run on it now: the sandbox is not running (exit 125)" 125 sw run "$I" -- true
assert_match "idle: the error says stopped" "not running \(stopped\)" "$LAST_ERR"

# --- template keys, precedence, bad values ----------------------------------------------
capture sw template show '{"extends": "base", "ttl": "10m", "idle_timeout": "90s"}' --json
assert_eq "template keys: ttl shown" '"10m"' "$(jq -c .resolved.ttl <<<"$LAST_OUT")"
Y=$(sw_create --template '{"extends": "base", "ttl": "1h", "idle_timeout": "30m"}' --ttl 2h) || fatal "template ttl"
assert_eq "a flag beats the template's ttl" "7200000" "$(sw inspect "$Y" | jq .spec.lifetime.ttl_ms)"
assert_eq "the template's idle_timeout applies" "1800000" "$(sw inspect "$Y" | jq .spec.lifetime.idle_timeout_ms)"
assert_eq "origin of ttl: flag" "flag" "$(sw inspect "$Y" | jq -r '.spec.origin["/ttl"]')"
assert_exit "--ttl abc: exit 2" 2 sw create --ttl abc
assert_match "--ttl abc: one line naming the flag" "^[^"$'\n'"]*--ttl 'abc'[^"$'\n'"]*$" "$LAST_ERR"
assert_exit "template ttl: 5 parsecs: exit 2" 2 sw create --template '{"extends": "base", "ttl": "5 parsecs"}'
assert_match "template ttl: names the key" "ttl.*duration" "$LAST_ERR"
N=$(sw_create) || fatal "create without a lifetime"
assert_eq "no lifetime: no time_left" "null" "$(left_of "$N")"
assert_true "no lifetime: no watcher" no_watcher "$N"

# A shim killed by accident takes its watcher along: the next ls starts a
# watcher process instead, and one killed in turn is replaced by the next ls.
assert_true "before the kill: Y is watched by its shim" has_watcher "$Y"
pkill -KILL -f -- "[_]_shim .*--companions $STATE $Y "
assert_true "a killed shim's watcher is gone with it" wait_for 5 no_watcher "$Y"
sw ls >/dev/null
assert_true "ls starts a watcher process in the killed shim's place" wait_for 5 has_watcher_process "$Y"
pkill -KILL -f -- "__lifetime --state-dir $STATE $Y"
# Its lock goes with the process: until then an ls sees it watched.
wait_for 5 no_watcher "$Y" || true
sw ls >/dev/null
assert_true "a killed watcher is started again by ls" wait_for 5 has_watcher_process "$Y"
assert_true "the new watcher holds the lock" has_watcher "$Y"
assert_exit "rm of a watched sandbox" 0 sw rm "$Y"
assert_true "rm: its watcher exits" wait_for 5 no_watcher_process "$Y"

# --- pools: the clock starts at acquire ----------------------------------------------------
assert_exit "pool create --ttl 3s --size 1" 0 sw pool create lp --size 1 --ttl 3s
sleep 4
M=$(sw pool acquire lp) || fatal "acquire"
assert_eq "pool: a warm member did not age while idle" "running" "$(sw_state "$M")"
assert_true "pool: the acquired member ends 3 s after acquire" \
    wait_for 10 recorded_state_is "$M" stopped
assert_exit "pool rm" 0 sw pool rm lp

sw rm --all >/dev/null 2>&1
assert_no_leftovers "after the lifetime tests"
finish
