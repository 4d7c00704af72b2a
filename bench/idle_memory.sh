#!/usr/bin/env bash
# Host memory of idle audited sandboxes, per process kind: N sandboxes are
# created with --audit (and a ttl, so each has its lifetime watcher where one
# exists), left idle, and every host process of the state directory is
# measured from /proc/PID/smaps_rollup: PSS (shared pages split among their
# users, so the kinds add up to the total) and USS (Private_Clean +
# Private_Dirty: what removing that one process would free).
# Prints, per kind, the count, the median PSS and USS, the PSS per sandbox
# and its anonymous part (Pss_Anon: the rest is file pages, the binaries'
# text shared by all the sandboxes, so it shrinks as N grows), then the total
# PSS per sandbox and the MemAvailable drop per sandbox. Then the CPU they
# use while idle: after IDLE_CPU_WAIT seconds more (default 60), the CPU of
# every thread of those processes over IDLE_CPU_SECONDS (default 30), per
# kind and in all, in ms per second per sandbox (0 skips it).
# Usage: bench/idle_memory.sh [N]   (default 10; needs root and a built tree;
#        SANDWEAVE=path to the binary, CREATE_FLAGS to add flags)
set -uo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
n="${1:-10}"
state="$(mktemp -d /tmp/sw-idlemem.XXXXXX)"
export SANDWEAVE_STATE_DIR="$state"
cleanup() {
  "$sw" rm --all >/dev/null 2>&1
  pkill -KILL -f -- "$state" 2>/dev/null
  for m in $(awk -v d="$state" 'index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r); do umount -l "$m"; done
  rm -rf "$state"
}
trap cleanup EXIT
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio

"$sw" image build base >/dev/null 2>&1
"$sw" create --audit --ttl 1h ${CREATE_FLAGS:-} >/dev/null && "$sw" rm --all >/dev/null  # warm caches
sync; echo 1 >/proc/sys/vm/drop_caches 2>/dev/null
avail0=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
for i in $(seq "$n"); do "$sw" create --audit --ttl 1h ${CREATE_FLAGS:-} >/dev/null || echo "create $i failed" >&2; done
sleep 5
avail1=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)

# kind PID: shim, writer, lifetime, sentry, stub (a sentry's ptrace stub), gofer, runsc, other
kind() {
  local a0 a1 pa0
  [[ -n "$(tr -d '\0' <"/proc/$1/cmdline" 2>/dev/null)" ]] || { echo stub; return; }
  a0=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | sed -n 1p)
  a1=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | sed -n 2p)
  case "$a1" in
    __shim) echo shim; return ;;
    __audit-writer) echo writer; return ;;
    __lifetime) echo lifetime; return ;;
  esac
  case "$(basename "$a0")" in
    runsc-sandbox)
      pa0=$(tr '\0' '\n' <"/proc/$(awk '/^PPid:/ {print $2}' "/proc/$1/status")/cmdline" 2>/dev/null | sed -n 1p)
      [[ "$(basename "$pa0")" == runsc-sandbox ]] && echo stub || echo sentry ;;
    runsc-gofer) echo gofer ;;
    runsc*) echo runsc ;;
    *) echo "other:$(basename "$a0")" ;;
  esac
}
# The processes of the state dir, and the sentries' ptrace stubs: they have
# no command line of their own (their address space was emptied) and are
# found as descendants of a sentry.
members() {
  local pids
  pids=$(pgrep -f -- "$state")
  echo "$pids"
  ps -e -o pid=,ppid= | awk -v roots="$(echo $pids)" '
    { parent[$1] = $2 }
    END {
      n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1
      do { added = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; added = 1; print p } } while (added)
    }'
}
declare -A pss uss anon cnt
total=0
total_anon=0
for pid in $(members | sort -u); do
  [[ "$pid" == "$$" ]] && continue
  k=$(kind "$pid")
  read -r p u a < <(awk '/^Pss:/ {p=$2} /^Pss_Anon:/ {a=$2} /^Private_(Clean|Dirty):/ {u+=$2} END {print p+0, u+0, a+0}' "/proc/$pid/smaps_rollup" 2>/dev/null)
  [[ -n "${p:-}" ]] || continue
  pss[$k]+="$p "
  uss[$k]+="$u "
  anon[$k]=$((${anon[$k]:-0} + a))
  total_anon=$((total_anon + a))
  cnt[$k]=$((${cnt[$k]:-0} + 1))
  total=$((total + p))
done
echo "idle audited sandboxes: $n ($(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg))"
printf '  %-10s %6s %12s %12s %14s %14s\n' kind count "median PSS" "median USS" "PSS/sandbox" "anon/sandbox"
for k in $(printf '%s\n' "${!cnt[@]}" | sort); do
  sum=$(printf '%s\n' ${pss[$k]} | awk '{s+=$1} END {print s}')
  printf '  %-10s %6d %9s KiB %9s KiB %10s KiB %10s KiB\n' "$k" "${cnt[$k]}" \
    "$(printf '%s\n' ${pss[$k]} | median)" "$(printf '%s\n' ${uss[$k]} | median)" "$((sum / n))" "$((${anon[$k]} / n))"
done
echo "  total PSS per sandbox: $((total / n)) KiB ($(awk -v t="$total" -v n="$n" 'BEGIN {printf "%.1f", t / n / 1024}') MiB), anonymous $((total_anon / n)) KiB"
echo "  MemAvailable drop per sandbox: $(( (avail0 - avail1) / n )) KiB"

# Idle CPU: the threads' run time (schedstat) of each process, per kind.
cpu_wait="${IDLE_CPU_WAIT:-60}"
cpu_secs="${IDLE_CPU_SECONDS:-30}"
((cpu_secs > 0)) || exit 0
sleep "$cpu_wait"
cpu_sample() {  # -> "kind ns" lines
  local pid
  for pid in $(members | sort -u); do
    [[ "$pid" == "$$" ]] && continue
    echo "$(kind "$pid") $(cat /proc/"$pid"/task/*/schedstat 2>/dev/null | awk '{s+=$1} END {print s+0}')"
  done
}
before=$(cpu_sample)
sleep "$cpu_secs"
after=$(cpu_sample)
echo "idle CPU, $cpu_secs s after $((cpu_wait + 5)) s idle (ms per second per sandbox):"
{ echo "$before" | sed 's/^/- /'; echo "$after" | sed 's/^/+ /'; } | awk -v n="$n" -v t="$cpu_secs" '
  $1 == "-" { v[$2] -= $3 } $1 == "+" { v[$2] += $3 }
  END { for (k in v) { printf "  %-10s %8.3f\n", k, v[k] / 1e6 / t / n; s += v[k] } printf "  %-10s %8.3f\n", "total", s / 1e6 / t / n }'
