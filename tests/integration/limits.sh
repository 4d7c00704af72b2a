#!/usr/bin/env bash
# Resource limits hold inside the guest and the sandbox survives them:
# over `pids` a fork fails with EAGAIN, over `memory` one process is OOM-killed
# and ls/inspect show it; limits the runtime cannot enforce in the guest are
# refused at create with exit 5, leaving nothing behind.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup
require_cmd jq

limits_of() { sw inspect "$1" | jq -c "$2"; }
sleeps_in() { sw run "$1" -- ps -o comm | grep -c '^sleep$'; }

# --- pids ------------------------------------------------------------------------
P="$(sw_create --template '{"extends": "base", "resources": {"pids": 50}}')" || finish

# PID 1 (the guest init) and this shell are 2 of the 50 tasks: 48 sleeps fit,
# the next fork is the 51st task and fails. busybox sh stops at a failed fork.
capture sw run "$P" -c 'for i in $(seq 100); do sleep 300 & done; echo all-started'
assert_ne "100 background sleeps do not all start under pids 50" "all-started" "$LAST_OUT"
assert_match "the failing fork reports EAGAIN" "can't fork: Resource temporarily unavailable" "$LAST_ERR"
assert_eq "the sandbox is still running" running "$(sw_state "$P")"
# The last children forked may not have exec'd sleep yet when the next command
# starts (the guest agent starts it in milliseconds): give them a moment.
wait_for 10 sh -c "[ \"\$(\"$SW\" run '$P' -- ps -o comm | grep -c '^sleep\$')\" = 48 ]" || true
assert_eq "the 48 sleeps that fit (tasks 3..50) are alive" 48 "$(sleeps_in "$P")"
assert_eq "inspect shows the pids limit" 50 "$(limits_of "$P" .limits.pids.limit)"
assert_eq "inspect counts init and the 48 sleeps" 49 "$(limits_of "$P" .limits.pids.current)"

# The shell above has exited: one task is free, a shell takes it, its fork is
# again the 51st.
capture sw run "$P" -c 'sleep 1 & wait; echo forked'
assert_match "at the limit a new command's fork fails with EAGAIN" "Resource temporarily unavailable" "$LAST_ERR"
assert_ne "... and the fork did not happen" "forked" "$LAST_OUT"
# Every fork at the limit is refused, not most: the runtime once charged about
# one fork in eight to the wrong cgroup, which let it through.
# (busybox sh exits at a failed fork: one command per try.)
forked=0
for _ in $(seq 40); do
  [[ "$(sw run "$P" -c 'true & wait; echo forked' 2>/dev/null)" == forked ]] && forked=$((forked + 1))
done
assert_eq "... nor does any of 40 more forks at the limit" 0 "$forked"
capture sw run "$P" -- echo alive
assert_eq "a command without forks still runs at the limit" alive "$LAST_OUT"

sw run "$P" -- killall sleep >/dev/null 2>&1
wait_for 10 eval '[[ "$(sleeps_in "$P")" == 0 ]]'
capture sw run "$P" -c 'sleep 0.1 & wait; echo forked'
assert_eq "once processes exit, forks work again" forked "$LAST_OUT"
assert_eq "... in the same sandbox" running "$(sw_state "$P")"

# --- memory ----------------------------------------------------------------------
M="$(sw_create --template '{"extends": "base", "resources": {"memory": "64MiB"}}')" || finish
capture sw run "$M" -- grep MemTotal /proc/meminfo
assert_match "the guest sees its memory limit as its total memory" "^MemTotal: +65536 kB$" "$LAST_OUT"
assert_eq "no OOM kill yet" 0 "$(limits_of "$M" .limits.memory.oom_kills)"

# A 200 MB string in the shell: far past 64 MiB.
capture sw run "$M" -c 'sleep 300 & x=$(head -c 200000000 /dev/zero | tr "\0" a); echo "held ${#x}"'
assert_eq "the process that went past the limit was OOM-killed (SIGKILL, 137)" 137 "$LAST_RC"
assert_eq "the sandbox is still running" running "$(sw_state "$M")"
assert_eq "the process started beside it is alive" 1 "$(sleeps_in "$M")"
assert_eq "inspect records the OOM kill" 1 "$(limits_of "$M" .limits.memory.oom_kills)"
assert_true "inspect records the refused allocation" \
    test "$(limits_of "$M" .limits.memory.failcnt)" -ge 1
assert_eq "inspect shows the memory limit" 67108864 "$(limits_of "$M" .limits.memory.limit)"
capture sw ls --json
assert_eq "ls --json records the OOM kill" 1 \
    "$(jq -r --arg id "$M" '.[] | select(.id == $id) | .limits.memory.oom_kills' <<<"$LAST_OUT")"
capture sw ls
assert_match "ls shows the OOM kill" "$M .*oom-kills=1" "$LAST_OUT"
capture sw run "$M" -c 'x=$(head -c 8000000 /dev/zero | tr "\0" a); echo "held ${#x}"'
assert_eq "memory freed by the killed process can be used again" "held 8000000" "$LAST_OUT"

# The host cgroup holds the guest and the runtime: larger than the guest's limit.
host_limit="$(cat "/sys/fs/cgroup/memory/$M/memory.limit_in_bytes" 2>/dev/null ||
    cat "/sys/fs/cgroup/$M/memory.max" 2>/dev/null)"
assert_eq "the host cgroup is the guest's limit plus 256 MiB for the runtime" \
    $((64 * 1024 * 1024 + 256 * 1024 * 1024)) "$host_limit"

# The counts outlive the runtime: a stopped sandbox still says what happened.
assert_exit "terminate the memory-limited sandbox" 0 sw terminate "$M"
assert_eq "inspect of the stopped sandbox still records the OOM kill" 1 \
    "$(limits_of "$M" .limits.memory.oom_kills)"
assert_true "... and the refused allocations" test "$(limits_of "$M" .limits.memory.failcnt)" -ge 1
capture sw ls
assert_match "ls shows the OOM kill of the stopped sandbox" "$M .*stopped .*oom-kills=1" "$LAST_OUT"

# --- cpus --------------------------------------------------------------------------
C="$(sw_create --template '{"extends": "base", "resources": {"cpus": 0.5}}')" || finish
quota="$(cat "/sys/fs/cgroup/cpu/$C/cpu.cfs_quota_us" 2>/dev/null ||
    cut -d' ' -f1 "/sys/fs/cgroup/$C/cpu.max" 2>/dev/null)"
assert_eq "cpus 0.5 is a 50 ms per 100 ms CPU quota on the sandbox" 50000 "$quota"

# --- a long-lived sandbox does not keep its exited processes ------------------------
# gVisor's procfs cached the /proc/PID directory of every process that looked at
# /proc/self (busybox's start-up reads /proc/self/exe) until 1000 were cached,
# about 80 KiB of the sentry's heap each: 400 commands grew it by ~32 MiB.
# sandweave caps that cache (lib/runtime/bundle.hpp, proc_dentry_cache_limit).
L="$(sw_create)" || finish
capture sw run "$L" -- cat /proc/mounts
assert_match "/proc is mounted with a small dentry cache" " /proc proc [^ ]*dentry_cache_limit=16" "$LAST_OUT"
sentry="$(pgrep -f -- "runsc-sandbox .*--root=$STATE/.* $L\$" | head -1)"
anon_kib() { awk '/^RssAnon:/ {print $2}' "/proc/$sentry/status"; }
churn() { sw run "$L" -c 'i=0; while [ $i -lt 400 ]; do i=$((i+1)); /bin/true; done'; }
if [[ -n "$sentry" ]]; then
    churn
    sleep 5  # the runtime's idle trim returns free heap after two quiet seconds
    before_kib="$(anon_kib)"
    churn
    sleep 5
    after_kib="$(anon_kib)"
    grown=$(((after_kib - before_kib) / 1024))
    assert_true "400 more processes grow the sentry by under 8 MiB (grew $grown MiB: $before_kib -> $after_kib KiB)" \
        test "$grown" -lt 8
else
    fail "the sandbox's sentry process is found" "pgrep found no runsc-sandbox for $L"
fi

# --- refusals ------------------------------------------------------------------------
before="$(sw_count)"
assert_exit "memory below what a sandbox needs: exit 5" 5 \
    sw create --template '{"extends": "base", "resources": {"memory": "1MiB"}}'
assert_match "... with the reason" "resources.memory 1 MiB refused: .*at least 16 MiB" "$LAST_ERR"
assert_exit "cpus below the smallest quota: exit 5" 5 \
    sw create --template '{"extends": "base", "resources": {"cpus": 0.001}}'
assert_match "... with the reason" "resources.cpus 0.001 refused" "$LAST_ERR"
assert_exit "more cpus than the host has: exit 5" 5 \
    sw create --template '{"extends": "base", "resources": {"cpus": 4096}}'
assert_match "... with the reason" "refused: this host has only [0-9]+ CPUs" "$LAST_ERR"
if [[ -x /usr/bin/runsc ]]; then
    assert_exit "pids with a runtime that cannot enforce them in the guest: exit 5" 5 \
        sw --runsc /usr/bin/runsc create --template '{"extends": "base", "resources": {"pids": 50}}'
    assert_match "... with the reason" "resources.pids refused: runtime /usr/bin/runsc cannot enforce it inside the guest" "$LAST_ERR"
    assert_exit "memory with that runtime: exit 5" 5 \
        sw --runsc /usr/bin/runsc create --template '{"extends": "base", "resources": {"memory": "64MiB"}}'
    assert_match "... with the reason" "resources.memory refused" "$LAST_ERR"
fi
assert_eq "a refused create leaves no sandbox" "$before" "$(sw_count)"

finish
