#!/usr/bin/env bash
# Leaks of sandboxes with an egress policy, over many lifetimes: CYCLES
# create -> rm cycles (CONCURRENCY at once) with a policy that has an address
# entry and a name entry (so each sandbox gets a namespace, a veth, a chain,
# two name sets and a resolver); every 25th cycle the runtime is killed
# (kill -9 of the sandbox's runsc) before the rm, and every 25th, offset by
# 12, the `sandweave create` itself is killed half-way and `prune` settles
# what it left. Then it counts what is left on the host: network namespaces
# named sandweave-*, swv* interfaces, chains and sets in table inet
# sandweave, sockets on port 53 of sandweave's range, and processes naming
# the state directory. Any of them is a leak (exit 1).
# Prints cycles per second and the leftovers. No traffic leaves this host:
# nothing is resolved, the nameserver recorded is a loopback address.
# Usage: bench/network_cycles.sh [CYCLES] [CONCURRENCY]   (defaults 1000, 2; root, a built tree)
set -euo pipefail
cycles="${1:-1000}"
conc="${2:-2}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
runsc="${SANDWEAVE_RUNSC:-/usr/local/lib/sandweave/runsc}"
state="$(mktemp -d /var/tmp/sw-bench-netcycles.XXXXXX)"
export SANDWEAVE_STATE_DIR="$state"
printf 'nameserver 127.0.0.53\n' >"$state/resolv.conf"
export SANDWEAVE_RESOLV_CONF="$state/resolv.conf"
cleanup() {
  "$sw" rm -f --all >/dev/null 2>&1 || true
  "$sw" prune >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT
"$sw" image build base >/dev/null 2>&1
policy=(--allow 10.213.0.0/16:18180/tcp --allow deb.debian.org:443/tcp)

netns_count() { find /run/netns -maxdepth 1 -name 'sandweave-*' 2>/dev/null | wc -l; }
veth_count() { find /sys/class/net -maxdepth 1 -name 'swv*' | wc -l; }
chain_count() { nft -j list chains inet 2>/dev/null | jq '[.nftables[] | .chain? // empty | select(.table == "sandweave" and (.name | startswith("sandbox-")))] | length'; }
set_count() { nft -j list sets inet 2>/dev/null | jq '[.nftables[] | .set? // empty | select(.table == "sandweave")] | length'; }
dns_sockets() { ss -Hlnu 'sport = :53' 2>/dev/null | grep -c ' 10\.213\.' || true; }
procs() { { pgrep -f -- "$state" || true; } | { grep -vx "$$" || true; } | wc -l; }
before="netns $(netns_count) veth $(veth_count) chains $(chain_count) sets $(set_count) dns $(dns_sockets)"

one() {  # N
  local n="$1" id pid
  if ((n % 25 == 12)); then
    # A create killed half-way: whatever it made is prune's to settle.
    "$sw" create "${policy[@]}" >/dev/null 2>&1 &
    pid=$!
    sleep "0.0$((RANDOM % 9 + 1))"
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 0
  fi
  id="$("$sw" create "${policy[@]}")" || { echo "cycle $n: create failed" >&2; return 1; }
  if ((n % 25 == 0)); then
    pid="$("$runsc" --root "$state/runsc" state "$id" 2>/dev/null | jq -r '.pid // empty')"
    [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
    sleep 0.2
  fi
  "$sw" rm -f "$id" >/dev/null || { echo "cycle $n: rm failed" >&2; return 1; }
}

start="$(date +%s.%N)"
failed=0
for ((i = 1; i <= cycles; i += conc)); do
  pids=()
  for ((j = i; j < i + conc && j <= cycles; j++)); do
    one "$j" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
  if ((i % 100 < conc)); then
    printf '%d/%d cycles, %d failed\r' "$((i + conc - 1))" "$cycles" "$failed" >&2
  fi
done
end="$(date +%s.%N)"
echo >&2
# What killed creates left: prune settles it (stale records, their networks).
"$sw" rm -f --all >/dev/null 2>&1 || true
"$sw" prune >/dev/null 2>&1 || true
sleep 1
after="netns $(netns_count) veth $(veth_count) chains $(chain_count) sets $(set_count) dns $(dns_sockets)"
left_procs="$(procs)"
awk -v n="$cycles" -v s="$start" -v e="$end" -v f="$failed" -v c="$conc" \
  'BEGIN {printf "%d cycles at concurrency %d in %.0f s: %.2f cycles/s, %d failed\n", n, c, e - s, n / (e - s), f}'
echo "before: $before"
echo "after:  $after; processes naming the state directory: $left_procs"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
[[ "$before" == "$after" && "$left_procs" == 0 && "$failed" == 0 ]] || { echo "LEAK or failure" >&2; exit 1; }
echo "nothing left"
