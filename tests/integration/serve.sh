#!/usr/bin/env bash
# `sandweave serve` (--stdio and --socket) against docs/protocol.md: every
# method, streaming, stdin, concurrency, cancel/signal, exit codes, bad input,
# disconnects and socket permissions. The assertions are in serve_test.py
# (Python standard library only); this script gives it a private state
# directory and, through lib.sh, removes every sandbox afterwards, also when the
# test fails or is interrupted. Arguments go to unittest, for example
# `bash tests/integration/serve.sh I_Streams L_BadInput.test_bad_ids`.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "runsc, and a uid-1001 peer for the socket test"
require_cmd setpriv
[[ -x /usr/bin/python3 ]] || require_cmd python3
sw_setup

PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1  # no __pycache__ in the source tree
[[ -x "$PY" ]] || PY="$(command -v python3)"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# The serve children get --state-dir "$STATE" on their command line, so lib.sh's
# cleanup (pgrep -f "$STATE") also ends any of them a failed test left behind.
SANDWEAVE="$SW" SANDWEAVE_STATE_DIR="$STATE" SERVE_TEST_SCRATCH="$SCRATCH" \
    SANDWEAVE_SOURCE_DIR="$SANDWEAVE_SOURCE_DIR" \
    timeout -k 10 600 "$PY" "$HERE/serve_test.py" "$@"
rc=$?
assert_eq "serve_test.py: every expectation of docs/protocol.md holds (see the FAIL/ERROR lines above)" 0 "$rc"

# serve_test.py removes what it made; nothing of a sandbox may be left.
assert_no_leftovers "after serve_test.py"
finish
