#!/usr/bin/env bash
# Commands through the guest agent: byte-exact streams, exit codes, users,
# timeouts that take the whole tree, a channel no guest user can reach,
# detached commands (ps, logs, kill, wait), a real pty under tmux, execve
# records in the audit log, memory snapshots, and the visible fallback for a
# sandbox without an agent.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup
require_cmd jq tmux sha256sum cmp

ID=$(sw create) || fatal "create"
assert_eq "a new sandbox records that it has the agent" true "$(sw inspect "$ID" | jq -r '.agent')"

# --- streams ---------------------------------------------------------------------------------
head -c 8388608 /dev/urandom >"$SCRATCH/random"
sw run "$ID" -- cat <"$SCRATCH/random" >"$SCRATCH/random.back"
assert_true "8 MiB of random bytes through stdin and stdout come back byte-exact" \
    cmp -s "$SCRATCH/random" "$SCRATCH/random.back"
want=$(head -c 104857600 /dev/zero | sha256sum | cut -d' ' -f1)
got=$(sw run "$ID" -- head -c 104857600 /dev/zero | sha256sum | cut -d' ' -f1)
assert_eq "100 MiB of stdout, nothing lost" "$want" "$got"
got=$(head -c 104857600 /dev/zero | sw run "$ID" -- sha256sum | cut -d' ' -f1)
assert_eq "100 MiB of stdin, nothing lost" "$want" "$got"
capture sw run "$ID" -- sh -c 'echo to-out; echo to-err >&2'
assert_eq "stdout stays stdout" to-out "$LAST_OUT"
assert_eq "stderr stays stderr" to-err "$LAST_ERR"
capture sh -c "printf abc | \"$SW\" run '$ID' -- wc -c"
assert_eq "stdin EOF reaches the command" 3 "$(echo "$LAST_OUT" | tr -d ' ')"
capture sw run "$ID" -- cat </dev/null
assert_eq "an empty stdin is an immediate EOF" "0:" "$LAST_RC:$LAST_OUT"

# --- exit codes, users, cwd, env ----------------------------------------------------------------
assert_exit "exit status passes through" 3 sw run "$ID" -- sh -c 'exit 3'
assert_exit "not found: 127" 127 sw run "$ID" -- /no/such/program
assert_match "not found: says so" "command not found in sandbox $ID: /no/such/program" "$LAST_ERR"
assert_exit "not executable: 126" 126 sw run "$ID" -- /etc/hostname
assert_exit "killed by a signal: 128+N" 137 sw run "$ID" -- sh -c 'kill -9 $$'
assert_exit "a missing working directory: 126" 126 sw run "$ID" --cwd /nonexistent -- true
assert_match "... named as such" "working directory" "$LAST_ERR"
capture sw run "$ID" --user 1001:1002 -- sh -c 'echo $(id -u):$(id -g):$(id -G)'
assert_eq "--user 1001:1002: uid, gid, no supplementary groups" "1001:1002:1002" "$LAST_OUT"
capture sw run "$ID" --user 1001:1001 -- sh -c 'grep -E "^Cap(Prm|Eff)" /proc/self/status | tr -s "\t" " "'
assert_eq "a non-root user has no capabilities" \
    "$(printf 'CapPrm: 0000000000000000\nCapEff: 0000000000000000')" "$LAST_OUT"
capture sw run "$ID" -- sh -c 'grep ^CapEff /proc/self/status'
assert_ne "root keeps its capabilities" "CapEff:	0000000000000000" "$LAST_OUT"
capture sw run "$ID" -- sh -c '(sleep 0.3; echo hi; echo "status $?" >&2) | true'
assert_eq "a command gets SIGPIPE's default, not init's SIG_IGN" "" "$LAST_ERR"
capture sw run "$ID" --user 0:0 -- sh -c 'echo "$(pwd) $(id -u):$(id -g):$(id -G)"'
assert_eq "root: the default cwd, no supplementary groups" "/ 0:0:0" "$LAST_OUT"
capture sw run "$ID" --cwd /tmp -e GREETING=hi -- sh -c 'echo "$(pwd) $GREETING"'
assert_eq "cwd and env" "/tmp hi" "$LAST_OUT"

# --- timeouts take the whole tree ------------------------------------------------------------------
assert_exit "--timeout: 124" 124 sw run "$ID" --timeout 2s -- sh -c 'sleep 301 & sleep 302; wait'
assert_match "--timeout: says so" "timed out after 2000 ms" "$LAST_ERR"
capture sw run "$ID" -- ps -o args
assert_no_match "--timeout killed the background sleep too" "sleep 30[12]" "$LAST_OUT"

# --- the channel is out of a guest user's reach -----------------------------------------------------
capture sw run "$ID" --user 1001:1001 -- sh -c 'ls /proc/1/fd; cat /proc/1/fd/0'
assert_ne "uid 1001 cannot open init's channel" 0 "$LAST_RC"
capture sw run "$ID" -- sh -c 'cat /proc/1/fd/0'
assert_ne "nor can guest root re-open it (a socket)" 0 "$LAST_RC"
assert_eq "the supervisor's socket is the owner's only" 600 \
    "$(stat -c %a "$STATE/sandboxes/$ID/agent.sock")"

# --- detached commands --------------------------------------------------------------------------
H=$(sw run -d "$ID" -- sh -c 'echo started; echo oops >&2; sleep 1; echo done; exit 7')
assert_match "run --detach prints a handle" '^[0-9]+$' "$H"
capture sw ps "$ID"
assert_match "ps lists it running with its command" "^$H +[0-9]+ +0:0 +running .*sh -c echo started" \
    "$(echo "$LAST_OUT" | grep "^$H ")"
assert_exit "wait: the command's own status" 7 sw wait "$ID" "$H"
capture sw logs "$ID" "$H"
assert_eq "logs after the client went away: stdout kept" "$(printf 'started\ndone')" "$LAST_OUT"
assert_eq "logs: stderr kept apart" oops "$LAST_ERR"
capture sw ps --json "$ID"
assert_eq "ps --json: exited with its code" "exited 7" \
    "$(echo "$LAST_OUT" | jq -r --argjson h "$H" '.[] | select(.handle == $h) | "\(.state) \(.exit_code)"')"
H2=$(sw run -d "$ID" --user 1001:1001 -- sh -c 'sleep 303 & sleep 304')
assert_exit "kill: exit 0" 0 sw kill "$ID" "$H2" --signal KILL
assert_exit "wait after kill: 128+9" 137 sw wait "$ID" "$H2"
H4=$(sw run -d "$ID" -- sleep 305)
assert_exit "kill --signal takes a number" 0 sw kill "$ID" "$H4" --signal 2
assert_exit "... the signal of that number: 128+2" 130 sw wait "$ID" "$H4"
assert_exit "kill --signal 65: usage" 2 sw kill "$ID" "$H4" --signal 65
# The agent kills the group until it is empty (docs/agent.md): the shell's
# status can come back while the background sleep is still being reaped.
gone() { ! sw run "$ID" -- ps -o args </dev/null 2>&1 | grep -q 'sleep 30[34]'; }
wait_for 5 gone
capture sw run "$ID" -- ps -o args
assert_no_match "kill took every process of the command" "sleep 30[34]" "$LAST_OUT"
H3=$(sw run -d "$ID" -- sh -c 'for i in 1 2 3; do echo tick $i; sleep 0.3; done')
capture sw logs -f "$ID" "$H3"
assert_eq "logs --follow streams until the end" "$(printf 'tick 1\ntick 2\ntick 3')" "$LAST_OUT"
assert_exit "an unknown handle: exit 4" 4 sw wait "$ID" 999999
assert_match "... says so" "no such process handle" "$LAST_ERR"
assert_exit "a handle that is not a number: usage" 2 sw logs "$ID" nope

# --- a real terminal ------------------------------------------------------------------------------
cat >"$SCRATCH/tty.sh" <<EOF
#!/bin/bash
"$SW" run -it "$ID" sh
echo "EXITED=\$?"
sleep 60
EOF
chmod +x "$SCRATCH/tty.sh"
export TMUX_TMPDIR="$SCRATCH"
tmux new-session -d -s agent -x 100 -y 30 "SANDWEAVE_STATE_DIR='$STATE' '$SCRATCH/tty.sh'"
pane() { tmux capture-pane -p -t agent; }
wait_for 20 sh -c "tmux capture-pane -p -t agent | grep -q '# '"
tmux send-keys -t agent 'tty; stty size' Enter
wait_for 10 sh -c "tmux capture-pane -p -t agent | grep -q '^30 100'"
assert_match "-it: a pty in the guest" "^/dev/pts/[0-9]+" "$(pane | grep /dev/pts)"
assert_match "-it: the terminal's size" "^30 100" "$(pane | grep '^30 ')"
# A foreground job that traps SIGWINCH (an interactive busybox sh at its
# prompt takes the signal for its own line editor).
tmux send-keys -t agent "sh -c 'trap \"echo got-winch\" WINCH; echo trapping; while :; do sleep 0.1; done'" Enter
wait_for 10 sh -c "tmux capture-pane -p -t agent | grep -q '^trapping'"
tmux resize-window -t agent -x 120 -y 40
assert_true "-it: a resize sends the guest's foreground process SIGWINCH" \
    wait_for 10 sh -c "tmux capture-pane -p -t agent | grep -q '^got-winch'"
tmux send-keys -t agent C-c
sleep 0.5
tmux send-keys -t agent 'stty size' Enter
assert_true "-it: a resize reaches the guest" \
    wait_for 10 sh -c "tmux capture-pane -p -t agent | grep -q '^40 120'"
tmux send-keys -t agent 'sleep 305' Enter
sleep 1
tmux send-keys -t agent C-c
tmux send-keys -t agent 'echo after-$((6*7))' Enter
assert_true "-it: Ctrl-C interrupts the guest's foreground command (the shell answers)" \
    wait_for 10 sh -c "tmux capture-pane -p -t agent | grep -q '^after-42'"
tmux send-keys -t agent 'exit 5' Enter
assert_true "-it: the shell's exit status comes back" \
    wait_for 10 sh -c "tmux capture-pane -p -t agent | grep -q 'EXITED=5'"
tmux kill-server

# --- execve records in the audit log --------------------------------------------------------------
A=$(sw create --hidepid 2 --audit) || fatal "create --hidepid 2 --audit"
capture sw run "$A" --user 1001:1001 -- /bin/cat /etc/hostname
assert_eq "cat as 1001 under hidepid 2 and audit" 0 "$LAST_RC"
capture sw run "$A" --user 1001:1001 -- ls /proc
assert_no_match "hidepid 2 applies to agent-started processes: init is hidden" '(^| )1( |$)' \
    "$(echo "$LAST_OUT" | tr '\n' ' ')"
sw audit export "$A" "$SCRATCH/a.jsonl" >/dev/null || fatal "audit export"
assert_true "an execve record for /bin/cat with its argv and uid 1001" \
    jq -se 'any(.point == "sentry/execve" and .argv == ["/bin/cat", "/etc/hostname"] and
                .context_data.credentials.real_uid == 1001)' "$SCRATCH/a.jsonl"
assert_true "... whose thread group init cloned" \
    jq -se '([.[] | select(.point == "sentry/execve" and .argv == ["/bin/cat", "/etc/hostname"])
              | .context_data.thread_group_id] | first) as $tg |
            any(.point == "sentry/clone" and .context_data.thread_group_id == 1 and
                .created_thread_group_id == $tg)' "$SCRATCH/a.jsonl"
sw rm --force "$A" >/dev/null 2>&1 || { sw terminate "$A" >/dev/null; sw rm "$A" >/dev/null; }

# --- memory snapshots: the restored agent answers --------------------------------------------------
SNAP=$(sw snapshot create "$ID" --kind memory --name agent-mem 2>/dev/null) || fatal "memory snapshot"
capture sw run "$ID" -- echo source-after-snapshot
assert_eq "the source answers after its checkpoint and in-place restore" source-after-snapshot "$LAST_OUT"
R=$(sw create --from-snapshot agent-mem) || fatal "restore"
capture sw run "$R" -- echo restored
assert_eq "a sandbox restored from memory answers through its agent" restored "$LAST_OUT"
sw terminate "$R" >/dev/null
sw rm "$R" >/dev/null
sw snapshot rm agent-mem >/dev/null

# --- without an agent: visible fallback -------------------------------------------------------------
sw terminate "$ID" >/dev/null
sw rm "$ID" >/dev/null
OLD=$(sw create) || fatal "create"
# What a record from an older sandweave looks like: no channel.
jq '.agent = false' "$STATE/sandboxes/$OLD/sandbox.json" >"$SCRATCH/rec" &&
    cat "$SCRATCH/rec" >"$STATE/sandboxes/$OLD/sandbox.json"
capture sw run "$OLD" -- echo via-exec
assert_eq "no agent: run still works" via-exec "$LAST_OUT"
assert_match "... and says it falls back to runsc exec" "has no guest agent.*runsc exec" "$LAST_ERR"
assert_eq "inspect says the sandbox has no agent" false "$(sw inspect "$OLD" | jq -r '.agent')"
assert_exit "ps without an agent: refused (2)" 2 sw ps "$OLD"
assert_match "... with the reason" "no guest agent" "$LAST_ERR"
jq '.agent = true' "$STATE/sandboxes/$OLD/sandbox.json" >"$SCRATCH/rec" &&
    cat "$SCRATCH/rec" >"$STATE/sandboxes/$OLD/sandbox.json"
pkill -KILL -f "__shim --agent $STATE/sandboxes/$OLD/" || true
sleep 0.5
capture sw run "$OLD" -- echo after-supervisor-died
assert_eq "its supervisor killed: run still works" after-supervisor-died "$LAST_OUT"
assert_match "... and says the agent is unreachable" "unreachable.*runsc exec" "$LAST_ERR"
sw terminate "$OLD" >/dev/null
sw rm "$OLD" >/dev/null

assert_no_leftovers "after the agent tests"
finish
