#!/usr/bin/env bash
# Audit overhead on syscall-heavy guest workloads: the same
# `sandweave run` in an audited and in a non-audited sandbox, REPS times each
# (interleaved), medians and the ratio audit/no-audit. A figure is only valid
# when the audited runs lost nothing: the dropped count of the export (and the
# sentry's own count per rep, from `runsc trace list`) must be 0.
#
# Workloads (each at least 100,000 events with the defaults):
#   dd    /bin/dd if=/dev/zero of=/dev/null bs=1 count=$DD_COUNT   (2 syscalls per byte)
#   walk  ls -lR of a tree of 5,000 files, $WALK_LOOPS times in one shell
#         (getdents64, a stat and an xattr lookup per file: ~10k events a pass)
#
# A/B: with SANDWEAVE_B (another sandweave binary) and/or SANDWEAVE_RUNSC_B
# (another runtime), each workload also gets an audited sandbox made by that
# binary with that runtime, run in the same reps (the order rotates), and a
# second row "W/B" against the same plain sandbox: two builds compared on
# the same load, which separate runs on a shared machine cannot do.
#
# Usage: bench/audit_overhead.sh [REPS]   (default 5; needs root and a built tree)
# Env:   SANDWEAVE (binary), SANDWEAVE_RUNSC (the runtime, e.g. one built with
#        runtime/audit-sink.patch into SANDWEAVE_RUNTIME_DIR), DD_COUNT
#        (default 100000), WALK_LOOPS (default 12), WORKLOADS (default
#        "dd walk"), SANDWEAVE_B, SANDWEAVE_RUNSC_B, WRITER_CPUS
#
# Where the cost goes: each row also splits the audited CPU into the
# sandbox's own (sandbox_cpu: its cgroup against the plain sandbox's, i.e.
# the sentry's point collection and sending) and the writer's (writer_us:
# its CPU per event written). With WRITER_CPUS (a taskset list, e.g. 1)
# every audit writer thread runs on those CPUs: run the bench pinned
# elsewhere (taskset -c 0 ...) and the wall ratio is what a guest notices on
# a host with a spare core for the writer.
set -uo pipefail

reps=${1:-5}
dd_count=${DD_COUNT:-100000}
walk_loops=${WALK_LOOPS:-12}
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
sw=${SANDWEAVE:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build/sandweave}
[ -x "$sw" ] || sw=$top/build/sandweave
workloads=${WORKLOADS:-dd walk}
ab=
if [ -n "${SANDWEAVE_B:-}${SANDWEAVE_RUNSC_B:-}" ]; then
    ab=1
    sw_b=${SANDWEAVE_B:-$sw}
    runsc_b=${SANDWEAVE_RUNSC_B:-${SANDWEAVE_RUNSC:-}}
fi
if [ "$(id -u)" != 0 ] || [ ! -x "$sw" ] || ! command -v jq >/dev/null; then
    echo "audit_overhead: needs root, jq and a built sandweave (SANDWEAVE=$sw)" >&2
    exit 1
fi

# CPU figures: wall time on a shared machine moves with other people's load,
# CPU time much less. Per run: the sandbox's cgroup (sentry, gofer, the
# guest's stub processes: cpuacct.usage) plus, audited, the writer's own
# CPU until it has written everything (settle).
cg_ns() { cat "/sys/fs/cgroup/cpuacct/$1/cpuacct.usage" 2>/dev/null || echo 0; }
# The writer's CPU in ns: the run time of each of its threads (schedstat, in
# ns; utime+stime would be in 10 ms ticks). Not awk's %d, which mawk, Debian's
# awk, clamps at 2^31: past 2.1 s of writer CPU every later rep read 0.
writer_ns() { # id
    local pid
    pid=$(jq -r .pid "$state/sandboxes/$1/audit/writer-state.json" 2>/dev/null)
    cat "/proc/$pid/task/"*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f", s}'
}

# Short: the writer's sink socket path must stay under 100 bytes.
state=$(mktemp -d /tmp/swb.XXXXXX)
export SANDWEAVE_STATE_DIR=$state
unset SANDWEAVE_HOST
out=$(mktemp -d /tmp/swbo.XXXXXX)
cleanup() {
    local d
    for d in "$state"/sandboxes/*/; do
        [ -d "$d" ] && "$sw" rm "$(basename "$d")" >/dev/null 2>&1
    done
    rm -rf "$state" "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now_ns() { date +%s%N; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio
ms() { awk -v ns="$1" 'BEGIN {printf "%.0f", ns/1e6}'; }
sentry_dropped() { # id -> the sentry's cumulative dropped count for the sink
    local r
    r=$(jq -r .runsc "$state/sandboxes/$1/sandbox.json")
    "$r" --root "$state/runsc" trace list "$1" 2>/dev/null | sed -n 's/.*Sink: "remote", dropped: \([0-9]*\).*/\1/p'
}
# The guest does not wait for audit disk writes: before the next timed run,
# let the writer catch up so it does not steal CPU from it.
settle() { # id
    local prev=-1 cur i
    for i in $(seq 1 200); do
        cur=$("$sw" --json audit status "$1" 2>/dev/null | jq -r '.counters.written_sequence // 0')
        [ "$cur" = "$prev" ] && return
        prev=$cur
        sleep 0.2
    done
}
workload() { # name -> argv
    case $1 in
        dd) echo /bin/dd if=/dev/zero of=/dev/null bs=1 "count=$dd_count" ;;
        walk) echo /bin/sh -c "i=0; while [ \$i -lt $walk_loops ]; do ls -lR /tmp/tree >/dev/null; i=\$((i+1)); done" ;;
    esac
}
run_timed() { # id workload [binary] -> ns on stdout
    local t0 t1 rc b=${3:-$sw}
    t0=$(now_ns)
    case $2 in
        dd) "$b" run "$1" -- /bin/dd if=/dev/zero of=/dev/null bs=1 "count=$dd_count" >/dev/null 2>&1 ;;
        walk) "$b" run "$1" -c "i=0; while [ \$i -lt $walk_loops ]; do ls -lR /tmp/tree >/dev/null; i=\$((i+1)); done" >/dev/null 2>&1 ;;
    esac
    rc=$?
    t1=$(now_ns)
    if [ $rc != 0 ]; then
        echo "audit_overhead: workload $2 failed in $1 (exit $rc)" >&2
        exit 1
    fi
    echo $((t1 - t0))
}

echo "audit_overhead: $reps reps; dd count=$dd_count, walk = ls -lR of 5000 files x $walk_loops; runsc ${SANDWEAVE_RUNSC:-default}${ab:+; B: $sw_b, runsc ${runsc_b:-default}}; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$sw" image build base >/dev/null 2>&1
plain=$("$sw" create --template base --no-audit) || exit 1
# Keys: a workload (binary A) and, A/B, "workload/B".
declare -A aud bin
keys=()
for w in $workloads; do
    aud[$w]=$("$sw" create --template base --audit) || exit 1
    bin[$w]=$sw
    keys+=("$w")
    if [ -n "$ab" ]; then
        aud[$w/B]=$(SANDWEAVE_RUNSC=$runsc_b "$sw_b" create --template base --audit) || exit 1
        bin[$w/B]=$sw_b
        keys+=("$w/B")
    fi
done
# The walk's tree and a warm-up (page cache, first exec) in every sandbox, not timed.
"$sw" run "$plain" -c 'mkdir -p /tmp/tree && cd /tmp/tree && for d in 1 2 3 4 5 6 7 8 9 10; do mkdir -p $d && (cd $d && seq 1 500 | xargs touch); done; ls -lR /tmp/tree >/dev/null' >/dev/null 2>&1
for k in "${keys[@]}"; do
    "${bin[$k]}" run "${aud[$k]}" -c 'mkdir -p /tmp/tree && cd /tmp/tree && for d in 1 2 3 4 5 6 7 8 9 10; do mkdir -p $d && (cd $d && seq 1 500 | xargs touch); done; ls -lR /tmp/tree >/dev/null' >/dev/null 2>&1
done
if [ -n "${WRITER_CPUS:-}" ]; then
    for k in "${keys[@]}"; do
        pid=$(jq -r .pid "$state/sandboxes/${aud[$k]}/audit/writer-state.json")
        taskset -a -p -c "$WRITER_CPUS" "$pid" >/dev/null || exit 1
    done
fi
declare -A events0
for k in "${keys[@]}"; do
    settle "${aud[$k]}"
    events0[$k]=$("$sw" --json audit status "${aud[$k]}" 2>/dev/null | jq -r '.counters.written_events // 0')
done

declare -A t_off t_on c_off c_on g_on w_on drops_rep
for w in $workloads; do t_off[$w]=""; c_off[$w]=""; done
for k in "${keys[@]}"; do t_on[$k]=""; c_on[$k]=""; g_on[$k]=""; w_on[$k]=""; drops_rep[$k]=0; done
for i in $(seq 1 "$reps"); do
    for w in $workloads; do
        vs=("$w")
        [ -n "$ab" ] && vs+=("$w/B")
        declare -A d0 g0 w0 took
        for k in "${vs[@]}"; do
            d0[$k]=$(sentry_dropped "${aud[$k]}")
            g0[$k]=$(cg_ns "${aud[$k]}")
            w0[$k]=$(writer_ns "${aud[$k]}")
        done
        p0=$(cg_ns "$plain")
        # Rotate the order so drift (load, caches) does not favour one side.
        order=(plain "${vs[@]}")
        n=${#order[@]}
        for j in $(seq 0 $((n - 1))); do
            k=${order[$(( (j + i) % n ))]}
            if [ "$k" = plain ]; then
                took[$k]=$(run_timed "$plain" "$w") || exit 1
            else
                took[$k]=$(run_timed "${aud[$k]}" "$w" "${bin[$k]}") || exit 1
            fi
        done
        line="rep $i $w: no-audit $(ms "${took[plain]}") ms"
        for k in "${vs[@]}"; do
            d1=$(sentry_dropped "${aud[$k]}")
            settle "${aud[$k]}"
            g1=$(cg_ns "${aud[$k]}")
            w1=$(writer_ns "${aud[$k]}")
            a1=$((g1 + w1)) a0=$((${g0[$k]} + ${w0[$k]}))
            c_on[$k]+="$((a1 - a0)) "
            g_on[$k]+="$((g1 - ${g0[$k]})) "
            w_on[$k]+="$((w1 - ${w0[$k]})) "
            t_on[$k]+="${took[$k]} "
            lost=$(( ${d1:-0} - ${d0[$k]:-0} ))
            drops_rep[$k]=$(( ${drops_rep[$k]} + lost ))
            label=audit
            [ "$k" = "$w" ] || label="audit B"
            line+=", $label $(ms "${took[$k]}") ms (CPU with writer $(ms $((a1 - a0))) ms, writer $(ms $((w1 - ${w0[$k]}))) ms, sentry drops $lost)"
        done
        p1=$(cg_ns "$plain")
        c_off[$w]+="$((p1 - p0)) "
        t_off[$w]+="${took[plain]} "
        echo "$line; CPU no-audit $(ms $((p1 - p0))) ms" >&2
        unset d0 g0 w0 took
    done
done

printf '\n%-7s %4s %14s %12s %7s %9s %11s %9s %12s %10s %8s %9s  %s\n' \
    workload reps "no-audit(ms)" "audit(ms)" ratio cpu_ratio sandbox_cpu writer_us "events/rep" "MiB/rep" \
    dropped complete valid
for k in "${keys[@]}"; do
    w=${k%/B}
    a=${aud[$k]}
    st=$out/${k//\//_}.status
    "$sw" --json audit export "$a" "$out/${k//\//_}.jsonl" >"$st" 2>/dev/null
    rm -f "$out/${k//\//_}.jsonl"
    m_off=$(echo "${t_off[$w]}" | median)
    m_on=$(echo "${t_on[$k]}" | median)
    mc_off=$(echo "${c_off[$w]}" | median)
    mc_on=$(echo "${c_on[$k]}" | median)
    mg_on=$(echo "${g_on[$k]}" | median)
    mw_on=$(echo "${w_on[$k]}" | median)
    events=$(jq -r .events "$st")
    bytes=$(jq -r .bytes "$st")
    dropped=$(jq -r .dropped "$st")
    complete=$(jq -r .complete "$st")
    valid=yes
    [ "$dropped" = 0 ] && [ "${drops_rep[$k]}" = 0 ] || valid="NO (dropped $dropped)"
    per_rep=$(((events - ${events0[$k]}) / reps))
    printf '%-7s %4s %14s %12s %7s %9s %11s %9s %12s %10s %8s %9s  %s\n' "$k" "$reps" "$(ms "$m_off")" "$(ms "$m_on")" \
        "$(ratio "$m_on" "$m_off")" "$(ratio "$mc_on" "$mc_off")" "$(ratio "$mg_on" "$mc_off")" \
        "$(awk -v ns="$mw_on" -v n="$per_rep" 'BEGIN {if (n > 0) printf "%.2f", ns/1000/n; else print "n/a"}')" "$per_rep" \
        "$(awk -v b="$bytes" -v r="$((reps + 1))" 'BEGIN {printf "%.1f", b/r/1048576}')" \
        "$dropped" "$complete" "$valid"
done
echo "(events/rep: events written per timed run; MiB/rep includes the warm-up run; ratio = median audit / median no-audit wall time;"
echo " cpu_ratio = median CPU of the audited sandbox and its writer / median CPU of the plain sandbox; sandbox_cpu = the same"
echo " without the writer; writer_us = the writer's median CPU per event; W/B: the B build)"
