#!/usr/bin/env bash
# sandweave e2b against the real e2b JavaScript SDK (tests/e2b, pinned by its
# package-lock.json and installed there by scripts/test.sh with `npm ci`):
# a server on an ephemeral loopback port with its own state directory and
# keys file, two identities, and a hidepid-2 audited template; the suite is
# tests/e2b/e2b.test.mjs (node --test).
source "$(dirname "$0")/lib.sh"
sw_setup
require_cmd node

E2B_DIR="$SANDWEAVE_SOURCE_DIR/tests/e2b"
[[ -d "$E2B_DIR/node_modules/e2b" ]] ||
    skip "the e2b SDK is not installed (cd tests/e2b && npm ci; scripts/test.sh does it)"

keys="$SCRATCH/keys.json"
assert_exit "key add alice" 0 "$SW" e2b key add alice --keys "$keys"
alice="$LAST_OUT"
assert_exit "key add bob" 0 "$SW" e2b key add bob --keys "$keys"
bob="$LAST_OUT"
assert_exit "a second alice is refused" 2 "$SW" e2b key add alice --keys "$keys"
assert_exit "a bad name is refused" 2 "$SW" e2b key add "a b" --keys "$keys"
[[ "$(stat -c %a "$keys")" == 600 ]] && pass "the keys file is 0600" || fail "keys file mode $(stat -c %a "$keys")"
grep -q "$alice" "$keys" && fail "the keys file holds a key in clear" || pass "keys are stored hashed"

mkdir -p "$STATE/templates"
printf 'description: E2B hidepid test\nextends: base\nruntime_options:\n  hidepid: 2\n  audit: true\n' \
    >"$STATE/templates/e2b-hidepid.yaml"

"$SW" e2b --listen 127.0.0.1:0 --keys "$keys" >"$SCRATCH/url" 2>"$SCRATCH/server.log" &
server=$!
stop_server() { kill "$server" 2>/dev/null; wait "$server" 2>/dev/null; }
on_cleanup stop_server
for _ in $(seq 100); do [[ -s "$SCRATCH/url" ]] && break; sleep 0.1; done
url="$(head -1 "$SCRATCH/url")"
[[ "$url" =~ ^http://127\.0\.0\.1:[0-9]+$ ]] && pass "serves on $url" || fatal "no URL" "$(cat "$SCRATCH/server.log")"

E2B_API_URL="$url" E2B_SANDBOX_URL="$url" E2B_API_KEY="$alice" SW_E2B_BOB_KEY="$bob" \
    SW_E2B_HIDEPID_TEMPLATE=e2b-hidepid \
    node --test --test-concurrency=1 "$E2B_DIR/e2b.test.mjs" >"$SCRATCH/node.out" 2>&1
rc=$?
cat "$SCRATCH/node.out"
((rc == 0)) && pass "the e2b SDK suite" || fail "the e2b SDK suite (node exit $rc)" "$(tail -20 "$SCRATCH/server.log")"

kill -0 "$server" 2>/dev/null && pass "the server is still up" || fail "the server died: $(tail -5 "$SCRATCH/server.log")"
kill -TERM "$server"
wait "$server"
rc=$?
((rc == 0)) && pass "SIGTERM stops it (exit 0)" || fail "server exit $rc: $(tail -5 "$SCRATCH/server.log")"
finish
