#!/usr/bin/env bash
# sandweave e2b's connections are bounded: with --connections 4, four clients
# sending their headers a byte at a time hold every place, so a fifth gets 503
# (E2B's error body) at once; the slow ones are cut off once their headers
# are late, and a normal client is served again. Two thousand idle
# connections neither crash it nor keep a normal client out (an idle
# connection gives its place to a new one), and the server's open descriptors
# stay bounded. Then the idle and I/O timeouts (shortened by their flags).
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
verdicts() {
    cat "$1"
    while read -r verdict name; do
        [[ "$verdict" == PASS ]] && pass "$name"
        [[ "$verdict" == FAIL ]] && fail "$name"
    done <"$1"
    grep -q '^\(PASS\|FAIL\)' "$1" || fail "the client ran" "$(cat "$1")"
}
verdicts "$SCRATCH/py.out"
kill -0 "$server" 2>/dev/null && pass "the server is still up" || fail "the server died: $(tail -5 "$SCRATCH/server.log")"
stop_server

# The idle and I/O timeouts, shortened: a keep-alive connection that waits
# is closed after --idle-timeout, a body that trickles under 1 KiB/s is cut
# off once --io-timeout has passed, and a slow but steady one is served.
assert_exit "a timeout that is not a duration is refused" 2 "$SW" e2b --idle-timeout soon --keys "$keys"
assert_match "...with the flag named" "--idle-timeout 'soon'" "$LAST_ERR"
"$SW" e2b --listen 127.0.0.1:0 --keys "$keys" --idle-timeout 2s --io-timeout 3s >"$SCRATCH/url2" 2>"$SCRATCH/server2.log" &
server=$!
for _ in $(seq 100); do [[ -s "$SCRATCH/url2" ]] && break; sleep 0.1; done
port="$(sed -n 's|^http://127\.0\.0\.1:\([0-9]*\)$|\1|p' "$SCRATCH/url2")"
[[ -n "$port" ]] || fatal "no URL from the second server" "$(cat "$SCRATCH/server2.log")"
python3 - "$port" "$key" >"$SCRATCH/py2.out" 2>&1 <<'PY'
import json, select, socket, sys, threading, time
port, key = int(sys.argv[1]), sys.argv[2]
def say(ok, name, detail=""):
    print(("PASS " if ok else "FAIL ") + name + (f": {detail}" if detail and not ok else ""), flush=True)

def closed_after(s, limit):
    """Seconds until the server closes s (reading what it sends), or None."""
    start = time.monotonic()
    s.settimeout(limit)
    try:
        while s.recv(65536):
            pass
        return time.monotonic() - start
    except (socket.timeout, TimeoutError):
        return None
    except OSError:
        return time.monotonic() - start

def answer(s):
    data = b""
    while b"\r\n\r\n" not in data:
        b = s.recv(65536)
        if not b: return None
        data += b
    head, _, rest = data.partition(b"\r\n\r\n")
    n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0])
    while len(rest) < n: rest += s.recv(65536)
    return int(head.split()[1])

# A keep-alive connection, served once, then idle.
s = socket.create_connection(("127.0.0.1", port))
s.sendall(f"GET /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-KEY: {key}\r\n\r\n".encode())
st = answer(s)
say(st == 200, "a keep-alive request is served", st)
t = closed_after(s, 10)
say(t is not None and 1.5 <= t <= 4, "the idle keep-alive connection is closed after --idle-timeout 2s", t)
# A connection that never sends a byte is idle too.
s = socket.create_connection(("127.0.0.1", port))
t = closed_after(s, 10)
say(t is not None and 1.5 <= t <= 4, "a connection that sends nothing is closed after --idle-timeout 2s", t)

def post(body_len, rate, seconds):
    """POST /v2/sandboxes announcing body_len bytes, sent at `rate` bytes a
    second; (status, or None for a close without one, and the seconds until
    the server answered or closed)."""
    body = json.dumps({"templateID": "no-such-template", "metadata": {"pad": "x" * (body_len - 60)}}).encode()
    body = body.ljust(body_len)
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall((f"POST /v2/sandboxes HTTP/1.1\r\nHost: x\r\nX-API-KEY: {key}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode())
    start = time.monotonic()
    step = max(1, rate // 10)
    sent = 0
    try:
        while sent < len(body) and time.monotonic() - start < seconds:
            # The server's answer (or its close) ends the upload early.
            if select.select([s], [], [], 0.1)[0]:
                break
            s.sendall(body[sent:sent + step])
            sent += step
        t = time.monotonic() - start
        s.settimeout(10)
        st = answer(s)
    except OSError:
        t, st = time.monotonic() - start, None
    return st, t, sent

st, t, sent = post(200000, 100, 12)
say((st is None or st in (400, 408)) and t < 8,
    "a body at 100 bytes/s is refused or cut off once --io-timeout 3s has passed", (st, t, sent))
st, t, sent = post(12000, 2500, 12)
say(st in (400, 404) and sent >= 12000 and t > 4,
    "a body at 2.5 KiB/s over 5 s is read whole and answered (unknown template)", (st, t, sent))
PY
verdicts "$SCRATCH/py2.out"
kill -0 "$server" 2>/dev/null && pass "the second server is still up" || fail "the second server died: $(tail -5 "$SCRATCH/server2.log")"
finish
