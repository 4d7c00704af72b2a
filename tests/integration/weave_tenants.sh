#!/usr/bin/env bash
# Identities and tenants through weave://: per-user tokens (`controller
# token add/ls/rm`, kept hashed) and munge credentials; two users, alice and
# bob (Unix users the test makes and removes), each see and touch only their
# own sandboxes, pools, snapshots and reservations (another's is "no such
# sandbox", exit 4, as one that does not exist), an admin sees both, and a
# restarted controller still knows whose is whose (from each sandbox's owner
# label on its worker).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_cmd python3 munge unmunge runuser useradd userdel
A="alice$$" B="bob$$"
remove_users() { userdel "$A" 2>/dev/null; userdel "$B" 2>/dev/null; return 0; }
on_cleanup remove_users  # after the cluster's stop (cleanups run last first)
weave_setup t 7731 17400  # short: a worker's audit socket path must stay under 100 bytes
note() { printf "[%3d s] $1\n" $((SECONDS - _t0)) "${@:2}"; }
RPC="$SANDWEAVE_SOURCE_DIR/tests/integration/weave_rpc.py"

note "start"
for u in "$A" "$B"; do useradd --no-create-home --shell /usr/sbin/nologin "$u" || fatal "useradd $u"; done
capture ctl start
slurm_started_or_skip "start exits 0"
eval "$LAST_OUT"
ADMIN_TOKEN="$SANDWEAVE_WEAVE_TOKEN_FILE"
CDIR="$DIR/controller"
MUNGE_SOCKET="$DIR/munge/munge.socket"

# --- tokens --------------------------------------------------------------------------
note "tokens"
token() { "$SW" controller token "$@" --controller-dir "$CDIR"; }
capture token add "$A"
assert_eq "token add exits 0" 0 "$LAST_RC"
assert_match "it prints a new token once" '^[0-9a-f]{64}$' "$LAST_OUT"
(umask 077 && printf '%s\n' "$LAST_OUT" >"$SCRATCH/alice.token")
assert_eq "the token store is 0600, the controller's (root's token add acts as its user)" \
    "600 $(stat -c %U "$CDIR")" "$(stat -c '%a %U' "$CDIR/tokens")"
assert_true "it keeps the token's SHA-256, not the token" \
    grep -q "^$A $(printf '%s' "$(cat "$SCRATCH/alice.token")" | sha256sum | cut -d' ' -f1) $A user\$" "$CDIR/tokens"
assert_true "... and nowhere the token itself" bash -c "! grep -rqF '$(cat "$SCRATCH/alice.token")' '$CDIR'"
capture token add "$B" --user "$B"
(umask 077 && printf '%s\n' "$LAST_OUT" >"$SCRATCH/bob.token")
assert_exit "a second token of one name is refused" 2 token add "$A"
assert_exit "a token for a Unix user that does not exist is refused" 2 token add nobody-such-user
assert_match "... saying why" "no Unix user 'nobody-such-user'" "$LAST_ERR"
capture token add ops --admin
(umask 077 && printf '%s\n' "$LAST_OUT" >"$SCRATCH/ops.token")
capture token ls --json
# An admin token's user is the controller's own (sandweave-weave here), not root.
assert_eq "token ls lists names, users and roles" \
    "$A:$A:false $B:$B:false ops:$(stat -c %U "$CDIR"):true" \
    "$(jq -r '[.[] | "\(.name):\(.user):\(.admin)"] | join(" ")' <<<"$LAST_OUT")"

as_alice() { SANDWEAVE_WEAVE_TOKEN_FILE="$SCRATCH/alice.token" "$SW" "$@"; }
as_bob() { SANDWEAVE_WEAVE_TOKEN_FILE="$SCRATCH/bob.token" "$SW" "$@"; }
as_ops() { SANDWEAVE_WEAVE_TOKEN_FILE="$SCRATCH/ops.token" "$SW" "$@"; }

# --- each user's own sandboxes --------------------------------------------------------
note "sandboxes"
capture as_alice create --template base
assert_eq "alice creates with her token" 0 "$LAST_RC"
SA="$LAST_OUT"
capture as_bob create --template base --audit
assert_eq "bob creates with his" 0 "$LAST_RC"
SB="$LAST_OUT"
assert_eq "alice's ls shows hers only" "$SA" "$(as_alice ls --json | jq -r '.[].id')"
assert_eq "bob's ls shows his only" "$SB" "$(as_bob ls --json | jq -r '.[].id')"
assert_eq "the admin token's ls shows both" "$(printf '%s\n' "$SA" "$SB" | sort)" \
    "$("$SW" ls --json | jq -r '.[].id' | sort)"
assert_eq "an admin token of token add --admin sees both too" 2 "$(as_ops ls --json | jq length)"

no_such() {  # NAME COMMAND...: exit 4, "no such sandbox", nothing revealed
    capture "${@:2}"
    assert_eq "$1: exit 4" 4 "$LAST_RC"
    assert_match "$1: no such sandbox" "no such sandbox: $SB" "$LAST_ERR"
}
no_such "alice cannot run in bob's sandbox" as_alice run "$SB" -- echo hi
no_such "alice cannot inspect it" as_alice inspect "$SB"
no_such "alice cannot copy from it" as_alice cp "$SB:/etc/hostname" "$SCRATCH/stolen"
no_such "alice cannot export its audit log" as_alice audit export "$SB" "$SCRATCH/stolen.jsonl"
assert_true "... and no file lands" test ! -e "$SCRATCH/stolen.jsonl"
no_such "alice cannot terminate it" as_alice terminate "$SB"
no_such "alice cannot snapshot it" as_alice snapshot create "$SB"
no_such "alice cannot remove it" as_alice rm -f "$SB"
assert_eq "alice's answer for bob's sandbox is the one for a sandbox that does not exist" \
    "$(as_alice inspect sw-000000000000 2>&1 | sed 's/sw-[0-9a-f]*//')" \
    "$(as_alice inspect "$SB" 2>&1 | sed 's/sw-[0-9a-f]*//')"
capture as_alice inspect --json sw-
assert_eq "a prefix matches among alice's own only" "$SA" "$(jq -r .id <<<"$LAST_OUT")"
assert_eq "bob's sandbox still runs" "ok" "$(as_bob run "$SB" -- echo ok)"
capture "$SW" run "$SB" -- echo admin
assert_eq "the admin runs in bob's sandbox" "admin" "$LAST_OUT"

# --- pools ----------------------------------------------------------------------------------
note "pools"
capture as_bob pool create bp --size 1 --template base
assert_eq "bob makes a pool" 0 "$LAST_RC"
assert_eq "alice's pool ls does not show it" "" "$(as_alice pool ls --json | jq -r '.[].name')"
assert_exit "alice cannot acquire from it" 4 as_alice pool acquire bp
assert_exit "alice cannot resize it" 4 as_alice pool resize bp 0
assert_exit "alice cannot remove it" 4 as_alice pool rm bp
capture as_alice pool create bp --size 0 --template base
assert_eq "alice may have a pool of the same name, her own" 0 "$LAST_RC"
assert_eq "bob's pool ls shows his, with its member" "bp 1" "$(as_bob pool ls --json | jq -r '.[] | "\(.name) \(.warm)"')"
assert_eq "the admin's pool ls shows both" 2 "$("$SW" pool ls --json | jq length)"
assert_exit "alice removes hers" 0 as_alice pool rm bp
assert_eq "bob's is left" "bp 1" "$(as_bob pool ls --json | jq -r '.[] | "\(.name) \(.warm)"')"

# --- snapshots ------------------------------------------------------------------------------
note "snapshots"
capture as_bob snapshot create "$SB" --kind fs --name bobsnap
assert_eq "bob snapshots his sandbox" 0 "$LAST_RC"
SNAP="$LAST_OUT"
assert_eq "alice's snapshot ls does not show it" "" "$(as_alice snapshot ls --json | jq -r '.[].name')"
assert_eq "bob's does" "bobsnap" "$(as_bob snapshot ls --json | jq -r '.[].name')"
assert_exit "alice cannot create from it" 4 as_alice create --from-snapshot bobsnap
assert_exit "alice cannot remove it" 4 as_alice snapshot rm bobsnap
assert_eq "the admin sees it" "bobsnap" "$("$SW" snapshot ls --json | jq -r '.[].name')"
assert_exit "bob removes it" 0 as_bob snapshot rm "$SNAP"

# --- reservations (a batch's job array) ---------------------------------------------------
note "reservations"
rpc() {  # TOKEN_FILE METHOD PARAMS...
    python3 "$RPC" "127.0.0.1:$PORT" "$SANDWEAVE_WEAVE_FINGERPRINT" --token-file "$@"
}
capture rpc "$SCRATCH/bob.token" batch.reserve '{"count":2,"at_once":1,"owner":"k"}'
assert_eq "bob reserves two slots" 0 "$LAST_RC"
R="$(tail -n1 <<<"$LAST_OUT" | jq -r .result.id)"
array_runs() { squeue -h -t PENDING,RUNNING -o %F | grep -qx "$1"; }
assert_true "its job array is queued" array_runs "$R"
capture rpc "$SCRATCH/alice.token" batch.reserve '{"count":1,"at_once":1,"owner":"k"}'
assert_eq "alice reserves with the same batch key" 0 "$LAST_RC"
RA="$(tail -n1 <<<"$LAST_OUT" | jq -r .result.id)"
assert_true "... which does not end bob's array" array_runs "$R"
capture rpc "$SCRATCH/alice.token" sandbox.create "{\"template\":\"base\",\"reservation\":\"$R\",\"slot\":0}"
assert_eq "alice cannot create in bob's slot: error 4" 4 "$(tail -n1 <<<"$LAST_OUT" | jq .error.code)"
capture rpc "$SCRATCH/alice.token" batch.release "{\"id\":\"$R\"}"
assert_eq "alice cannot release bob's reservation: error 4" 4 "$(tail -n1 <<<"$LAST_OUT" | jq .error.code)"
assert_true "bob's array still runs" array_runs "$R"
assert_exit "bob releases his" 0 rpc "$SCRATCH/bob.token" batch.release "{\"id\":\"$R\"}"
assert_exit "alice releases hers" 0 rpc "$SCRATCH/alice.token" batch.release "{\"id\":\"$RA\"}"

# --- munge: a user on a cluster host -------------------------------------------------------
note "munge"
AHOME="$SCRATCH/home-$A"
install -d -o "$A" -m 0700 "$AHOME"
as_alice_munge() {  # the Unix user alice, no token: the CLI presents a munge credential
    runuser -u "$A" -- env -u SANDWEAVE_WEAVE_TOKEN_FILE HOME="$AHOME" XDG_CONFIG_HOME="$AHOME/.config" \
        SANDWEAVE_WEAVE_MUNGE_SOCKET="$MUNGE_SOCKET" "$SW" "$@"
}
capture as_alice_munge ls --json
assert_eq "alice by munge sees her sandbox (the one her token made)" "$SA" "$(jq -r '.[].id' <<<"$LAST_OUT")"
capture as_alice_munge create --template base
assert_eq "alice by munge creates" 0 "$LAST_RC"
SM="$LAST_OUT"
no_such "alice by munge cannot run in bob's" as_alice_munge run "$SB" -- true
assert_eq "alice's sandbox is a Slurm job of hers (squeue -o %u)" "$A" \
    "$(squeue -h -n "$SM" -o %u)"

# --- the user's first example, as alice (munge), on her own job ------------------------------
note "alice's first example"
capture as_alice_munge create --template base --hidepid 2 --audit
assert_eq "alice creates an audited sandbox with hidepid 2" 0 "$LAST_RC"
SX="$LAST_OUT"
assert_eq "... in a job Slurm charges to her" "$A" "$(squeue -h -n "$SX" -o %u)"
capture as_alice_munge run --user 1001 "$SX" -- id -u
assert_eq "a command runs in it as uid 1001" "1001" "$LAST_OUT"
capture as_alice_munge audit export "$SX" "$AHOME/audit.jsonl"
assert_eq "alice exports its audit log" 0 "$LAST_RC"
assert_eq "... complete" "true" "$(jq -r .complete "$AHOME/audit.jsonl.status.json")"
assert_true "... and it holds the command's exec" grep -q '"id"' "$AHOME/audit.jsonl"
assert_eq "... written as hers" "$A" "$(stat -c %U "$AHOME/audit.jsonl")"
SB_OF_A="$SX" SB_SAVED="$SB"
SB="$SX"  # no_such names $SB
no_such "bob cannot run in alice's sandbox" as_bob run "$SX" -- true
no_such "bob cannot export it" as_bob audit export "$SX" "$SCRATCH/stolen2.jsonl"
no_such "bob cannot remove it" as_bob rm -f "$SX"
assert_eq "bob's ls does not show it" "" "$(as_bob ls --json | jq -r ".[] | select(.id == \"$SX\") | .id")"
SB="$SB_SAVED"

# --- the worker daemon admits alice's relay only in her own job, for its sandboxes ----------
note "worker daemon admission"
NODE="$(as_alice_munge inspect --json "$SX" | jq -r .worker)"
WSOCK="$DIR/workers/$NODE/run/worker.sock"
JOB="$(squeue -h -n "$SX" -o %i)"
req() { printf '{"jsonrpc":"2.0","id":%s,"method":"%s","params":%s}\n' "$@"; }
capture bash -c "$(declare -f req); { req 1 sandbox.ls '{}'; sleep 2; } | runuser -u $A -- $SW __relay --socket $WSOCK"
assert_match "alice outside any job is refused by the worker daemon" \
    '"code":-32001.*may not use this worker daemon' "$LAST_OUT"
capture bash -c "$(declare -f req); { req 0 hello '{\"protocol\":1}'; req 1 sandbox.ls '{}'; req 2 sandbox.inspect '{\"id\":\"$SB\"}'; \
    req 3 sandbox.inspect '{\"id\":\"$SX\"}'; req 4 sandbox.prune '{}'; \
    req 5 sandbox.create '{\"template\":\"/etc/shadow\"}'; sleep 3; } |
    runuser -u $A -- env SLURM_CONF=$DIR/etc/slurm.conf srun --jobid $JOB --overlap --quiet $SW __relay --socket $WSOCK"
assert_eq "alice's relay in her job is served: its ls shows that job's sandbox only" "$SX" \
    "$(jq -r 'select(.id == 1) | .result.sandboxes[].id' <<<"$LAST_OUT")"
assert_match "... bob's sandbox (on that worker or not) is no such sandbox to it" "no such sandbox: $SB" \
    "$(jq -c 'select(.id == 2)' <<<"$LAST_OUT")"
assert_eq "... hers is there" "$SX" "$(jq -r 'select(.id == 3) | .result.id' <<<"$LAST_OUT")"
assert_match "... and a prune is refused" "may not prune" "$(jq -c 'select(.id == 4)' <<<"$LAST_OUT")"
assert_match "... and a template path on the worker is not read for it" \
    "not read for a remote client" "$(jq -c 'select(.id == 5)' <<<"$LAST_OUT")"
assert_no_match "... nor a line of the file quoted" 'root:' "$(jq -c 'select(.id == 5)' <<<"$LAST_OUT")"
capture bash -c "$(declare -f req); { req 0 hello '{\"protocol\":1}'; req 1 sandbox.ls '{}'; sleep 2; } |
    runuser -u $A -- env SLURM_CONF=$DIR/etc/slurm.conf srun --jobid $(squeue -h -n "$SB" -o %i) --overlap --quiet $SW __relay --socket $WSOCK"
assert_no_match "alice cannot start a step in bob's job" '"result"' "$LAST_OUT"

CRED="$(runuser -u "$A" -- munge -n --socket="$MUNGE_SOCKET")"
assert_exit "a munge credential is accepted once" 0 python3 "$RPC" "127.0.0.1:$PORT" "$SANDWEAVE_WEAVE_FINGERPRINT" --munge "$CRED" version
capture python3 "$RPC" "127.0.0.1:$PORT" "$SANDWEAVE_WEAVE_FINGERPRINT" --munge "$CRED" version
assert_match "the same credential again is refused as replayed" '"code": -32001.*[Rr]eplayed' "$LAST_OUT"
CRED="$(munge -n --socket="$MUNGE_SOCKET" --ttl=1)"
sleep 3
capture python3 "$RPC" "127.0.0.1:$PORT" "$SANDWEAVE_WEAVE_FINGERPRINT" --munge "$CRED" version
assert_match "an expired one is refused" '"code": -32001.*[Ee]xpired' "$LAST_OUT"
capture python3 "$RPC" "127.0.0.1:$PORT" "$SANDWEAVE_WEAVE_FINGERPRINT" --munge "not-a-credential" version
assert_match "garbage is refused" '"code": -32001.*munge credential was refused' "$LAST_OUT"
capture env -u SANDWEAVE_WEAVE_TOKEN_FILE HOME="$SCRATCH/nohome" SANDWEAVE_WEAVE_MUNGE_SOCKET="$MUNGE_SOCKET" "$SW" ls --json
assert_eq "root on a cluster host is an admin by munge: it sees what the admin token sees" \
    "$("$SW" ls --json | jq -r '.[].id' | sort)" "$(jq -r '.[].id' <<<"$LAST_OUT" | sort)"
assert_match "... alice's and bob's" "$SA.*$SB|$SB.*$SA" "$(jq -r '.[].id' <<<"$LAST_OUT" | tr '\n' ' ')"

# --- a restarted controller still knows whose is whose ---------------------------------------
note "restart"
weave_controller_kill
capture ctl start
assert_eq "the controller starts again" 0 "$LAST_RC"
assert_eq "alice's ls after the restart: hers only" "$(printf '%s\n' "$SA" "$SM" "$SX" | sort)" \
    "$(as_alice ls --json | jq -r '.[].id' | sort)"
no_such "alice still cannot run in bob's" as_alice run "$SB" -- true
assert_eq "bob's pool is back, bob's only" "bp" "$(as_bob pool ls --json | jq -r '.[].name')"
assert_eq "... not alice's" "" "$(as_alice pool ls --json | jq -r '.[].name')"

# --- prune and rm --all see one's own ------------------------------------------------------
note "prune, rm --all"
as_bob terminate "$SB" >/dev/null
capture as_alice prune
assert_eq "alice's prune exits 0" 0 "$LAST_RC"
own() { jq -r '.[] | select(.pool == null) | "\(.id) \(.state)"'; }  # pool members aside
assert_eq "... and leaves bob's stopped sandbox" "$SB stopped" "$(as_bob ls --json | own)"
capture as_alice rm -f --all
assert_eq "alice's rm --all exits 0" 0 "$LAST_RC"
assert_eq "... removes hers" "" "$(as_alice ls --json | jq -r '.[].id')"
assert_eq "... and not bob's" "$SB stopped" "$(as_bob ls --json | own)"
assert_exit "bob removes his pool" 0 as_bob pool rm bp

# --- a removed token ------------------------------------------------------------------------
note "token rm"
assert_exit "token rm exits 0" 0 token rm "$A"
capture as_alice ls
assert_ne "alice's removed token is refused" 0 "$LAST_RC"
assert_match "... with one line" 'handshake refused: the controller did not accept the token$' "$LAST_ERR"
assert_exit "token rm of an unknown name: exit 4" 4 token rm "$A"

finish
