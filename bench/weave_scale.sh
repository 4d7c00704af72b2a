#!/usr/bin/env bash
# One Weave controller holding many live sandboxes: what each costs on the
# controller's host, how long a controller killed with SIGKILL takes to have
# them all back, and what Slurm's daemons spend per create.
#
# Starts the one-machine Weave (scripts/weave-controller.sh) with NODES
# nodes in a directory of its own, creates SANDBOXES idle audited sandboxes
# (`create --template base --audit`, 16 at a time) through the controller,
# then reads from /proc:
#   - the controller process: RSS, threads, descriptors, before and after;
#   - its children (one `srun` per live sandbox, the relay's): count and PSS;
#   - on the workers: the Slurm step daemons and relays per sandbox (PSS);
#   - CPU time of slurmctld and the slurmd over the creates;
#   - `squeue --json` (what the watcher reads every 1.5 s): size and time.
# Then `kill -9` of the controller, a new one started, and the time until it
# listens with every sandbox adopted (it listens only then), checked with
# `ls` (all running, none unreachable), `run -- true` in ten of them and one
# `audit export` (complete, nothing dropped). Everything is removed at the
# end.
# Usage: bench/weave_scale.sh [SANDBOXES] [NODES]   (defaults 300 and 10;
#        needs root and about 30 MiB of memory per sandbox; SANDBOXES=300
#        takes about five minutes on two CPUs)
# SANDWEAVE_BENCH_PORT and SANDWEAVE_BENCH_PORT_BASE move the controller
# (7763) and Slurm's daemons (17760) away from a cluster already there.
set -euo pipefail
n="${1:-300}"
nodes="${2:-10}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
work="$(mktemp -d /tmp/sw-bench-weave-scale.XXXXXX)"
chmod 0711 "$work"
slots=$(((n + nodes - 1) / nodes + 1))
ctl=("$top/scripts/weave-controller.sh" --dir "$work/cluster" --port "${SANDWEAVE_BENCH_PORT:-7763}"
    --port-base "${SANDWEAVE_BENCH_PORT_BASE:-17760}" --nodes "$nodes" --slots "$slots" --sandweave "$sw")
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # weave_bench_cleanup
cleanup() { weave_bench_cleanup "$work" "$sw" "" "${ctl[@]}"; }
trap cleanup EXIT
say() { printf 'weave_scale: %s\n' "$*" >&2; }
# Each idle sandbox is about 65 host threads with its Slurm steps, srun
# and relay (most of them the sentry's, under ptrace), and every thread
# takes a pid: at the default pid_max (32768) slurmctld
# fails to start a thread at about 500 sandboxes on one host.
if (($(cat /proc/sys/kernel/pid_max) < n * 100)); then
    say "raising kernel.pid_max to 4194304 (threads for $n sandboxes on one host)"
    sysctl -qw kernel.pid_max=4194304
fi
settings="$("${ctl[@]}" start 2>"$work/start.err")" || { cat "$work/start.err" >&2; exit 1; }
eval "$settings"
ctl_pid() { cat "$work/cluster/run/controller.pid"; }
now() { date +%s%N; }

# kB of PSS of the given pids (0 for none).
pss_kb() {
    local p total=0 v
    for p in "$@"; do
        v=$(awk '/^Pss:/ { print $2; exit }' "/proc/$p/smaps_rollup" 2>/dev/null || true)
        total=$((total + ${v:-0}))
    done
    echo "$total"
}
status_field() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
children() { pgrep -P "$1" || true; }
# Processes whose command line starts with $1 (slurmstepd, sandweave __relay).
procs_named() { pgrep -f "^$1" || true; }
cpu_ticks() {  # utime + stime of the given pids, in clock ticks
    local p total=0 s
    for p in "$@"; do
        s=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        s="${s##*) }"
        set -- $s
        total=$((total + ${12} + ${13}))
    done
    echo "$total"
}
slurm_daemons() { cat "$work/cluster/run/ctld/slurmctld.pid" "$work"/cluster/run/slurmd-*.pid 2>/dev/null; }

# Warm up: each worker builds the base image on its first create.
for _ in $(seq "$nodes"); do "$sw" create --template base --audit >>"$work/warm"; done
xargs -r "$sw" rm -f <"$work/warm" >/dev/null

pid=$(ctl_pid)
rss0=$(status_field "$pid" VmRSS); thr0=$(status_field "$pid" Threads); fd0=$(fds "$pid")
ticks0=$(cpu_ticks $(slurm_daemons))
load0="$(cut -d' ' -f1 /proc/loadavg)"
say "creating $n audited sandboxes on $nodes nodes, 16 at a time"
t0=$(now)
seq "$n" | xargs -P 16 -I{} sh -c '"$0" create --template base --audit >>"$1/ids" 2>>"$1/create.err" || echo x >>"$1/failed"' "$sw" "$work"
t1=$(now)
ticks1=$(cpu_ticks $(slurm_daemons))
touch "$work/ids"
made=$(wc -l <"$work/ids")
failed=0
[[ -f "$work/failed" ]] && failed=$(wc -l <"$work/failed")
sleep 2
rss1=$(status_field "$pid" VmRSS); thr1=$(status_field "$pid" Threads); fd1=$(fds "$pid")
mapfile -t kids < <(children "$pid")
kids_pss=$(pss_kb "${kids[@]}")
mapfile -t stepds < <(procs_named slurmstepd)
mapfile -t relays < <(procs_named "$sw __relay")
stepd_pss=$(pss_kb "${stepds[@]}")
relay_pss=$(pss_kb "${relays[@]}")
hz=$(getconf CLK_TCK)
# What the controller's watcher reads every 1.5 s: all jobs, whatever the filter.
sq_bytes=$(SLURM_CONF="$work/cluster/etc/slurm.conf" squeue --json | wc -c)
sq_ms=()
for _ in 1 2 3 4 5; do
    ts=$(now)
    SLURM_CONF="$work/cluster/etc/slurm.conf" squeue --json >/dev/null
    sq_ms+=($((($(now) - ts) / 1000000)))
done
sq_med=$(printf '%s\n' "${sq_ms[@]}" | sort -n | sed -n 3p)

say "kill -9 of the controller (pid $pid), then a new one"
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
t2=$(now)
"${ctl[@]}" start >/dev/null 2>"$work/restart.err" || { cat "$work/restart.err" >&2; exit 1; }
t3=$(now)
ls_json="$("$sw" --json ls)"
back=$(jq '[.[] | select(.state == "running" and ((.error // "") == ""))] | length' <<<"$ls_json")
runs_ok=0
for id in $(shuf -n 10 "$work/ids"); do
    [[ "$("$sw" run "$id" -- echo ok 2>/dev/null)" == ok ]] && runs_ok=$((runs_ok + 1))
done
one=$(head -n 1 "$work/ids")
"$sw" audit export "$one" "$work/one.jsonl" >/dev/null || true
complete=$(jq -r '"complete=\(.complete) dropped=\(.dropped // 0)"' "$work/one.jsonl.status.json")
load1="$(cut -d' ' -f1 /proc/loadavg)"

awk -v n="$made" -v want="$n" -v f="$failed" -v nodes="$nodes" -v l0="$load0" -v l1="$load1" \
    -v ns=$((t1 - t0)) -v rns=$((t3 - t2)) -v rss0="$rss0" -v rss1="$rss1" -v thr0="$thr0" -v thr1="$thr1" \
    -v fd0="$fd0" -v fd1="$fd1" -v kids="${#kids[@]}" -v kpss="$kids_pss" -v stepds="${#stepds[@]}" \
    -v spss="$stepd_pss" -v relays="${#relays[@]}" -v rpss="$relay_pss" -v tk=$((ticks1 - ticks0)) -v hz="$hz" \
    -v back="$back" -v runs="$runs_ok" -v complete="$complete" -v sqb="$sq_bytes" -v sqms="$sq_med" 'BEGIN {
    printf "load %s -> %s; %d of %d audited sandboxes created on %d nodes (%d failed) in %.1f s: %.2f creates/s at concurrency 16\n", l0, l1, n, want, nodes, f, ns / 1e9, n / (ns / 1e9)
    printf "controller process: RSS %d -> %d kB (%.1f KiB per sandbox), threads %d -> %d, descriptors %d -> %d\n", rss0, rss1, (rss1 - rss0) / n, thr0, thr1, fd0, fd1
    printf "its children: %d processes (srun), PSS %.1f MiB (%.2f MiB per sandbox)\n", kids, kpss / 1024, kpss / 1024 / n
    printf "on the workers: %d slurmstepd, PSS %.1f MiB (%.2f MiB per sandbox); %d relays, PSS %.1f MiB (%.2f MiB per sandbox)\n", stepds, spss / 1024, spss / 1024 / n, relays, rpss / 1024, rpss / 1024 / n
    printf "slurmctld + slurmd CPU over the creates: %.1f ms per create\n", tk * 1000 / hz / n
    printf "squeue --json with %d jobs: %.0f KiB (%.0f bytes per job), %d ms (median of 5)\n", n, sqb / 1024, sqb / n, sqms
    printf "after kill -9: a new controller listening with every sandbox adopted in %.1f s; ls: %d of %d running and reachable; run in 10 of them: %d ok; one export: %s\n", rns / 1e9, back, n, runs, complete
}'
