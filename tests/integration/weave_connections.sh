#!/usr/bin/env bash
# Many idle clients do not take the controller down: 2,000 clients that
# prove who they are and then say nothing hold 1,024 connections (the
# default limit); the rest are answered "controller busy" in their own TLS
# session and closed. The controller stays up, still serves a sandbox's
# commands to clients already connected, and serves new clients again once
# the idle ones have gone.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_cmd python3
weave_setup c 7673 17680  # short: a worker's audit socket path must stay under 100 bytes

capture ctl start
slurm_started_or_skip "the cluster and its controller start"
eval "$LAST_OUT"
CPID="$(cat "$DIR/run/controller.pid")"

# Holds N clients open, each through its hello, until stdin closes; prints
# how many were served and how many were refused, and each refusal's message
# once.
cat >"$SCRATCH/idle.py" <<'EOF'
import hashlib, json, os, resource, socket, ssl, sys
n = int(sys.argv[1])
host, port = os.environ["SANDWEAVE_HOST"].removeprefix("weave://").rsplit(":", 1)
token = open(os.environ["SANDWEAVE_WEAVE_TOKEN_FILE"]).read().strip()
pin = os.environ["SANDWEAVE_WEAVE_FINGERPRINT"].removeprefix("sha256:")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE  # pinned below, as the CLI pins it
held, refused, messages = [], 0, set()
for i in range(n):
    s = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=30))
    if hashlib.sha256(s.getpeercert(binary_form=True)).hexdigest() != pin:
        sys.exit("the controller's certificate is not the pinned one")
    hello = {"jsonrpc": "2.0", "id": 1, "method": "hello",
             "params": {"protocol": 1, "client": "idle.py", "token": token}}
    s.sendall((json.dumps(hello) + "\n").encode())
    line = s.makefile("rb").readline()
    answer = json.loads(line) if line else {}
    if "result" in answer:
        held.append(s)
    else:
        refused += 1
        messages.add(answer.get("error", {}).get("message", "closed without an answer"))
        s.close()
print(f"{len(held)} {refused}", flush=True)
for m in sorted(messages):
    print(m, flush=True)
sys.stdin.read()
EOF

# A sandbox, and a client connected to it before the flood.
ID="$("$SW" create --template base --audit)"
mkfifo "$SCRATCH/go"
"$SW" run -i "$ID" -- sh -c 'read line; echo "after the flood: $line"' <"$SCRATCH/go" >"$SCRATCH/early.out" 2>&1 &
early=$!
exec 7>"$SCRATCH/go"

mkfifo "$SCRATCH/hold"
python3 "$SCRATCH/idle.py" 2000 <"$SCRATCH/hold" >"$SCRATCH/idle.out" 2>"$SCRATCH/idle.err" &
idle=$!
exec 8>"$SCRATCH/hold"
counted() { [[ -s "$SCRATCH/idle.out" ]] || ! kill -0 "$idle" 2>/dev/null; }
wait_for 240 counted
read -r served refused <"$SCRATCH/idle.out" || true
# 1,024 at once: the client already connected holds one of them.
assert_eq "2,000 idle clients: the controller serves up to its limit of 1,024 and refuses the rest" \
    "1023 977" "$served $refused"
assert_eq "... each refused one told why, in one message" \
    "controller busy: it serves at most 1024 connections at once; try again once one has closed" \
    "$(tail -n +2 "$SCRATCH/idle.out")"
assert_eq "... and the client saw no other error" "" "$(cat "$SCRATCH/idle.err")"
assert_true "the controller stays up" kill -0 "$CPID"
capture "$SW" ls
assert_ne "a new client is refused while the limit is held" 0 "$LAST_RC"
assert_match "... in one line saying the controller is busy" "^sandweave: .*controller busy: it serves at most 1024 connections" "$LAST_ERR"
assert_eq "... one line" 1 "$(line_count "$LAST_ERR")"
echo "still here" >&7
exec 7>&-
wait "$early"
assert_eq "a client connected before the flood is still served" "after the flood: still here" "$(cat "$SCRATCH/early.out")"

exec 8>&-
wait "$idle"
served_again() { "$SW" ls >/dev/null 2>&1; }
assert_true "once the idle clients have gone, new clients are served again" wait_for 30 served_again
assert_eq "... and run commands" "fine" "$("$SW" run "$ID" -- echo fine)"
assert_true "the controller is the same process" kill -0 "$CPID"
"$SW" rm -f "$ID" >/dev/null
finish
