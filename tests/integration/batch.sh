#!/usr/bin/env bash
# `sandweave batch run`: episodes from a JSONL spec, each leaving a complete
# folder (exit, output, files out, a verified audit log, result.json), a
# summary that counts failures, timeouts and incomplete audits apart, reruns
# that skip what finished, and nothing left behind after SIGKILL or SIGINT.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup
require_cmd python3

OUT="$SCRATCH/out"

# --- bad spec lines are refused before anything starts -------------------------
bad_spec() {  # NAME LINE_NO EXPECTED_REGEX LINE...
    local name="$1" n="$2" re="$3"
    shift 3
    printf '%s\n' "$@" >"$SCRATCH/bad.jsonl"
    capture sw batch run "$SCRATCH/bad.jsonl" --out "$SCRATCH/bad-out"
    assert_eq "bad spec ($name): exit 2" 2 "$LAST_RC"
    assert_match "bad spec ($name): names line $n" "bad\.jsonl:$n: .*$re" "$LAST_ERR"
    assert_eq "bad spec ($name): one error line" 1 "$(line_count "$LAST_ERR")"
    assert_true "bad spec ($name): nothing written" test ! -e "$SCRATCH/bad-out"
}
ok='{"id": "a", "command": ["true"]}'
bad_spec "unknown key" 2 "unknown key 'comand'" "$ok" '{"id": "b", "comand": ["true"]}'
bad_spec "bad hidepid" 3 "'hidepid': expected 0, 1 or 2" "$ok" '' '{"id": "b", "hidepid": 5, "script": "true"}'
bad_spec "duplicate id" 2 "'id': 'a' was used" "$ok" "$ok"
bad_spec "unsafe id" 1 "not a safe folder name" '{"id": "../x", "script": "true"}'
bad_spec "no command" 1 "either 'command'" '{"id": "a"}'
bad_spec "not JSON" 2 "not JSON" "$ok" '{"id": '
bad_spec "missing file in" 1 "does not exist" '{"id": "a", "script": "true", "files_in": {"/tmp/x": "/no/such"}}'
assert_eq "bad specs: no sandbox was made" 0 "$(sw_count)"

# --- one batch of 40 with every kind of outcome ----------------------------------
printf 'hello batch\n' >"$SCRATCH/in.txt"
{
    for i in $(seq -w 1 33); do
        code=0
        ((10#$i % 5 == 1)) && code=1
        ((10#$i % 5 == 2)) && code=3
        printf '{"id": "e%s", "script": "echo out-%s; echo err-%s >&2; exit %d", "labels": {"n": "%s"}}\n' \
            "$i" "$i" "$i" "$code" "$i"
    done
    echo '{"id": "timeout", "script": "sleep 300 & sleep 300", "timeout": 2}'
    echo '{"id": "flood", "script": "head -c 3000000 /dev/zero | tr \"\\\\0\" x"}'
    echo '{"id": "small-audit", "template": "{\"extends\": \"base\", \"runtime_options\": {\"audit_max_bytes\": 2048}}", "script": "for i in 1 2 3 4 5 6 7 8 9 10; do cat /etc/passwd /etc/group >/dev/null; ls / >/dev/null; done"}'
    printf '{"id": "files", "files_in": {"/tmp/in.txt": "%s"}, "files_out": ["/tmp/out.txt", "/tmp/outdir", "/tmp/missing"], "script": "tr a-z A-Z </tmp/in.txt >/tmp/out.txt; mkdir /tmp/outdir; echo y >/tmp/outdir/y"}\n' "$SCRATCH/in.txt"
    echo '{"id": "hidepid", "user": "1001:1001", "hidepid": 2, "command": ["sh", "-c", "id -u; if [ -e /proc/1 ]; then echo pid1-visible; else echo pid1-hidden; fi"]}'
    echo '{"id": "env", "env": {"GREETING": "hi there"}, "command": ["sh", "-c", "echo \"$GREETING\""]}'
    echo '{"id": "noaudit", "audit": false, "command": ["true"]}'
} >"$SCRATCH/spec.jsonl"
assert_eq "spec has 40 episodes" 40 "$(wc -l <"$SCRATCH/spec.jsonl" | tr -d ' ')"

capture sw batch run "$SCRATCH/spec.jsonl" --out "$OUT" --concurrency 4 --json
assert_eq "batch with failures and an incomplete audit: exit 6" 6 "$LAST_RC"
summary="$LAST_OUT"
assert_eq "summary: total" 40 "$(jq .total <<<"$summary")"
# e01..e33: i%5==1 or 2 fail (e01 e02 e06 e07 ... = 14), plus timeout and the missing file out.
assert_eq "summary: failed (own exits, timeout, missing file out)" 16 "$(jq .failed <<<"$summary")"
assert_eq "summary: done" 24 "$(jq .done <<<"$summary")"
assert_eq "summary: no infrastructure failures" 0 "$(jq .infrastructure <<<"$summary")"
assert_eq "summary: one incomplete audit" '["small-audit"]' "$(jq -c .incomplete_ids <<<"$summary")"
assert_eq "summary: its reason" 1 "$(jq '.audit.reasons.byte_limit' <<<"$summary")"
assert_eq "summary: complete audits" 38 "$(jq .audit.complete <<<"$summary")"
assert_eq "summary: one episode without audit" 1 "$(jq .audit.off <<<"$summary")"
assert_match "summary on stderr names the incomplete audit" 'audit: 38 complete, 1 incomplete \(byte_limit: 1\)' "$LAST_ERR"
assert_no_match "a local run says nothing of Slurm (a warning the user could not act on)" 'Slurm' "$LAST_ERR"
assert_true "summary.json is the --json document" \
    bash -c "jq -e '.total == 40 and .failed == 16' '$OUT/summary.json' >/dev/null"

r() { jq -r "$1" "$OUT/$2/result.json"; }
assert_eq "e03: exit file" 0 "$(cat "$OUT/e03/exit")"
assert_eq "e03: stdout" out-03 "$(cat "$OUT/e03/stdout")"
assert_eq "e03: stderr" err-03 "$(cat "$OUT/e03/stderr")"
assert_eq "e07: its own exit 3" 3 "$(cat "$OUT/e07/exit")"
assert_eq "e06: exit 1, status failed" "1 failed" "$(r '"\(.exit_code) \(.status)"' e06)"
assert_eq "e03: audit complete and verified" "true true" "$(r '"\(.audit.complete) \(.audit.verified)"' e03)"
assert_true "e03: audit verify passes on the copy" sw audit verify "$OUT/e03/audit.jsonl"
assert_eq "e03: the audit shows the episode's execve" 1 \
    "$(jq -c 'select(.point == "syscall/execve/exit") | .argv // .args | tostring' "$OUT/e03/audit.jsonl" | grep -c 'out-03')"
assert_eq "e03: one try, a sandbox named" "1 true" "$(r '"\(.tries | length) \(.sandbox != null)"' e03)"
assert_eq "timeout: recorded timed_out, exit 124" "true 124" "$(r '"\(.timed_out) \(.exit_code)"' timeout)"
secs="$(python3 -c "import json,datetime as d;r=json.load(open('$OUT/timeout/result.json'));p=lambda s:d.datetime.strptime(s,'%Y-%m-%dT%H:%M:%S.%fZ');print(int((p(r['ended_at'])-p(r['started_at'])).total_seconds()))")"
assert_true "timeout: ended within 60 s of its start (the tree was killed), took ${secs}s" test "$secs" -lt 60
assert_eq "flood: 1 MiB kept" 1048576 "$(stat -c %s "$OUT/flood/stdout")"
assert_eq "flood: truncation recorded" "3000000 1048576 true" "$(r '"\(.stdout.bytes) \(.stdout.kept) \(.stdout.truncated)"' flood)"
assert_eq "small-audit: incomplete, byte_limit" "false byte_limit" "$(r '"\(.audit.complete) \(.audit.reasons | join(","))"' small-audit)"
assert_eq "small-audit: its sidecar says incomplete" false "$(jq .complete "$OUT/small-audit/audit.jsonl.status.json")"
assert_eq "files: file out" "HELLO BATCH" "$(cat "$OUT/files/files/tmp/out.txt")"
assert_eq "files: folder out" y "$(cat "$OUT/files/files/tmp/outdir/y")"
assert_match "files: the missing one is the episode's failure" 'missing' "$(r '.files_out_errors | keys | join(",")' files)"
assert_eq "hidepid: uid 1001, pid 1 hidden" "1001 pid1-hidden" "$(tr '\n' ' ' <"$OUT/hidepid/stdout" | sed 's/ $//')"
assert_eq "env: passed" "hi there" "$(cat "$OUT/env/stdout")"
assert_eq "noaudit: no audit log" "false" "$(r '.audit.enabled' noaudit)"
assert_eq "labels: kept in result.json" 05 "$(r '.labels.n' e05)"
assert_eq "modes: folders 0700" 700 "$(stat -c %a "$OUT/e03")"
assert_eq "modes: every file 0600" "" "$(find "$OUT" -type f ! -perm 600)"
assert_eq "modes: every folder 0700" "" "$(find "$OUT" -type d ! -perm 700)"
assert_eq "no temp folders left" "" "$(find "$OUT" -maxdepth 1 -name '.tmp-*')"
assert_no_leftovers "after the batch"

# A rerun skips every finished episode: nothing runs twice.
before="$(r .started_at e03)"
capture sw batch run "$SCRATCH/spec.jsonl" --out "$OUT" --events
assert_eq "rerun: same exit 6" 6 "$LAST_RC"
assert_eq "rerun: 40 episode events, all resumed" 40 \
    "$(jq -s '[.[] | select(.event == "episode" and .resumed)] | length' <<<"$LAST_OUT")"
assert_eq "rerun: a summary event last" summary "$(tail -n1 <<<"$LAST_OUT" | jq -r .event)"
assert_eq "rerun: e03 not run again" "$before" "$(r .started_at e03)"

# --- SIGKILL mid-run, then rerun: nothing lost, nothing done twice ------------------
for i in $(seq -w 1 12); do
    printf '{"id": "k%s", "script": "sleep 1; echo k%s"}\n' "$i" "$i"
done >"$SCRATCH/kill.jsonl"
KOUT="$SCRATCH/kill-out"
# The killed run takes its sandboxes from a warm pool (all episodes alike), which
# it leaves behind with its refills; the rerun creates each and removes the pool.
"$SW" batch run "$SCRATCH/kill.jsonl" --out "$KOUT" --concurrency 3 --warm-pool >/dev/null 2>"$SCRATCH/kill.err" &
pid=$!
finished() { (($(finished_episodes "$KOUT") >= 3)); }
assert_true "SIGKILL run: 3 episodes finished first" wait_for 90 finished
kill -9 "$pid"
wait "$pid" 2>/dev/null
declare -A started
for f in "$KOUT"/*/result.json; do started["$(jq -r .id "$f")"]="$(jq -r .started_at "$f")"; done
assert_match "SIGKILL run: episodes came from the warm pool" '^batch-[0-9a-f]{16}$' \
    "$(jq -r .pool "$(compgen -G "$KOUT/k*/result.json" | head -n1)")"
assert_eq "SIGKILL run: its pool is left behind" 1 "$(sw pool ls --json | jq length)"
capture sw batch run "$SCRATCH/kill.jsonl" --out "$KOUT" --concurrency 3
assert_eq "after SIGKILL, rerun: exit 0 (all exit 0, audits complete)" 0 "$LAST_RC"
assert_eq "after SIGKILL, rerun: 12 result.json" 12 "$(finished_episodes "$KOUT")"
same=0
for id in "${!started[@]}"; do
    [[ "$(jq -r .started_at "$KOUT/$id/result.json")" == "${started[$id]}" ]] && same=$((same + 1))
done
assert_eq "after SIGKILL, rerun: the ${#started[@]} finished before were not run again" "${#started[@]}" "$same"
assert_eq "after SIGKILL, rerun: every output there" "k07" "$(cat "$KOUT/k07/stdout")"
assert_eq "after SIGKILL: no sandbox of the batch left" 0 \
    "$(sw ls --json --filter label=sandweave.batch | jq length)"
assert_eq "after SIGKILL: no temp folders left" "" "$(find "$KOUT" -maxdepth 1 -name '.tmp-*')"
assert_eq "after SIGKILL: the rerun removed the warm pool" 0 "$(sw pool ls --json | jq length)"
assert_eq "after SIGKILL: the rerun created its own sandboxes" null "$(jq -r .pool "$KOUT/k12/result.json")"
assert_no_leftovers "after SIGKILL and rerun"

# --- SIGINT stops, ends running episodes and leaves nothing behind ------------------
for i in 1 2 3 4 5 6; do printf '{"id": "s%s", "command": ["sleep", "60"]}\n' "$i"; done >"$SCRATCH/int.jsonl"
# A background job of a script starts with SIGINT ignored; a user's batch has it.
env --default-signal=INT "$SW" batch run "$SCRATCH/int.jsonl" --out "$SCRATCH/int-out" --concurrency 3 \
    >/dev/null 2>"$SCRATCH/int.err" &
pid=$!
three_running() { (($(sw ls --json --filter label=sandweave.batch | jq '[.[] | select(.state == "running")] | length') >= 3)); }
assert_true "SIGINT run: 3 episodes running" wait_for 60 three_running
sleep 1
kill -INT "$pid"
t0=$SECONDS
wait "$pid"
rc=$?
assert_eq "SIGINT: exit 130" 130 "$rc"
assert_true "SIGINT: stopped within 30 s" test $((SECONDS - t0)) -lt 30
assert_eq "SIGINT: no episode folder" "" "$(find "$SCRATCH/int-out" -mindepth 1 -maxdepth 1 -type d)"
assert_no_leftovers "after SIGINT"

# --- a template that does not exist is the user's mistake: refused before anything runs --
printf '{"id": "typo", "template": "no-such-template", "command": ["true"]}\n' >"$SCRATCH/typo.jsonl"
capture sw batch run "$SCRATCH/typo.jsonl" --out "$SCRATCH/typo-out" --retries 1 --json
assert_eq "unknown template: exit 4 before anything starts" 4 "$LAST_RC"
assert_match "unknown template: the error names the spec's line" 'typo.jsonl:1:.*no-such-template' "$LAST_ERR"
assert_no_match "unknown template: no retry" 'trying again' "$LAST_ERR"
assert_true "unknown template: no folder" test ! -e "$SCRATCH/typo-out/typo"

# --- an infrastructure failure is retried, counted apart, and gets no folder ----------
# A runtime that fails every call stands for a broken worker.
printf '#!/bin/sh\necho "runsc: the runtime is broken" >&2\nexit 1\n' >"$SCRATCH/broken-runsc"
chmod +x "$SCRATCH/broken-runsc"
printf '{"id": "infra", "command": ["true"]}\n' >"$SCRATCH/infra.jsonl"
capture env SANDWEAVE_RUNSC="$SCRATCH/broken-runsc" "$SW" batch run "$SCRATCH/infra.jsonl" \
    --out "$SCRATCH/infra-out" --retries 1 --json
assert_eq "infrastructure failure: exit 7" 7 "$LAST_RC"
assert_eq "infrastructure failure: counted apart" "1 0" "$(jq -r '"\(.infrastructure) \(.failed)"' <<<"$LAST_OUT")"
assert_match "infrastructure failure: its error" 'the runtime is broken' "$(jq -r '.infrastructure_errors.infra' <<<"$LAST_OUT")"
assert_true "infrastructure failure: no folder (a rerun tries again)" test ! -e "$SCRATCH/infra-out/infra"
assert_match "infrastructure failure: retried once" 'try 1 failed.*trying again' "$LAST_ERR"


# --- over ssh://: each worker thread its own session, the audit fetched here --------
if [[ -x /usr/sbin/sshd ]] && command -v ssh-keygen >/dev/null; then
    WSTATE="$(mktemp -d /tmp/sw-it-batch-worker.XXXXXX)"
    worker_cleanup() {
        local client_state=$STATE
        STATE=$WSTATE
        sw_cleanup
        STATE=$client_state
    }
    on_cleanup worker_cleanup
    source "$SANDWEAVE_SOURCE_DIR/tests/helpers/sshd_fixture.sh"
    sshd_fixture_init "$SCRATCH/sshd" "$WSTATE" || fatal "ssh keys and sshd config made"
    stop_sshd() { sshd_stop "$SSHD_CONFIG"; }
    on_cleanup stop_sshd
    sshd_start || fatal "sshd starts" "$(tail -n 5 "$SSHD_CONFIG.log")"
    : >"$SCRATCH/sshd/empty_ssh_config"
    {
        printf '{"id": "r1", "files_in": {"/tmp/in.txt": "%s"}, "files_out": ["/tmp/out.txt"], "script": "tr a-z A-Z </tmp/in.txt >/tmp/out.txt"}\n' "$SCRATCH/in.txt"
        echo '{"id": "r2", "user": "1001", "hidepid": 2, "command": ["sh", "-c", "ls /proc | grep -c ^1$; exit 1"]}'
        echo '{"id": "r3", "command": ["true"]}'
    } >"$SCRATCH/ssh.jsonl"
    capture env -u SANDWEAVE_STATE_DIR "$SW" --host "ssh://root@127.0.0.1:$SSHD_PORT" \
        --identity "$SSHD_USERKEY" --known-hosts "$SSHD_KNOWN_HOSTS" \
        --ssh-config "$SCRATCH/sshd/empty_ssh_config" --remote-binary "$SW" \
        batch run "$SCRATCH/ssh.jsonl" --out "$SCRATCH/ssh-out" --concurrency 3 --json
    assert_eq "ssh: exit 6 (r2 exits 1)" 6 "$LAST_RC"
    assert_eq "ssh: done 2, failed 1, audits complete 3" "2 1 3" \
        "$(jq -r '"\(.done) \(.failed) \(.audit.complete)"' <<<"$LAST_OUT")"
    assert_eq "ssh: file out, on this host" "HELLO BATCH" "$(cat "$SCRATCH/ssh-out/r1/files/tmp/out.txt")"
    assert_eq "ssh: hidepid 2 for uid 1001 (pid 1 not listed)" 0 "$(cat "$SCRATCH/ssh-out/r2/stdout")"
    assert_match "ssh: the audit log was fetched through the connection" '^ssh://' \
        "$(jq -r .via "$SCRATCH/ssh-out/r3/audit.jsonl.status.json")"
    assert_true "ssh: the fetched log verifies" sw audit verify "$SCRATCH/ssh-out/r3/audit.jsonl"
    assert_eq "ssh: no sandbox left on the worker" 0 "$(SANDWEAVE_STATE_DIR="$WSTATE" "$SW" ls --json | jq length)"
    assert_eq "ssh: none made on the client" 0 "$(sw_count)"
else
    skipped "the ssh:// part: /usr/sbin/sshd or ssh-keygen missing"
fi

finish
