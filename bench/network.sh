#!/usr/bin/env bash
# What an egress policy costs, as medians and ratios measured in the same run:
#   create:      `sandweave create --allow ...` + rm vs `create` (network none) + rm
#   connects:    N TCP connects from the guest (busybox nc) to a server on the
#                host end of its veth, with the policy vs the same sandbox with
#                its chain replaced by one accept (the runtime's --network=sandbox
#                and no policy)
#   bulk:        guest -> host bytes through one TCP connection, the same two ways
# Every server is this script's own, on the sandbox's host-end address
# (10.213.0.0/16, sandweave's range): no traffic leaves this host.
# Usage: bench/network.sh [REPS] [CONNECTS] [MIB]   (defaults 10, 200, 64; root, a built tree)
set -euo pipefail
reps="${1:-10}"
connects="${2:-200}"
mib="${3:-64}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
state="$(mktemp -d /tmp/sw-bench-net.XXXXXX)"
export SANDWEAVE_STATE_DIR="$state"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio
server=""
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null
  "$sw" ls --ids 2>/dev/null | xargs -r "$sw" rm -f >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT
stamp() { printf -v "$1" '%s000' "${EPOCHREALTIME//[!0-9]/}"; }
ms() { awk -v ns="$1" 'BEGIN {printf "%.1f", ns/1e6}'; }

"$sw" image build base >/dev/null 2>&1
allow=(--allow 10.213.0.0/16:18180-18181/tcp)

# ---- create with a policy vs none -------------------------------------------------
none=() pol=()
for ((i = 0; i < reps; i++)); do
  stamp a; id="$("$sw" create)"; stamp b; "$sw" rm -f "$id" >/dev/null
  none+=($((b - a)))
  stamp a; id="$("$sw" create "${allow[@]}")"; stamp b; "$sw" rm -f "$id" >/dev/null
  pol+=($((b - a)))
done
c_none="$(printf '%s\n' "${none[@]}" | median)"
c_pol="$(printf '%s\n' "${pol[@]}" | median)"
echo "create: policy $(ms "$c_pol") ms vs none $(ms "$c_none") ms: $(ratio "$c_pol" "$c_none")"

# ---- connects and bulk, policy vs one accept ----------------------------------------
id="$("$sw" create "${allow[@]}")"
host="$("$sw" inspect "$id" | python3 -c 'import json,sys; print(json.load(sys.stdin)["network"]["host_address"])')"
python3 - "$host" <<'PY' &
import socket, sys, threading
host = sys.argv[1]
def serve(port, bulk):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port)); s.listen(128)
    while True:
        c, _ = s.accept()
        if bulk:
            while c.recv(1 << 20):
                pass
        c.close()
threading.Thread(target=serve, args=(18180, False), daemon=True).start()
serve(18181, True)
PY
server=$!
sleep 3  # the server listening (python start-up under load)
chain="sandbox-$id"
policy_off() {  # the same sandbox, its chain one accept: no policy
  nft flush chain inet sandweave "$chain"
  nft add rule inet sandweave "$chain" accept
}
policy_on() {
  nft flush chain inet sandweave "$chain"
  nft add rule inet sandweave "$chain" ct state established,related accept
  nft add rule inet sandweave "$chain" ip daddr 10.213.0.0/16 meta l4proto '{tcp, udp}' th dport 18180-18181 accept
  nft add rule inet sandweave "$chain" goto refuse
}
conn_run() {
  local a b
  stamp a
  "$sw" run "$id" -- sh -c "i=0; while [ \$i -lt $connects ]; do nc -w 2 $host 18180 </dev/null; i=\$((i+1)); done" >/dev/null
  stamp b
  echo $((b - a))
}
bulk_run() {
  local a b
  stamp a
  "$sw" run "$id" -- sh -c "dd if=/dev/zero bs=1M count=$mib 2>/dev/null | nc -w 5 $host 18181" >/dev/null
  stamp b
  echo $((b - a))
}
con_p=() con_o=() bulk_p=() bulk_o=()
for ((i = 0; i < reps; i++)); do
  policy_on; con_p+=("$(conn_run)"); bulk_p+=("$(bulk_run)")
  policy_off; con_o+=("$(conn_run)"); bulk_o+=("$(bulk_run)")
done
policy_on
cp_="$(printf '%s\n' "${con_p[@]}" | median)"; co="$(printf '%s\n' "${con_o[@]}" | median)"
bp="$(printf '%s\n' "${bulk_p[@]}" | median)"; bo="$(printf '%s\n' "${bulk_o[@]}" | median)"
echo "connects ($connects in one run): policy $(ms "$cp_") ms vs none $(ms "$co") ms: $(ratio "$cp_" "$co")"
echo "bulk ($mib MiB guest -> host): policy $(ms "$bp") ms vs none $(ms "$bo") ms: $(ratio "$bp" "$bo")"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
