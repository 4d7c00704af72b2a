#!/usr/bin/env bash
# CPU per `runsc run /bin/true` cycle, the whole cycle (the CLI, the gofer,
# the sentry and its stubs, every re-execution) from a cpuacct cgroup: the
# patched runtime against Debian's stock runsc, and a second build
# (RUNSC_B) when given, in interleaved rounds on one bundle (the base image
# read-only, `runsc spec` defaults, --platform=ptrace --network=none).
# Prints each runtime's median CPU per cycle and the ratios to stock.
# Usage: bench/runtime_cycle.sh [CYCLES] [ROUNDS]   (defaults 10 and 3; root;
#        SANDWEAVE_RUNSC for the patched runtime, PLAIN_RUNSC for stock,
#        RUNSC_B for another build, SANDWEAVE for the binary that builds the image)
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
cycles="${1:-10}"
rounds="${2:-3}"
declare -A runtime=([patched]="${SANDWEAVE_RUNSC:-/usr/local/lib/sandweave/runsc}" [stock]="${PLAIN_RUNSC:-/usr/bin/runsc}")
[[ -n "${RUNSC_B:-}" ]] && runtime[b]="$RUNSC_B"
for k in "${!runtime[@]}"; do
  [[ -x "${runtime[$k]}" ]] || { echo "runtime_cycle: $k runtime ${runtime[$k]} is not executable" >&2; exit 1; }
done
state="$(mktemp -d /tmp/sw-runtime-cycle.XXXXXX)"
cg=/sys/fs/cgroup/cpuacct/sw-runtime-cycle-$$
cleanup() {
  echo $$ >/sys/fs/cgroup/cpuacct/cgroup.procs 2>/dev/null || true
  for d in /sys/fs/cgroup/*/sw-runtime-cycle-$$/sb /sys/fs/cgroup/*/sw-runtime-cycle-$$; do rmdir "$d" 2>/dev/null || true; done
  rm -rf "$state"
}
trap cleanup EXIT
SANDWEAVE_STATE_DIR="$state/sw" "$sw" image build base >/dev/null
bundle="$state/bundle"
mkdir -p "$bundle"
(cd "$bundle" && "${runtime[patched]}" spec -- /bin/true)
python3 - "$bundle/config.json" "$state/sw/images/base/rootfs" "/sw-runtime-cycle-$$/sb" <<'PY'
import json, sys
path, rootfs, cgroup = sys.argv[1:]
with open(path) as f:
    c = json.load(f)
c["root"] = {"path": rootfs, "readonly": True}
c["process"]["terminal"] = False
c["linux"]["cgroupsPath"] = cgroup  # the sandbox's processes stay under ours
with open(path, "w") as f:
    json.dump(c, f)
PY
mkdir "$cg"
echo $$ >"$cg/cgroup.procs"

declare -A cpu
n=0
for ((r = 1; r <= rounds; r++)); do
  for k in $(printf '%s\n' "${!runtime[@]}" | sort); do
    u0=$(cat "$cg/cpuacct.usage")
    for ((i = 0; i < cycles; i++)); do
      n=$((n + 1))
      "${runtime[$k]}" --root="$state/root-$k" --platform=ptrace --network=none \
        run --bundle "$bundle" "cycle-$$-$n" </dev/null >/dev/null 2>&1 ||
        { echo "runtime_cycle: a $k cycle failed" >&2; exit 1; }
    done
    u1=$(cat "$cg/cpuacct.usage")
    ms=$(awk -v d=$((u1 - u0)) -v c="$cycles" 'BEGIN {printf "%.1f", d / c / 1e6}')
    cpu[$k]+="$ms "
    echo "round $r $k: $ms ms of CPU per cycle"
  done
done
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio
stock=$(echo "${cpu[stock]}" | median)
echo "median CPU per /bin/true cycle over $rounds rounds of $cycles ($(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)):"
for k in $(printf '%s\n' "${!runtime[@]}" | sort); do
  m=$(echo "${cpu[$k]}" | median)
  printf '  %-8s %7s ms   %s / stock %s\n' "$k" "$m" "$k" "$(awk -v a="$m" -v b="$stock" 'BEGIN {printf "%.2f", a / b}')"
done
