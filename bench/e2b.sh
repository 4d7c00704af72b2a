#!/usr/bin/env bash
# The E2B SDK through `sandweave e2b` vs sandweave's own Python SDK, on the
# same machine in the same run (medians, ms, and the ratio E2B / Python):
#   cycle   create -> run('true') -> kill (E2B) vs Sandbox() -> run('true')
#           -> terminate -> close (Python)
#   run     commands.run('true') vs env.run('true') on one running sandbox
#   conc8   sandboxes per second, 8 cycles at once (E2B: 8 concurrent
#           promises on one SDK; Python: 8 threads), median of ROUNDS rounds;
#           its ratio is Python / E2B, so above 1 means E2B is slower there too
# Usage: bench/e2b.sh [RUNS] [TEMPLATE] [ROUNDS]   (root; a built tree; tests/e2b's
# node_modules from `npm ci`). Private state directory, removed at the end.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$top/bench/lib.sh"
runs="${1:-20}" template="${2:-base}" rounds="${3:-3}"
sw="${SANDWEAVE_BIN:-$top/build/sandweave}"
[[ -d "$top/tests/e2b/node_modules/e2b" ]] || { echo "e2b.sh: run npm ci in tests/e2b first" >&2; exit 1; }
state="$(mktemp -d /var/tmp/sw-bench-e2b.XXXXXX)"
export SANDWEAVE_STATE_DIR="$state"
server=""
cleanup() {
  [[ -n "$server" ]] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  "$sw" rm -f --all >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT
key="$("$sw" e2b key add bench --keys "$state/keys.json")"
"$sw" e2b --listen 127.0.0.1:0 --keys "$state/keys.json" >"$state/url" 2>"$state/server.log" &
server=$!
for _ in $(seq 100); do [[ -s "$state/url" ]] && break; sleep 0.1; done
url="$(head -1 "$state/url")"

e2b_json="$(E2B_API_URL="$url" E2B_SANDBOX_URL="$url" E2B_API_KEY="$key" node "$top/bench/e2b.mjs" "$runs" "$template" "$rounds")"
py_json="$(SANDWEAVE_BIN="$sw" PYTHONPATH="$top/python" python3 - "$runs" "$template" "$rounds" <<'PY'
import json, sys, time
from concurrent.futures import ThreadPoolExecutor
from sandweave import Sandbox
runs, template, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
cycle, run = [], []
for _ in range(runs):
    t0 = time.perf_counter()
    with Sandbox(template=template) as env:
        env.run("true")
        env.terminate()
    cycle.append((time.perf_counter() - t0) * 1000)
with Sandbox(template=template) as env:
    env.run("true")
    for _ in range(runs):
        t0 = time.perf_counter()
        env.run("true")
        run.append((time.perf_counter() - t0) * 1000)
    env.terminate()
def one(_):
    with Sandbox(template=template) as env:
        env.run("true")
        env.terminate()
conc8 = []
with ThreadPoolExecutor(8) as pool:
    for _ in range(rounds):
        t0 = time.perf_counter()
        list(pool.map(one, range(8)))
        conc8.append(8 / (time.perf_counter() - t0))
print(json.dumps({"cycle": cycle, "run": run, "conc8": conc8}))
PY
)"
for what in cycle run; do
  e="$(jq -r ".$what[]" <<<"$e2b_json" | median)"
  p="$(jq -r ".$what[]" <<<"$py_json" | median)"
  printf '%-6s e2b %8.1f ms   python %8.1f ms   ratio %s\n' "$what" "$e" "$p" "$(ratio "$e" "$p")"
done
e="$(jq -r '.conc8[]' <<<"$e2b_json" | median)"
p="$(jq -r '.conc8[]' <<<"$py_json" | median)"
printf '%-6s e2b %8.2f /s   python %8.2f /s   ratio %s\n' conc8 "$e" "$p" "$(ratio "$p" "$e")"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
