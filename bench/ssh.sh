#!/usr/bin/env bash
# `run -- true` over SSH vs locally, as medians over
# repeated runs, interleaved, and ratios, all against a loopback OpenSSH server
# this script starts (tests/helpers/sshd_fixture.sh) with a worker state
# directory of its own:
#   local CLI      SANDWEAVE_STATE_DIR=worker sandweave run ID -- true
#   ssh CLI        sandweave --host ssh://root@127.0.0.1:PORT run ID -- true
#                  (libssh; a new session per call: connect, key exchange,
#                  auth, exec `sandweave serve --stdio`, hello, run)
#   OpenSSH plain  ssh -i userkey ... root@127.0.0.1 sandweave run ID -- true
#   create + first command, locally and with the ssh CLI
#   live session   one connection held open, sandbox.run of true repeated:
#                  a small Python client speaking docs/protocol.md to
#                  `sandweave serve --stdio` (a) spawned locally and (b) over
#                  `ssh ... sandweave serve --stdio` (OpenSSH's channel, not
#                  libssh's: an approximation of what an SDK holding one
#                  libssh session would see).
# Targets: a live session <= local + 2 ms; per CLI call no slower
# than the ssh command line.
# Usage: bench/ssh.sh [REPS]   (default 30, at least 30; root, a built tree, sshd)
set -euo pipefail
reps="${1:-30}"
((reps >= 30)) || { echo "bench/ssh.sh: REPS must be at least 30" >&2; exit 2; }
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-$top/build/sandweave}"
[[ -x "$sw" ]] || { echo "bench/ssh.sh: $sw is not built" >&2; exit 2; }
[[ -x /usr/sbin/sshd ]] || { echo "bench/ssh.sh: needs /usr/sbin/sshd (openssh-server)" >&2; exit 77; }
command -v ssh >/dev/null || { echo "bench/ssh.sh: needs ssh (openssh-client)" >&2; exit 77; }
unset SANDWEAVE_HOST SANDWEAVE_STATE_DIR SSH_AUTH_SOCK

work="$(mktemp -d /tmp/sw-bench-ssh.XXXXXX)"
wstate="$work/worker"
mkdir -p "$wstate"
# shellcheck source=../tests/helpers/sshd_fixture.sh
source "$top/tests/helpers/sshd_fixture.sh"
lw() { SANDWEAVE_STATE_DIR="$wstate" "$sw" "$@"; }
cleanup() {
    sshd_stop || true
    lw ls --ids 2>/dev/null | xargs -r env SANDWEAVE_STATE_DIR="$wstate" "$sw" rm >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

sshd_fixture_init "$work/sshd" "$wstate"
sshd_start
: >"$work/sshd/empty_ssh_config"
host="ssh://root@127.0.0.1:$SSHD_PORT"
rsw=("$sw" --host "$host" --identity "$SSHD_USERKEY" --known-hosts "$SSHD_KNOWN_HOSTS"
    --ssh-config "$work/sshd/empty_ssh_config" --remote-binary "$sw")
ossh=(ssh -F /dev/null -i "$SSHD_USERKEY" -o IdentitiesOnly=yes -o BatchMode=yes
    -o UserKnownHostsFile="$SSHD_KNOWN_HOSTS" -o StrictHostKeyChecking=yes -p "$SSHD_PORT" root@127.0.0.1)

us() { echo "${EPOCHREALTIME/./}"; }  # microseconds, no fork
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio
ms() { awk -v u="$1" 'BEGIN {printf "%.1f", u/1000}'; }

echo "warming up..." >&2
lw image build base >/dev/null 2>&1
id=$(lw create)
lw run "$id" -- true
"${rsw[@]}" run "$id" -- true
"${ossh[@]}" "$sw" run "$id" -- true

local_run=() ssh_run=() openssh_run=() local_first=() ssh_first=()
for ((i = 0; i < reps; i++)); do
    t0=$(us); lw run "$id" -- true; t1=$(us)
    local_run+=($((t1 - t0)))
    t0=$(us); "${rsw[@]}" run "$id" -- true; t1=$(us)
    ssh_run+=($((t1 - t0)))
    t0=$(us); "${ossh[@]}" "$sw" run "$id" -- true; t1=$(us)
    openssh_run+=($((t1 - t0)))
done
for ((i = 0; i < reps; i++)); do
    t0=$(us); n=$(lw create); lw run "$n" -- true; t1=$(us)
    local_first+=($((t1 - t0)))
    lw rm "$n" >/dev/null
    t0=$(us); n=$("${rsw[@]}" create); "${rsw[@]}" run "$n" -- true; t1=$(us)
    ssh_first+=($((t1 - t0)))
    lw rm "$n" >/dev/null
done

# The live sessions: one connection each, REPS sandbox.run of true.
live() {  # LABEL COMMAND... (a `serve --stdio` to talk to)
    echo "live session: $1..." >&2
    shift
    python3 - "$id" "$reps" "$@" <<'PY'
import io, json, subprocess, sys, time
sid, reps, cmd = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
t0 = time.perf_counter()
p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
out = io.BufferedReader(p.stdout)
nid = 0
def call(method, params):
    global nid
    nid += 1
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": nid, "method": method, "params": params}) + "\n").encode())
    while True:
        line = out.readline()
        if not line:
            sys.exit("serve closed the connection")
        m = json.loads(line)
        if m.get("id") == nid:
            if "error" in m:
                sys.exit("%s: %s" % (method, m["error"]))
            return m["result"]
call("hello", {"protocol": 1, "client": "bench/ssh.sh"})
setup = time.perf_counter() - t0
call("sandbox.run", {"id": sid, "argv": ["true"]})  # warm
times = []
for _ in range(reps):
    t = time.perf_counter()
    r = call("sandbox.run", {"id": sid, "argv": ["true"]})
    times.append(time.perf_counter() - t)
    assert r["exit_code"] == 0, r
p.stdin.close()
p.wait()
times.sort()
n = len(times)
med = times[n // 2] if n % 2 else (times[n // 2 - 1] + times[n // 2]) / 2
print("%d %d" % (round(setup * 1e6), round(med * 1e6)))
PY
}
read -r live_local_setup live_local < <(live local env SANDWEAVE_STATE_DIR="$wstate" "$sw" serve --stdio)
read -r live_ssh_setup live_ssh < <(live ssh "${ossh[@]}" "$sw" serve --stdio)

m_local=$(printf '%s\n' "${local_run[@]}" | median)
m_ssh=$(printf '%s\n' "${ssh_run[@]}" | median)
m_openssh=$(printf '%s\n' "${openssh_run[@]}" | median)
m_lfirst=$(printf '%s\n' "${local_first[@]}" | median)
m_sfirst=$(printf '%s\n' "${ssh_first[@]}" | median)

echo "sandweave over ssh: medians of $reps runs (ms); worker and client on this machine, sshd on 127.0.0.1"
printf '%-58s %8s %s\n' "run -- true, local CLI" "$(ms "$m_local")" ""
printf '%-58s %8s %s\n' "run -- true, ssh CLI (libssh, new session per call)" "$(ms "$m_ssh")" \
    "x$(ratio "$m_ssh" "$m_local") local"
printf '%-58s %8s %s\n' "run -- true, OpenSSH: ssh host sandweave run ID -- true" "$(ms "$m_openssh")" \
    "x$(ratio "$m_openssh" "$m_local") local"
printf '%-58s %8s %s\n' "  ssh CLI / OpenSSH (target <= 1.00)" "" "$(ratio "$m_ssh" "$m_openssh")"
printf '%-58s %8s %s\n' "create + first command, local CLI" "$(ms "$m_lfirst")" ""
printf '%-58s %8s %s\n' "create + first command, ssh CLI" "$(ms "$m_sfirst")" \
    "x$(ratio "$m_sfirst" "$m_lfirst") local, +$(ms $((m_sfirst - m_lfirst))) ms"
printf '%-58s %8s %s\n' "live session, local serve --stdio: sandbox.run true" "$(ms "$live_local")" \
    "(setup $(ms "$live_local_setup") ms)"
printf '%-58s %8s %s\n' "live session over OpenSSH (ssh ... serve --stdio)" "$(ms "$live_ssh")" \
    "(setup $(ms "$live_ssh_setup") ms)"
printf '%-58s %8s %s\n' "  live ssh session - local CLI (target <= +2 ms)" \
    "$(awk -v a="$live_ssh" -v b="$m_local" 'BEGIN {printf "%+.1f", (a-b)/1000}')" ""
printf '%-58s %8s %s\n' "  live ssh session - live local session" \
    "$(awk -v a="$live_ssh" -v b="$live_local" 'BEGIN {printf "%+.1f", (a-b)/1000}')" ""
