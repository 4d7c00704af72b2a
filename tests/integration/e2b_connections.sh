#!/usr/bin/env bash
# sandweave e2b's connections are bounded: with --connections 4, four clients
# sending their headers a byte at a time hold every place, so a fifth gets 503
# (E2B's error body) at once; the slow ones are cut off once their headers
# are late, and a normal client is served again. Two thousand idle
# connections neither crash it nor keep a normal client out (an idle
# connection gives its place to a new one), and the server's open descriptors
# stay bounded.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup
require_cmd python3

keys="$SCRATCH/keys.json"
assert_exit "key add" 0 "$SW" e2b key add alice --keys "$keys"
key="$LAST_OUT"
"$SW" e2b --listen 127.0.0.1:0 --keys "$keys" --connections 4 >"$SCRATCH/url" 2>"$SCRATCH/server.log" &
server=$!
stop_server() { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; }
on_cleanup stop_server
for _ in $(seq 100); do [[ -s "$SCRATCH/url" ]] && break; sleep 0.1; done
url="$(head -1 "$SCRATCH/url")"
[[ "$url" =~ ^http://127\.0\.0\.1:([0-9]+)$ ]] && pass "serves on $url" || fatal "no URL" "$(cat "$SCRATCH/server.log")"
port="${BASH_REMATCH[1]}"

python3 - "$port" "$key" "$server" >"$SCRATCH/py.out" 2>&1 <<'PY'
import json, os, resource, socket, sys, threading, time
port, key, pid = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def say(ok, name, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""), flush=True)

def request(timeout=10):
    """A normal client: GET /v2/sandboxes; (status, body) or (None, error)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(f"GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-KEY: {key}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while True:
            b = s.recv(65536)
            if not b: break
            data += b
    except OSError as e:
        return None, str(e)
    finally:
        s.close()
    if not data: return None, "closed without an answer"
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body

st, body = request()
say(st == 200, "a normal client is served", (st, body))

# Four slow clients: headers one byte a second (once the normal client's
# connection has ended on the server too, so all four get a place).
time.sleep(1)
slow = []
for _ in range(4):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\n")
    slow.append(s)
cut = {}
def trickle(i, s):
    start = time.monotonic()
    try:
        for _ in range(40):
            s.sendall(b"X")
            time.sleep(1)
            s.setblocking(False)
            try:
                if s.recv(1) == b"": break
            except BlockingIOError:
                pass
            finally:
                s.setblocking(True)
    except OSError:
        pass
    cut[i] = time.monotonic() - start
threads = [threading.Thread(target=trickle, args=(i, s)) for i, s in enumerate(slow)]
for t in threads: t.start()
time.sleep(1.5)
st, body = request()
ok = st == 503 and json.loads(body).get("code") == 503
say(ok, "a fifth client, while four slow ones hold every place, gets 503 with E2B's body", (st, body))
for t in threads: t.join()
say(all(v < 30 for v in cut.values()) and len(cut) == 4,
    "the slow clients are cut off while still sending (late headers)", cut)
st, body = request()
say(st == 200, "a normal client is served again", (st, body))

# Two thousand idle connections.
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
idle = []
for _ in range(2000):
    try:
        idle.append(socket.create_connection(("127.0.0.1", port), timeout=5))
    except OSError as e:
        say(False, "2000 idle connections are accepted or refused, never hang", str(e))
        break
time.sleep(0.5)
st, body = request()
say(st == 200, "with 2000 idle connections open, a normal client is served", (st, body))
fds = len(os.listdir(f"/proc/{pid}/fd"))
say(fds < 64, "the server holds few descriptors meanwhile", fds)
for s in idle: s.close()
PY
cat "$SCRATCH/py.out"
while read -r verdict name; do
    [[ "$verdict" == PASS ]] && pass "$name"
    [[ "$verdict" == FAIL ]] && fail "$name"
done <"$SCRATCH/py.out"
grep -q '^\(PASS\|FAIL\)' "$SCRATCH/py.out" || fail "the client ran" "$(cat "$SCRATCH/py.out")"
kill -0 "$server" 2>/dev/null && pass "the server is still up" || fail "the server died: $(tail -5 "$SCRATCH/server.log")"
finish
