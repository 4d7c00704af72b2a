#!/usr/bin/env bash
# Weave through weave://: the one-machine cluster and a controller in front of
# it (scripts/weave-controller.sh). The user's first example (CLI and SDK)
# runs on a worker Slurm chose, with hidepid 2 and an audit export that lands
# on the client complete; five sandboxes land on workers and ls names each
# one's worker; rm ends the Slurm job; a restarted controller finds its
# sandboxes again from Slurm; a client without the token, with a wrong one,
# or facing a changed certificate is refused with one line; stop leaves
# nothing running.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_cmd python3
weave_setup cluster 7643 17500
note() { printf "[%3d s] $1\n" $((SECONDS - _t0)) "${@:2}"; }

note "start"
capture ctl start
slurm_started_or_skip "start exits 0"
assert_match "start prints the client's settings" "SANDWEAVE_HOST=weave://127.0.0.1:$PORT" "$LAST_OUT"
eval "$LAST_OUT"
CDIR="$DIR/controller"
assert_eq "the controller's directory is 0700" 700 "$(stat -c %a "$CDIR")"
assert_eq "its key is 0600" 600 "$(stat -c %a "$CDIR/controller.key")"
assert_eq "its token is 0600" 600 "$(stat -c %a "$CDIR/token")"
assert_eq "it listens on loopback only" "127.0.0.1:$PORT" "$(ss -Hltn "sport = :$PORT" | awk '{print $4}')"

# --- the user's first example, through weave:// -----------------------------------
note "first example"
capture "$SW" create --template base --hidepid 2 --audit
assert_eq "create exits 0" 0 "$LAST_RC"
ID="$LAST_OUT"
assert_match "create prints the worker's sandbox id" '^sw-[0-9a-f]+$' "$ID"
capture "$SW" run --user 1001:1001 "$ID" -- sh -c 'id; ls /proc'
assert_eq "run exits 0" 0 "$LAST_RC"
assert_match "the command runs as 1001:1001" '^uid=1001 gid=1001' "$LAST_OUT"
assert_no_match "hidepid 2 hides pid 1 from it" $'(^|\n)1(\n|$)' "$LAST_OUT"
capture "$SW" ls --json
worker="$(jq -r --arg id "$ID" '.[] | select(.id == $id) | .worker' <<<"$LAST_OUT")"
assert_match "ls names its worker" '^w[123]$' "$worker"
assert_eq "its Slurm job is named after it and runs on that worker" "$ID RUNNING $worker" \
    "$(squeue -h -o '%j %T %N' | grep -F "$ID")"
LOG="$SCRATCH/client/episode.jsonl"
mkdir -p "$SCRATCH/client"
capture "$SW" audit export "$ID" "$LOG"
assert_eq "audit export exits 0" 0 "$LAST_RC"
assert_true "the export lands on the client" test -s "$LOG"
assert_eq "its status says complete" true "$(jq -r .complete "$LOG.status.json")"
assert_eq "its sha256 is the worker's" "$(jq -r .sha256 "$LOG.status.json")" "$(sha256sum "$LOG" | cut -d' ' -f1)"
assert_true "the worker wrote no file at PATH" test ! -e "$DIR/workers/$worker/state/$LOG"
assert_exit "terminate exits 0" 0 "$SW" terminate "$ID"
assert_exit "rm exits 0" 0 "$SW" rm "$ID"
assert_eq "rm ends its Slurm job" "" "$(squeue -h -o '%j %T' -t RUNNING,PENDING | grep -F "$ID" || true)"
assert_eq "ls no longer shows it" "" "$("$SW" ls --json | jq -r --arg id "$ID" '.[] | select(.id == $id) | .id')"

# --- the SDK's connection= ----------------------------------------------------------------
note "SDK"
cat >"$SCRATCH/first.py" <<'PY'
import sys
from sandweave import Sandbox
env = Sandbox(template="base", hidepid=2, audit=True, connection=sys.argv[1])
try:
    result = env.run("id; ls /proc", user="1001:1001")
    report = env.audit_log(sys.argv[2])
    print(report["complete"], report["dropped"])
finally:
    env.terminate()
    env.close()
PY
capture env PYTHONPATH="$SANDWEAVE_SOURCE_DIR/python" SANDWEAVE_BIN="$SW" python3 "$SCRATCH/first.py" "$SANDWEAVE_HOST" "$SCRATCH/client/sdk.jsonl"
assert_eq "the SDK's first example through weave:// prints True 0" "True 0" "$LAST_OUT"

# --- five sandboxes on the workers ------------------------------------------------------
note "five sandboxes"
ids=()
for i in 1 2 3 4 5; do ids+=("$("$SW" create --template base)"); done
capture "$SW" ls --json
assert_eq "ls shows the five, each with a worker" 5 \
    "$(jq '[.[] | select(.worker | test("^w[123]$"))] | length' <<<"$LAST_OUT")"
assert_eq "Slurm runs one job per sandbox" 5 "$(squeue -h -t RUNNING -o %j | grep -c '^sw-')"

# --- a restarted controller finds them from Slurm -----------------------------------
note "controller restart"
weave_controller_kill
capture ctl start
assert_eq "the controller starts again" 0 "$LAST_RC"
capture "$SW" ls --json
assert_eq "after the restart ls shows the five with their workers" 5 \
    "$(jq '[.[] | select(.worker | test("^w[123]$"))] | length' <<<"$LAST_OUT")"
capture "$SW" run "${ids[2]}" -- echo still here
assert_eq "a sandbox from before the restart still runs commands" "still here" "$LAST_OUT"
for id in "${ids[@]}"; do "$SW" rm -f "$id" >/dev/null || fail "rm -f $id"; done
assert_eq "rm of the five ends their jobs" 0 "$(squeue -h -t RUNNING,PENDING -o %j | grep -c '^sw-' || true)"

# --- no room: pending until Slurm grants a slot -------------------------------------
note "pending"
FILLERS=()
slurm_fill 12 filler
((${#FILLERS[@]} == 12)) || fail "12 fillers: Slurm granted ${#FILLERS[@]}"
"$SW" create --template base >"$SCRATCH/pending.id" 2>"$SCRATCH/pending.err" &
creating=$!
pending_listed() { "$SW" ls --json | jq -e '[.[] | select(.state == "pending" and (.id | startswith("job-")) and .worker == "-")] | length == 1' >/dev/null; }
assert_true "with every slot taken, the create is pending in ls" wait_for 10 pending_listed
scancel "${FILLERS[0]}"
wait "$creating"
assert_eq "it is created once Slurm frees a slot" 0 "$?"
id="$(cat "$SCRATCH/pending.id")"
assert_eq "... on the freed worker" "$(squeue -h -o '%j %N' | awk -v id="$id" '$1 == id { print $2 }')" \
    "$("$SW" inspect --json "$id" | jq -r .worker)"
"$SW" rm -f "$id" >/dev/null || fail "rm -f $id"
scancel "${FILLERS[@]:1}"

# --- refusals ------------------------------------------------------------------------------
note "refusals"
NOBODY="$SCRATCH/nobody"
mkdir -p "$NOBODY"
# (and no munged socket: a host's own munged would otherwise vouch for root)
capture env -u SANDWEAVE_WEAVE_TOKEN_FILE HOME="$NOBODY" XDG_CONFIG_HOME="$NOBODY" \
    SANDWEAVE_WEAVE_MUNGE_SOCKET="$NOBODY/no-munged.socket" "$SW" ls
assert_ne "a client without a token is refused" 0 "$LAST_RC"
assert_match "... with one line saying a token is needed" '^sandweave: weave://127\.0\.0\.1:[0-9]+: handshake refused: the controller requires a token' "$LAST_ERR"
assert_eq "... and only that line" 1 "$(line_count "$LAST_ERR")"
printf 'not-the-token\n' >"$SCRATCH/wrong"
chmod 600 "$SCRATCH/wrong"
capture env SANDWEAVE_WEAVE_TOKEN_FILE="$SCRATCH/wrong" "$SW" ls
assert_ne "a client with a wrong token is refused" 0 "$LAST_RC"
assert_match "... with one line" '^sandweave: weave://[^ ]+: handshake refused: the controller did not accept the token$' "$LAST_ERR"
KH="$SCRATCH/known_hosts"
capture env -u SANDWEAVE_WEAVE_FINGERPRINT "$SW" --weave-known-hosts "$KH" ls
assert_ne "an unknown certificate is refused" 0 "$LAST_RC"
assert_match "... naming its fingerprint and how to accept it" "unknown controller certificate $SANDWEAVE_WEAVE_FINGERPRINT; .*--accept-new-host-key" "$LAST_ERR"
assert_exit "--accept-new-host-key accepts it" 0 env -u SANDWEAVE_WEAVE_FINGERPRINT "$SW" --weave-known-hosts "$KH" --accept-new-host-key ls
old_fp="$SANDWEAVE_WEAVE_FINGERPRINT"
weave_controller_kill
capture ctl --new-cert start
eval "$LAST_OUT"
assert_ne "--new-cert makes a new certificate" "$old_fp" "$SANDWEAVE_WEAVE_FINGERPRINT"
capture env -u SANDWEAVE_WEAVE_FINGERPRINT "$SW" --weave-known-hosts "$KH" --accept-new-host-key ls
assert_eq "a changed certificate is refused (exit 255)" 255 "$LAST_RC"
assert_match "... loudly" "THE CONTROLLER'S CERTIFICATE HAS CHANGED: it is $SANDWEAVE_WEAVE_FINGERPRINT, $KH:1 has $old_fp" "$LAST_ERR"
capture env SANDWEAVE_WEAVE_FINGERPRINT="$old_fp" "$SW" ls
assert_eq "a certificate that is not the pinned one is refused" 255 "$LAST_RC"
assert_match "... loudly" "THE CONTROLLER'S CERTIFICATE IS NOT THE PINNED ONE" "$LAST_ERR"
assert_exit "the new pinned fingerprint and token work" 0 "$SW" ls

# Every rm above raced the controller's Slurm poll: a job it was ending
# itself is neither adopted back nor cancelled again as a stranger's.
assert_no_match "the controller never took a job it was ending for one whose sandbox is unknown" \
    'does not know its sandbox' "$(cat "$DIR/log/controller.log")"

# --- stop ----------------------------------------------------------------------------------
note "stop"
capture env -u SANDWEAVE_HOST "$CTL" --dir "$DIR" --port "$PORT" --sandweave "$SW" stop
assert_eq "stop exits 0" 0 "$LAST_RC"
assert_eq "nothing listens on the controller's port" "" "$(ss -Hltn "sport = :$PORT")"
assert_eq "no controller, Slurm or sandbox process is left" "" \
    "$(pgrep -af -- "$DIR" | grep -v -e '^[0-9]* pgrep ' || true)"
finish
