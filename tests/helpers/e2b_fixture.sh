# shellcheck shell=bash
# `sandweave e2b` for the tests that drive it with the real e2b SDK
# (tests/integration/e2b*.sh). Sourced after lib.sh, never run.
#
#   e2b_fixture_init            skips without node or the installed SDK; sets
#                               E2B_DIR, E2B_KEYS and the keys ALICE and BOB
#   e2b_start SW_COMMAND...     starts `SW_COMMAND... e2b` on a free loopback
#                               port (stopped at cleanup); sets E2B_URL, E2B_PID
#   e2b_suite [PATTERN]         runs tests/e2b/e2b.test.mjs (only the tests
#                               whose names match PATTERN) against it

e2b_fixture_init() {
    require_cmd node
    E2B_DIR="$SANDWEAVE_SOURCE_DIR/tests/e2b"
    [[ -d "$E2B_DIR/node_modules/e2b" ]] ||
        skip "the e2b SDK is not installed (cd tests/e2b && npm ci; scripts/test.sh does it)"
    E2B_KEYS="$SCRATCH/keys.json"
    ALICE="$("$SW" e2b key add alice --keys "$E2B_KEYS")" || fatal "key add alice"
    BOB="$("$SW" e2b key add bob --keys "$E2B_KEYS")" || fatal "key add bob"
}

_e2b_stop() { [[ -n "${E2B_PID:-}" ]] && kill "$E2B_PID" 2>/dev/null && wait "$E2B_PID" 2>/dev/null; }

e2b_start() {  # SW_COMMAND...
    "$@" e2b --listen 127.0.0.1:0 --keys "$E2B_KEYS" >"$SCRATCH/url" 2>"$SCRATCH/server.log" &
    E2B_PID=$!
    on_cleanup _e2b_stop
    local _
    for _ in $(seq 300); do [[ -s "$SCRATCH/url" ]] && break; sleep 0.1; done
    E2B_URL="$(head -1 "$SCRATCH/url")"
    [[ "$E2B_URL" =~ ^http://127\.0\.0\.1:[0-9]+$ ]] && pass "serves on $E2B_URL" ||
        fatal "no URL" "$(cat "$SCRATCH/server.log")"
}

e2b_suite() {  # [PATTERN]
    local args=(--test --test-concurrency=1)
    [[ -n "${1:-}" ]] && args+=(--test-name-pattern="$1")
    E2B_API_URL="$E2B_URL" E2B_SANDBOX_URL="$E2B_URL" E2B_API_KEY="$ALICE" SW_E2B_BOB_KEY="$BOB" \
        SW_E2B_HIDEPID_TEMPLATE="${E2B_HIDEPID_TEMPLATE:-}" \
        node "${args[@]}" "$E2B_DIR/e2b.test.mjs" >"$SCRATCH/node.out" 2>&1
    local rc=$?
    cat "$SCRATCH/node.out"
    ((rc == 0)) && pass "the e2b SDK suite${1:+ ($1)}" ||
        fail "the e2b SDK suite (node exit $rc)" "$(tail -20 "$SCRATCH/server.log")"
    kill -0 "$E2B_PID" 2>/dev/null && pass "the server is still up" ||
        fail "the server died: $(tail -5 "$SCRATCH/server.log")"
}
