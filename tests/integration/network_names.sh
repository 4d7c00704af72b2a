#!/usr/bin/env bash
# Domain names in an egress policy: the sandbox's resolver answers only the
# names its policy allows and opens the addresses it answered, nothing else.
#
# The host's nameservers are the test's own: a dnsmasq on a loopback address
# with fixed records (SANDWEAVE_RESOLV_CONF points the resolver at it), so the
# test is deterministic and asks nothing outside. Its records point
# deb.debian.org (the allowed name) and other.test (a name the upstream
# knows but the policy does not allow) at the host end of the sandbox's own
# veth, where the test's server listens (tests/helpers/net_listen.py): a
# policy that failed to refuse would reach this test's server, nothing else.
#
# Covered: the guest's resolv.conf names the resolver; an allowed name
# resolves and connects on its port; before it was resolved, the same
# address was refused; a name the upstream knows but the policy does not
# allow is NXDOMAIN and never reaches the upstream; a denied name under an
# allowed wildcard is NXDOMAIN; a port outside the name's entry is refused;
# the resolved address is in the sandbox's set with a bounded timeout; the
# same over TCP (an allowed name answered and opened, another NXDOMAIN); guest
# root asking another resolver reaches nothing; inspect shows the resolver;
# the audit sidecar names the policy with its names; the resolver, its sets
# and rules go at rm and when the runtime is killed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "network namespaces, veths, nftables and a nameserver on port 53"
sw_setup
require_cmd ip nft python3 jq
require_helpers net_listen.py
DNSMASQ="$(command -v dnsmasq || echo /usr/sbin/dnsmasq)"
[[ -x "$DNSMASQ" ]] || skip "dnsmasq (dnsmasq-base) is not installed"
[[ -d /run/netns || -w /run ]] || skip "no /run for network namespaces"

PIDS=()
stop_pids() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
}
on_cleanup stop_pids

# A loopback address of its own (all of 127.0.0.0/8 is loopback), port 53.
NS_ADDR="127.0.44.53"
printf 'nameserver %s\n' "$NS_ADDR" >"$SCRATCH/resolv.conf"
export SANDWEAVE_RESOLV_CONF="$SCRATCH/resolv.conf"

# dnsmasq with fixed answers only (no upstream, no /etc/hosts), every query logged.
start_nameserver() {  # ADDRESS-TO-ANSWER
    "$DNSMASQ" --keep-in-foreground --conf-file=/dev/null --no-resolv --no-hosts --no-poll \
        --bind-interfaces --listen-address="$NS_ADDR" --port=53 --pid-file= --user=root \
        --local-ttl=30 --log-queries --log-facility="$SCRATCH/dnsmasq.log" \
        --address="/deb.debian.org/$1" --address="/other.test/$1" \
        --address="/bad.example.com/$1" --address="/good.example.com/$1" &
    PIDS+=($!)
    wait_for 10 sh -c "grep -q 'started' '$SCRATCH/dnsmasq.log' 2>/dev/null" ||
        fatal "the test's nameserver started"
}

start_server() {  # LOGNAME ADDRESS PORT/PROTO...
    local log="$SCRATCH/$1" addr="$2"
    shift 2
    : >"$log"
    rm -f "$log.ready"
    python3 "$HELPERS/net_listen.py" "$addr" "$log" "$log.ready" "$@" &
    PIDS+=($!)
    wait_for 10 test -s "$log.ready" || fatal "test server on $addr started"
}

net_left() {  # ID
    local id="$1"
    [[ -e "/run/netns/sandweave-$id" ]] && echo netns
    [[ -e "/sys/class/net/swv${id#sw-}" ]] && echo veth
    nft list chain inet sandweave "sandbox-$id" >/dev/null 2>&1 && echo chain
    nft -j list sets inet 2>/dev/null | grep -q "\"sandbox-$id-" && echo sets
    return 0
}
net_gone() { [[ -z "$(net_left "$1")" ]]; }

# ---- parsing ---------------------------------------------------------------------------
assert_exit "a denied name with ports: exit 2" 2 "$SW" create --deny example.com:25
assert_match "... saying why" "deny 'example.com:25': a denied name is never resolved, so it takes no ports" "$LAST_ERR"
assert_exit "a bad name: exit 2" 2 "$SW" create --allow 'a.*.example.com'
echo "# nothing here" >"$SCRATCH/empty.conf"
SANDWEAVE_RESOLV_CONF="$SCRATCH/empty.conf" capture "$SW" create --allow deb.debian.org
assert_ne "no nameserver to ask: the create fails" 0 "$LAST_RC"
assert_match "... naming the file" "no nameserver in $SCRATCH/empty.conf" "$LAST_ERR"
assert_eq "nothing was made by the refused creates" "0" "$(sw_count)"

# ---- an allowed name, another, a denied one ---------------------------------------------
ID="$(sw_create --allow deb.debian.org:18080/tcp --allow '*.example.com:18080/tcp' \
    --deny bad.example.com)" || fatal "create with names in the policy"
INSPECT="$("$SW" inspect "$ID")"
HOST="$(jq -r '.network.host_address' <<<"$INSPECT")"
GUEST="$(jq -r '.network.guest_address' <<<"$INSPECT")"
assert_eq "inspect: the policy with its names" \
    '{"allow":["deb.debian.org:18080/tcp","*.example.com:18080/tcp"],"deny":["bad.example.com"]}' \
    "$(jq -c '.spec.runtime_options.network' <<<"$INSPECT")"
assert_eq "inspect: the resolver listens on the host end and asks the host's nameservers" \
    "{\"address\":\"$HOST\",\"upstreams\":[\"$NS_ADDR\"]}" "$(jq -c '.network.resolver' <<<"$INSPECT")"
start_nameserver "$HOST"
start_server srv.log "$HOST" 18080/tcp 18081/tcp 18053/udp
probe() { "$SW" run "$ID" -- "$@" </dev/null 2>&1; }

assert_eq "the guest's resolv.conf names the resolver only" "nameserver $HOST" \
    "$(probe grep ^nameserver /etc/resolv.conf)"
# The name's address, before any answer opened it: refused.
out="$(probe nc -w 3 "$HOST" 18080)"
assert_no_match "the address of an allowed name, not yet resolved, is refused" 'hello' "$out"
assert_true "... and the server saw nothing" test -z "$(grep '^tcp 18080' "$SCRATCH/srv.log")"

out="$(probe nslookup other.test)"
assert_match "a name the upstream knows but the policy does not allow: NXDOMAIN" "NXDOMAIN" "$out"
assert_no_match "... with no answer" "Name:" "$out"
out="$(probe nslookup bad.example.com)"
assert_match "a denied name under an allowed wildcard: NXDOMAIN" "NXDOMAIN" "$out"
assert_true "neither reached the upstream" \
    test -z "$(grep -E 'query\[[A-Z]+\] (other\.test|bad\.example\.com)' "$SCRATCH/dnsmasq.log")"
out="$(probe nc -w 3 "$HOST" 18080)"
assert_no_match "a resolved-but-not-allowed name opened nothing: its address is still refused" 'hello' "$out"

out="$(probe nslookup deb.debian.org)"
assert_match "the allowed name resolves, to the test's address" "Address:? *$HOST" "$out"
assert_true "... asked of the host's nameserver" \
    grep -qE 'query\[A\] deb\.debian\.org from 127\.0\.0\.1' "$SCRATCH/dnsmasq.log"
assert_eq "the allowed name connects on its port" "hello 18080" "$(probe nc -w 3 deb.debian.org 18080)"
assert_true "... from the guest's address" grep -qx "tcp 18080 $GUEST" "$SCRATCH/srv.log"
out="$(probe nc -w 3 deb.debian.org 18081)"
assert_no_match "a port outside the name's entry is refused" 'hello' "$out"
# DNS over TCP (busybox has no TCP client for it: the query's bytes by hand).
dns_tcp() {  # NAME: the guest asks the resolver over TCP; prints "RCODE ADDRESS..."
    local q
    q="$(python3 -c '
import struct, sys
name = b"".join(bytes([len(l)]) + l for l in sys.argv[1].encode().split(b".")) + b"\0"
m = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1)
sys.stdout.write("".join("\\%03o" % b for b in struct.pack(">H", len(m)) + m))' "$1")"
    probe sh -c "printf '$q' | nc -w 5 $HOST 53 | od -An -v -tx1" | python3 -c '
import sys
b = bytes.fromhex("".join(sys.stdin.read().split()))
if len(b) < 14: print("none"); sys.exit()
m = b[2:2 + int.from_bytes(b[:2], "big")]
rcode, an = m[3] & 15, int.from_bytes(m[6:8], "big")
i = 12
while m[i]: i += m[i] + 1
i += 5
out = [str(rcode)]
for _ in range(an):
    i += 2 if m[i] & 0xc0 == 0xc0 else 0
    t, rdlen = int.from_bytes(m[i:i + 2], "big"), int.from_bytes(m[i + 8:i + 10], "big")
    if t == 1: out.append(".".join(str(x) for x in m[i + 10:i + 14]))
    i += 10 + rdlen
print(" ".join(out))'
}
assert_eq "over TCP, a name the policy does not allow: NXDOMAIN" "3" "$(dns_tcp other.test)"
assert_eq "over TCP, a name under the allowed wildcard resolves, to the test's address" \
    "0 $HOST" "$(dns_tcp good.example.com)"
ELEMS1="$(nft -j list set inet sandweave "sandbox-$ID-1-v4" | jq -c '[.nftables[] | .set? // empty | .elem[]? | .elem.val]')"
assert_eq "... and its answer opened the address in the wildcard entry's set" "[\"$HOST\"]" "$ELEMS1"
assert_eq "a name under the allowed wildcard connects" "hello 18080" \
    "$(probe nc -w 3 good.example.com 18080)"
ELEMS="$(nft -j list set inet sandweave "sandbox-$ID-0-v4" | jq -c '[.nftables[] | .set? // empty | .elem[]? | .elem]')"
assert_eq "the answer's address is in the name's set" "\"$HOST\"" "$(jq -c '.[0].val' <<<"$ELEMS")"
assert_eq "... for the answer's TTL raised to the floor (30 s -> 60 s)" "60" "$(jq -c '.[0].timeout' <<<"$ELEMS")"

# Guest root asks a resolver of its own choosing (the test's UDP port): nothing arrives.
probe sh -c "nslookup deb.debian.org $HOST:18053; timeout 3 nslookup other.test 192.0.2.53" >/dev/null
sleep 0.5
assert_true "another resolver is not reachable from the guest" \
    test -z "$(grep '^udp 18053' "$SCRATCH/srv.log")"

"$SW" rm -f "$ID" >/dev/null 2>&1
wait_for 5 net_gone "$ID"
assert_eq "rm: no namespace, veth, chain or name set left" "" "$(net_left "$ID")"
capture ss -lun src "$HOST:53"
assert_no_match "... and no resolver listening" ":53" "$LAST_OUT"

# ---- audit, and a killed runtime -----------------------------------------------------
ID2="$(sw_create --audit --allow deb.debian.org:18080/tcp)" || fatal "create with audit and a name"
H2="$("$SW" inspect "$ID2" | jq -r '.network.host_address')"
kill "${PIDS[0]}" 2>/dev/null
wait "${PIDS[0]}" 2>/dev/null
: >"$SCRATCH/dnsmasq.log"
start_nameserver "$H2"
start_server srv2.log "$H2" 18080/tcp
assert_eq "the audited sandbox connects by name" "hello 18080" \
    "$("$SW" run "$ID2" -- nc -w 3 deb.debian.org 18080 </dev/null 2>&1)"
E="$SCRATCH/episode.jsonl"
capture "$SW" audit export "$ID2" "$E"
assert_eq "audit export" 0 "$LAST_RC"
assert_eq "the status sidecar names the policy in force, names included" \
    '{"allow":["deb.debian.org:18080/tcp"],"deny":[]}' "$(jq -c .network "$E.status.json")"
kill_runtime "$ID2" "the runtime's pid"
wait_for 10 sh -c "! ss -lun src '$H2:53' | grep -q ':53'"
assert_no_match "the runtime killed: its resolver is gone with its supervisor" ":53" \
    "$(ss -lun src "$H2:53")"
"$SW" rm "$ID2" >/dev/null 2>&1
wait_for 5 net_gone "$ID2"
assert_eq "rm after a killed runtime: nothing of its network left" "" "$(net_left "$ID2")"

assert_no_leftovers "network_names"
finish
