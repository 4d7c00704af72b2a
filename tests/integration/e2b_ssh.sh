#!/usr/bin/env bash
# `sandweave --host ssh://... e2b`: the E2B API served from a remote worker
# (a real OpenSSH server on a loopback port, tests/helpers/sshd_fixture.sh,
# whose worker state is its own). A representative part of the e2b SDK suite
# (tests/e2b): the lifecycle, commands, files and their watch, error paths;
# the sandboxes are the worker's, never the client's.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "runsc, sshd"
[[ -x /usr/sbin/sshd ]] || skip "/usr/sbin/sshd is missing (apt-get install openssh-server)"
require_cmd ssh-keygen python3
TMPDIR=/tmp sw_setup
unset SANDWEAVE_HOST SSH_AUTH_SOCK
source "$SANDWEAVE_SOURCE_DIR/tests/helpers/sshd_fixture.sh"
source "$SANDWEAVE_SOURCE_DIR/tests/helpers/e2b_fixture.sh"
e2b_fixture_init

WSTATE="$(mktemp -d /tmp/sw-it-e2b-worker.XXXXXX)"
worker_cleanup() {
    local client_state=$STATE
    STATE=$WSTATE
    sw_cleanup
    STATE=$client_state
}
on_cleanup worker_cleanup
stop_sshd() { sshd_stop "$SSHD_CONFIG"; }
on_cleanup stop_sshd # runs first
sshd_fixture_init "$SCRATCH/sshd" "$WSTATE" || fatal "ssh keys and sshd config made"
sshd_start || fatal "sshd starts on 127.0.0.1:$SSHD_PORT" "$(tail -n 5 "$SSHD_CONFIG.log")"
: >"$SCRATCH/sshd/empty_ssh_config"
RSW=(env -u SANDWEAVE_STATE_DIR "$SW" --host "ssh://root@127.0.0.1:$SSHD_PORT"
    --identity "$SSHD_USERKEY" --known-hosts "$SSHD_KNOWN_HOSTS"
    --ssh-config "$SCRATCH/sshd/empty_ssh_config" --remote-binary "$SW")

e2b_start "${RSW[@]}"
e2b_suite '^(create, isRunning|commands\.run|background command|files: write|files\.watchDir|error paths)'

# Where the sandboxes were: a sandbox made through the server now is the worker's.
id="$(E2B_API_URL="$E2B_URL" E2B_SANDBOX_URL="$E2B_URL" E2B_API_KEY="$ALICE" NODE_PATH="$E2B_DIR/node_modules" \
    node -e "require('e2b').Sandbox.create().then(s => console.log(s.sandboxId))" 2>"$SCRATCH/create.err")"
assert_match "a sandbox made through the server" '^sw-' "$id"
assert_true "it is in the worker's state" test -d "$WSTATE/sandboxes/$id"
assert_true "not in the client's" test ! -e "$STATE/sandboxes/$id"
finish
