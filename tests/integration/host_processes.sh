#!/usr/bin/env bash
# What a sandbox holds on the host does not grow with the commands it runs.
# Its host cgroup holds the runtime's processes: the sentry, the gofer and,
# on the ptrace platform, a stub process per guest address space. gVisor
# cannot kill a stub safely, so a released one waits in a pool for the next
# address space: the pool grows to the guest's peak number of concurrent
# processes and stays there (docs/design.md, "Resource limits"). So:
#   - after a warm-up, 100 sequential `run -- true` add at most one host
#     process (no per-command leak);
#   - after the guest ran 10 processes at once, 30 more sequential commands
#     reuse those stubs: the count stays at that peak (plus one);
#   - once booted, the sentry's root has no /proc mounted (the helper its
#     first stage forked unmounted it) and that helper is gone: every child
#     of the sentry is a traced stub.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
sw_setup

S=$(sw_create --idle-timeout 1h) || finish
PROCS=""
for f in /sys/fs/cgroup/pids/"$S"/cgroup.procs /sys/fs/cgroup/"$S"/cgroup.procs \
    /sys/fs/cgroup/*/"$S"/cgroup.procs; do
    [[ -r "$f" ]] && { PROCS="$f"; break; }
done
[[ -n "$PROCS" ]] || skip "the runtime made no host cgroup named $S"
procs() { wc -l <"$PROCS" | tr -d ' '; }
tasks() { wc -l <"$(dirname "$PROCS")/tasks" 2>/dev/null | tr -d ' '; }
runs() {  # N: N sequential `run -- true`; prints how many failed
    local i bad=0
    for ((i = 0; i < $1; i++)); do sw run "$S" -- true >/dev/null 2>&1 </dev/null || bad=$((bad + 1)); done
    echo "$bad"
}

SENTRY=$(runsc_pid "$S")
assert_match "runsc names the sentry's pid" '^[0-9]+$' "$SENTRY"
assert_eq "the sentry's root has no /proc mounted" "" \
    "$(awk '$9 == "proc" { print $5 }' "/proc/$SENTRY/mountinfo" 2>&1)"
assert_true "the sentry's root has a mount table at all" grep -q " / / " "/proc/$SENTRY/mountinfo"
# A child of the sentry not stopped under ptrace (state t) would be the
# /proc umounter left behind, or a zombie it never waited for.
untraced=$(ps -o pid=,stat=,comm= --ppid "$SENTRY" | awk '$2 !~ /^t/')
assert_eq "every child of the sentry is a traced stub" "" "$untraced"

assert_eq "20 warm-up runs succeed" 0 "$(runs 20)"
before=$(procs)
assert_eq "100 more runs succeed" 0 "$(runs 100)"
after=$(procs)
echo "host cgroup of $S: $before processes after the warm-up, $after after 100 more runs ($(tasks) tasks)"
assert_true "100 sequential runs add at most 1 host process ($before -> $after)" \
    test "$after" -le $((before + 1))

assert_exit "the guest runs 10 processes at once" 0 \
    sw run "$S" -- sh -c 'for i in 1 2 3 4 5 6 7 8 9 10; do sleep 1 & done; wait'
peak=$(procs)
assert_eq "30 more runs succeed" 0 "$(runs 30)"
later=$(procs)
echo "host cgroup of $S: $peak processes after 10 concurrent guest processes, $later after 30 more runs"
assert_true "after a peak, sequential runs reuse its stubs ($peak -> $later)" \
    test "$later" -le $((peak + 1))

sw rm "$S" >/dev/null
assert_no_leftovers "end"
finish
