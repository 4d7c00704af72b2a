#!/usr/bin/env bash
# A sandbox with an egress policy reaches exactly what the policy allows.
#
# Every server here is the test's own (tests/helpers/net_listen.py), bound on
# the host end of the sandbox's own veth (10.213.0.0/16, sandweave's range):
# every probe, allowed or not, is addressed to it, so a policy that failed to
# refuse would reach this test's server and nothing else. The test also
# asserts that the sandbox's only route leads to that address, and that the
# host would not forward its packets to the real uplink.
#
# Covered: allowed TCP ports connect, a port outside the policy and a denied
# port inside an allowed range are refused (TCP), an allowed UDP port
# receives and another does not; inspect shows the policy, its origin and the
# addresses; over IPv6 (the guest's own fd77:7776:6176:: address) an allowed
# port connects and another, or the same port over IPv4, is refused; a
# published port reaches the guest's server from this host's loopback, while
# the guest reaches nothing out, and is closed at rm (a taken host port fails
# the create); guest
# root changing its routes or sending ICMP through a raw
# socket gains nothing; hidepid and audit work as without a network, and the
# audit records the connects with their destinations and results, and the
# host's own record of every refused packet (UDP over IPv4 and IPv6, TCP); the
# namespace, veth and rules go at rm, after the runtime is killed, after a
# create killed half-way (rm, and prune when its directory is gone too); and
# NETWORK_CYCLES (default 50) create/rm cycles leave nothing.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "network namespaces, veths and nftables"
sw_setup
require_cmd ip nft python3 jq
require_helpers net_listen.py udp_send
[[ -d /run/netns || -w /run ]] || skip "no /run for network namespaces"

CYCLES="${NETWORK_CYCLES:-50}"
SERVERS=()
stop_servers() {
    local p
    for p in "${SERVERS[@]}"; do kill "$p" 2>/dev/null; done
}
on_cleanup stop_servers

# What is left on the host of sandbox ID's network: "netns", "veth", "chain",
# "map" (one word each), nothing when all of it is gone.
net_left() {  # ID
    local id="$1"
    [[ -e "/run/netns/sandweave-$id" ]] && echo netns
    [[ -e "/sys/class/net/swv${id#sw-}" ]] && echo veth
    nft list chain inet sandweave "sandbox-$id" >/dev/null 2>&1 && echo chain
    nft -j list map inet sandweave sandboxes 2>/dev/null | grep -q "\"swv${id#sw-}\"" && echo map
    return 0
}
net_gone() { [[ -z "$(net_left "$1")" ]]; }

# Starts net_listen.py on ADDRESS with PORT/PROTO...; its log is $SCRATCH/LOGNAME.
start_server() {  # LOGNAME ADDRESS PORT/PROTO...
    local log="$SCRATCH/$1" addr="$2"
    shift 2
    : >"$log"
    rm -f "$log.ready"
    python3 "$HELPERS/net_listen.py" "$addr" "$log" "$log.ready" "$@" &
    SERVERS+=($!)
    wait_for 10 test -s "$log.ready" || fatal "test server on $addr started"
}

# ---- bad policies are refused before anything is made --------------------------------
assert_exit "create --allow with host bits set: exit 2" 2 "$SW" create --allow 10.0.0.1/8
assert_match "... naming the entry and why" "allow '10.0.0.1/8': host bits set \(did you mean 10.0.0.0/8\?\)" "$LAST_ERR"
assert_exit "create --network none --allow: exit 2" 2 "$SW" create --network none --allow 10.0.0.0/8
assert_exit "a template with a bad domain name: exit 2" 2 "$SW" create --template \
    '{"image": "base", "runtime_options": {"network": {"allow": ["10.0.0.0/8", "a.*.example.com"]}}}'
assert_match "... naming the entry" "runtime_options.network.allow.*a\.\*\.example\.com: \* goes only as the whole first label" "$LAST_ERR"
assert_eq "nothing was made by the refused creates" "0" "$(sw_count)"

# ---- a policy: allowed, refused, denied --------------------------------------------
ALLOW=(--allow 10.213.0.0/16:18080-18082/tcp --allow 10.213.0.0/16:18090/udp)
DENY=(--deny 10.213.0.0/16:18082)
ID="$(sw_create "${ALLOW[@]}" "${DENY[@]}")" || fatal "create with a policy"
INSPECT="$("$SW" inspect "$ID")"
assert_eq "inspect: the policy" \
    '{"allow":["10.213.0.0/16:18080-18082/tcp","10.213.0.0/16:18090/udp"],"deny":["10.213.0.0/16:18082"]}' \
    "$(jq -c '.spec.runtime_options.network' <<<"$INSPECT")"
assert_eq "inspect: the policy's origin" "flag" \
    "$(jq -r '.spec.origin["/runtime_options/network"]' <<<"$INSPECT")"
HOST="$(jq -r '.network.host_address' <<<"$INSPECT")"
GUEST="$(jq -r '.network.guest_address' <<<"$INSPECT")"
assert_match "inspect: the host end's address is sandweave's" '^10\.213\.[0-9]+\.[0-9]+$' "$HOST"
assert_match "inspect: the guest's address is sandweave's" '^10\.213\.[0-9]+\.[0-9]+$' "$GUEST"
assert_eq "the runtime runs with its own network stack" "true" \
    "$(jq '.runsc_flags | index("--network=sandbox") != null' <<<"$INSPECT")"

# The sandbox's routes lead to the host end only, and the host does not
# forward what arrives there to anything else (unless its operator turned
# forwarding on, which this test then cannot check without sending).
# (runsc moved the namespace's addresses and routes into its own stack: the
# guest's view is the one that counts.)
ROUTES="$("$SW" run "$ID" -- ip -4 route </dev/null 2>&1 | grep -v -e ' dev lo ' -e :)"
assert_match "the guest's default route is the host end" "^default via $HOST dev eth0" \
    "$(grep ^default <<<"$ROUTES")"
assert_eq "the guest has no IPv4 route but the default and its /30" "" \
    "$(grep -v -e "^default via $HOST dev eth0" -e '^10\.213\.[0-9.]*/30 dev eth0' <<<"$ROUTES")"
if [[ "$(cat /proc/sys/net/ipv4/ip_forward)" == 0 ]]; then
    # A route lookup only: no packet is sent. 198.51.100.1 is a documentation address.
    capture ip route get 198.51.100.1 from "$GUEST" iif "swv${ID#sw-}"
    assert_ne "the host would not route the sandbox's packets to its uplink" 0 "$LAST_RC"
else
    pass "forwarding is on here: the policy's final refusal is what keeps other addresses out"
fi

start_server srv.log "$HOST" 18080/tcp 18081/tcp 18082/tcp 18083/tcp 18090/udp 18091/udp
probe() { "$SW" run "$ID" -- "$@" </dev/null 2>&1; }
assert_eq "allowed TCP port connects" "hello 18080" "$(probe nc -w 3 "$HOST" 18080)"
assert_eq "a second port of the allowed range connects" "hello 18081" "$(probe nc -w 3 "$HOST" 18081)"
out="$(probe nc -w 3 "$HOST" 18083)"
assert_no_match "a port outside the policy is refused (TCP)" 'hello' "$out"
out="$(probe nc -w 3 "$HOST" 18082)"
assert_no_match "a denied port inside an allowed range is refused (TCP)" 'hello' "$out"
# busybox's tftp is the guest's UDP client: its request is one datagram.
probe sh -c "timeout 2 tftp -g -r x -l /tmp/x $HOST 18090; timeout 2 tftp -g -r x -l /tmp/x $HOST 18091" >/dev/null
sleep 0.5
LOG="$SCRATCH/srv.log"
assert_true "allowed UDP port received the guest's datagram" grep -qx "udp 18090 $GUEST" "$LOG"
assert_true "UDP port outside the policy received nothing" test -z "$(grep '^udp 18091' "$LOG")"
assert_true "the refused TCP ports saw no connection" test -z "$(grep -E '^tcp 1808[23] ' "$LOG")"
assert_true "the allowed TCP connections came from the guest's address" grep -qx "tcp 18080 $GUEST" "$LOG"

# ---- guest root cannot widen it ------------------------------------------------------
probe sh -c "ip route del default; ip route add 10.0.0.0/8 dev eth0; ip route add default dev eth0;
             ip addr add 10.213.255.1/16 dev eth0" >/dev/null
out="$(probe nc -w 3 "$HOST" 18083)"
assert_no_match "after guest root rewrote its routes and addresses, the port is still refused" 'hello' "$out"
assert_no_match "... and the server saw nothing" '^tcp 18083 ' "$(cat "$SCRATCH/srv.log")"

"$SW" rm -f "$ID" >/dev/null 2>&1
wait_for 5 net_gone "$ID"
assert_eq "rm: no namespace, veth, chain or map entry left" "" "$(net_left "$ID")"

# ---- IPv6: the guest's own address, the same policy -----------------------------------
ID6="$(sw_create --allow '[fd77:7776:6176::/112]:18095/tcp')" || fatal "create with an IPv6 entry"
INSPECT6="$("$SW" inspect "$ID6")"
H6="$(jq -r '.network.host_address6' <<<"$INSPECT6")"
G6="$(jq -r '.network.guest_address6' <<<"$INSPECT6")"
H4="$(jq -r '.network.host_address' <<<"$INSPECT6")"
assert_match "inspect: the guest's IPv6 address is sandweave's" '^fd77:7776:6176::[0-9a-f]+$' "$G6"
assert_true "the guest has its IPv6 address" \
    grep -q "$G6/126" <<<"$("$SW" run "$ID6" -- ip -6 addr </dev/null 2>&1)"
assert_match "the guest's IPv6 default route is the host end" "^default via $H6 dev eth0" \
    "$("$SW" run "$ID6" -- ip -6 route </dev/null 2>&1 | grep "^default via .*:")"
start_server srv6.log "$H6" 18095/tcp 18096/tcp
start_server srv64.log "$H4" 18095/tcp
probe6() { "$SW" run "$ID6" -- "$@" </dev/null 2>&1; }
assert_eq "an allowed IPv6 port connects" "hello 18095" "$(probe6 nc -w 3 "$H6" 18095)"
assert_true "... from the guest's IPv6 address" grep -qx "tcp 18095 $G6" "$SCRATCH/srv6.log"
out="$(probe6 nc -w 3 "$H6" 18096)"
assert_no_match "an IPv6 port outside the policy is refused" 'hello' "$out"
out="$(probe6 nc -w 3 "$H4" 18095)"
assert_no_match "the same port over IPv4, which the policy does not allow, is refused" 'hello' "$out"
assert_true "the refused ones saw nothing" \
    test -z "$(grep '^tcp 18096' "$SCRATCH/srv6.log")$(cat "$SCRATCH/srv64.log")"
"$SW" rm -f "$ID6" >/dev/null 2>&1
wait_for 5 net_gone "$ID6"
assert_eq "rm: nothing of the IPv6 sandbox's network left" "" "$(net_left "$ID6")"

# ---- a published port: inbound from this host's loopback only ------------------------
assert_exit "--publish 0: exit 2" 2 "$SW" create --publish 0
assert_match "... saying why" "publish '0': '0' is not a port" "$LAST_ERR"
assert_exit "--network none --publish: exit 2" 2 "$SW" create --network none --publish 8000
PUB="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
IDP="$(sw_create --publish "$PUB:8000")" || fatal "create with a published port"
INSPECTP="$("$SW" inspect "$IDP")"
assert_eq "inspect: the published port" "[\"$PUB:8000\"]" "$(jq -c .spec.publish <<<"$INSPECTP")"
assert_eq "... in a network that lets nothing out" '{"allow":[],"deny":[]}' \
    "$(jq -c .spec.runtime_options.network <<<"$INSPECTP")"
assert_true "the host port listens on loopback only" \
    grep -q "127.0.0.1:$PUB" <<<"$(ss -Hltn "sport = :$PUB")"
"$SW" run -d "$IDP" -- sh -c 'while true; do nc -l -p 8000 -e echo from-the-guest; done' >/dev/null
got=""
for _ in $(seq 50); do
    got="$(python3 -c "
import socket, sys
with socket.create_connection(('127.0.0.1', $PUB), timeout=5) as s: sys.stdout.write(s.recv(100).decode())")"
    [[ -n "$got" ]] && break
    sleep 0.1
done
assert_eq "a connection to the host port reaches the guest's server" "from-the-guest" "$got"
out="$("$SW" run "$IDP" -- nc -w 3 "$(jq -r .network.host_address <<<"$INSPECTP")" 18080 </dev/null 2>&1)"
assert_no_match "... while the guest still reaches nothing out" 'hello' "$out"
before="$(sw_count)"
capture "$SW" create --publish "$PUB:9000"
assert_ne "a second sandbox publishing the same host port fails" 0 "$LAST_RC"
assert_match "... naming the port" "127.0.0.1:$PUB: Address already in use" "$LAST_ERR"
assert_eq "... and leaves no sandbox" "$before" "$(sw_count)"
"$SW" rm -f "$IDP" >/dev/null 2>&1
wait_for 5 net_gone "$IDP"
assert_eq "rm: the port is closed" "" "$(ss -Hltn "sport = :$PUB")"

# ---- hidepid and audit, unchanged with a network ------------------------------------
ID2="$(sw_create --hidepid 2 --audit --allow 10.213.0.0/16:18080/tcp)" || fatal "create with hidepid, audit and a policy"
H2="$("$SW" inspect "$ID2" | jq -r '.network.host_address')"
start_server srv2.log "$H2" 18080/tcp 18083/tcp
"$SW" run "$ID2" -- sleep 30 </dev/null >/dev/null 2>&1 &
SLEEPER=$!
sleep 1
assert_eq "hidepid 2 with a network: user 1001 sees no root process" "" \
    "$("$SW" run "$ID2" --user 1001:1001 -- sh -c 'ls /proc | grep -E "^[0-9]+$" | while read p; do
        [ "$(stat -c %u /proc/$p)" = 0 ] && echo $p; done' 2>/dev/null </dev/null)"
kill "$SLEEPER" 2>/dev/null
wait "$SLEEPER" 2>/dev/null
assert_eq "the audited sandbox reaches its allowed port" "hello 18080" \
    "$("$SW" run "$ID2" -- nc -w 3 "$H2" 18080 </dev/null 2>&1)"
"$SW" run "$ID2" -- nc -w 3 "$H2" 18083 </dev/null >/dev/null 2>&1
# Refused datagrams leave no trace in the guest (the send succeeds): the host logs them.
H2V6="$("$SW" inspect "$ID2" | jq -r '.network.host_address6 // empty')"
"$SW" cp "$HELPERS/udp_send" "$ID2:/tmp/udp_send" >/dev/null 2>&1 ||
    fatal "copying udp_send into the sandbox"
assert_eq "the guest sent 20 datagrams to a port outside the policy" 20 \
    "$("$SW" run "$ID2" -- sh -c "chmod 755 /tmp/udp_send && /tmp/udp_send $H2 18091 20 2000" </dev/null 2>&1)"
[[ -z "$H2V6" ]] || "$SW" run "$ID2" -- /tmp/udp_send "$H2V6" 18092 3 2000 </dev/null >/dev/null 2>&1
sleep 0.3
E="$SCRATCH/episode.jsonl"
capture "$SW" audit export "$ID2" "$E"
assert_eq "audit export of a sandbox with a network" 0 "$LAST_RC"
assert_true "the export verifies" "$SW" audit verify "$E"
assert_eq "the status sidecar names the policy in force" \
    '{"allow":["10.213.0.0/16:18080/tcp"],"deny":[]}' "$(jq -c .network "$E.status.json")"
assert_true "the audit has the nc execs" \
    jq -se 'map(select(.point == "sentry/execve" and .argv[0] == "nc")) | length == 2' "$E"
# Each connect's address is the guest's sockaddr_in, base64: "ADDRESS:PORT RESULT ERRNO".
CONNECTS="$(jq -r 'select(.point == "syscall/connect/exit") | "\(.address) \(.exit.result) \(.exit.errorno)"' "$E" |
    while read -r a result errno; do
        b=($(base64 -d <<<"$a" | od -An -tu1))
        echo "${b[4]}.${b[5]}.${b[6]}.${b[7]}:$((b[2] * 256 + b[3])) $result $errno"
    done)"
assert_true "the allowed connect is in the audit with its destination, succeeded" \
    grep -qx "$H2:18080 0 0" <<<"$CONNECTS"
assert_true "the refused connect is in the audit with its destination, refused (ECONNREFUSED)" \
    grep -qx "$H2:18083 0 111" <<<"$CONNECTS"
REFUSED="$(jq -r 'select(.point == "network/refused") | "\(.protocol) \(.source) \(.destination) \(.port)"' "$E")"
G2="$("$SW" inspect "$ID2" | jq -r '.network.guest_address')"
assert_eq "each refused datagram is in the audit, as the host saw it" 20 \
    "$(grep -cx "udp $G2 $H2 18091" <<<"$REFUSED")"
assert_true "the refused TCP connect is in the host's record too" grep -qx "tcp $G2 $H2 18083" <<<"$REFUSED"
assert_true "the allowed connection is not" test -z "$(grep ' 18080$' <<<"$REFUSED")"
if [[ -n "$H2V6" ]]; then
    assert_eq "refused IPv6 datagrams are in the audit" 3 "$(grep -c " $H2V6 18092\$" <<<"$REFUSED")"
fi
assert_eq "the sidecar counts the host's refusal records, none lost" \
    "$(wc -l <<<"$REFUSED") 0" "$(jq -r '"\(.counters.egress_refused) \(.counters.egress_lost)"' "$E.status.json")"
assert_eq "the export with the host's records is complete" true "$(jq -r .complete "$E.status.json")"
"$SW" rm -f "$ID2" >/dev/null 2>&1
wait_for 5 net_gone "$ID2"
assert_eq "rm of the audited sandbox: nothing of its network left" "" "$(net_left "$ID2")"

# ---- crashes ---------------------------------------------------------------------------
ID3="$(sw_create --allow 10.213.0.0/16)" || fatal "create for the crash"
kill_runtime "$ID3" "the runtime's pid"
assert_eq "the sandbox whose runtime was killed is failed" failed "$(sw_state "$ID3")"
"$SW" rm "$ID3" >/dev/null 2>&1
wait_for 5 net_gone "$ID3"
assert_eq "rm after a killed runtime: nothing of its network left" "" "$(net_left "$ID3")"

if [[ -x "${SANDWEAVE_FAULTS:-}" ]]; then
    # The create killed just after it made the network.
    SANDWEAVE_FAULT=create.network "$SANDWEAVE_FAULTS" create --allow 10.213.0.0/16:1/tcp \
        >/dev/null 2>&1 </dev/null
    ID4="$(ls "$STATE/sandboxes" | grep -E '^sw-[0-9a-f]{12}$' | head -1)"
    assert_match "the killed create left its sandbox" '^sw-' "$ID4"
    assert_eq "... with its network" "netns veth chain map" "$(net_left "$ID4" | xargs)"
    "$SW" rm "$ID4" >/dev/null 2>&1
    assert_eq "rm of the killed create: nothing of its network left" "" "$(net_left "$ID4")"

    # Killed again, and its directory removed by hand: checked after the
    # cycles below, once its namespace is older than the 30 s a create of
    # another state directory may take to start a runtime in one.
    SANDWEAVE_FAULT=create.network "$SANDWEAVE_FAULTS" create --allow 10.213.0.0/16:1/tcp \
        >/dev/null 2>&1 </dev/null
    ID5="$(ls "$STATE/sandboxes" | grep -E '^sw-[0-9a-f]{12}$' | head -1)"
    assert_match "the second killed create left its sandbox" '^sw-' "$ID5"
    # (its rootfs is still mounted: unmounted first, or rm cannot remove it)
    for m in $(findmnt -rn -o TARGET | grep -F -- "$STATE/sandboxes/$ID5/" | sort -r); do umount -l "$m"; done
    rm -rf "${STATE:?}/sandboxes/$ID5"
    assert_true "... its directory is gone" test ! -e "$STATE/sandboxes/$ID5"
else
    skipped "sandweave-faults is not built: killed creates"
fi

# ---- create/rm cycles leave nothing -----------------------------------------------------
: >"$SCRATCH/cycle-ids"
for ((i = 0; i < CYCLES; i++)); do
    id="$("$SW" create --allow 10.213.0.0/16:18080/tcp 2>>"$SCRATCH/cycle.err" </dev/null)" || break
    echo "$id" >>"$SCRATCH/cycle-ids"
    "$SW" rm -f "$id" >/dev/null 2>>"$SCRATCH/cycle.err" || break
done
assert_eq "$CYCLES create/rm cycles with a policy ran" "$CYCLES" "$(line_count "$(cat "$SCRATCH/cycle-ids")")"
left=""
while read -r id; do left+="$(net_left "$id" | xargs)"; done <"$SCRATCH/cycle-ids"
assert_eq "after $CYCLES cycles: no namespace, veth, chain or map entry left" "" "$left"

doctor_names() {  # ID
    "$SW" doctor --json 2>/dev/null | jq -r '.checks[] | select(.name == "network-leftovers") | .detail' |
        grep -q -- "$1"
}
if [[ -n "${ID5:-}" ]]; then
    wait_for 40 doctor_names "$ID5"
    assert_true "doctor names the network a removed sandbox left" doctor_names "$ID5"
    "$SW" prune >/dev/null 2>&1
    assert_eq "prune: nothing of its network left" "" "$(net_left "$ID5")"
    assert_true "doctor: no network leftovers after prune" \
        test "$("$SW" doctor --json 2>/dev/null | jq -r '.checks[] | select(.name == "network-leftovers") | .ok')" = true
fi

assert_no_leftovers "network"
finish
