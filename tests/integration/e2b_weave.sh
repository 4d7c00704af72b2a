#!/usr/bin/env bash
# `sandweave e2b` whose Api is weave:// (the one-machine Slurm cluster and its
# controller, scripts/weave-controller.sh): a small part of the e2b SDK suite
# (the lifecycle, a command, the directory watch), with the sandbox on a
# worker that Slurm chose, never in the client's state.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_cmd python3
weave_setup e 7683 17690 # short: a worker's audit socket path must stay under 100 bytes
source "$SANDWEAVE_SOURCE_DIR/tests/helpers/e2b_fixture.sh"
e2b_fixture_init

capture ctl start
slurm_started_or_skip "the cluster and its controller start"
eval "$LAST_OUT"
export SANDWEAVE_HOST

e2b_start "$SW"
e2b_suite '^(create, isRunning|commands\.run|files\.watchDir)'

id="$(E2B_API_URL="$E2B_URL" E2B_SANDBOX_URL="$E2B_URL" E2B_API_KEY="$ALICE" NODE_PATH="$E2B_DIR/node_modules" \
    node -e "require('e2b').Sandbox.create().then(s => console.log(s.sandboxId))" 2>"$SCRATCH/create.err")"
assert_match "a sandbox made through the server" '^sw-' "$id"
capture "$SW" ls --json
assert_match "it is on a worker" '^w[123]$' "$(jq -r --arg id "$id" '.[] | select(.id == $id) | .worker' <<<"$LAST_OUT")"
assert_true "not in the client's state" test ! -e "$STATE/sandboxes/$id"
finish
