#!/usr/bin/env bash
# Bad input: each gets the documented exit status, exactly one
# line on stderr naming what was wrong and why, nothing on stdout, and no change
# to the state directory.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

T="$SCRATCH/t"
mkdir -p "$T"

# In a fresh state directory, a create that is refused must not first build an
# image (for `coding` that takes minutes) nor print its progress.
FRESH="$SCRATCH/fresh-state"
fresh_refusal() {  # NAME STATUS STDERR_REGEX CREATE_ARGS...
    local name="$1" want="$2" regex="$3"
    shift 3
    assert_exit "fresh state, $name: exit $want" "$want" "$SW" --state-dir "$FRESH" create "$@"
    assert_eq "fresh state, $name: exactly one line on stderr" 1 "$(line_count "$LAST_ERR")"
    assert_match "fresh state, $name: says why" "$regex" "$LAST_ERR"
    assert_eq "fresh state, $name: no image was built" "" "$(find "$FRESH/images" -mindepth 1 -maxdepth 1 2>/dev/null)"
    assert_eq "fresh state, $name: no sandbox was reserved" "" "$(find "$FRESH/sandboxes" "$FRESH/names" -mindepth 1 2>/dev/null)"
    rm -rf "$FRESH"
}
fresh_refusal "invalid --name" 2 "name.*\.\./escape" --name ../escape
fresh_refusal "unknown template" 4 "nosuch" --template nosuch
fresh_refusal "--user abc" 2 "--user" --user abc
fresh_refusal "runsc missing" 5 "/nonexistent" --runsc /nonexistent

# One sandbox exists, so "wrong syntax with a real id" is told apart from "no such id".
ID="$(sw_create --template base)" || finish

# What a bad input must not change: every object in the state dir (runsc's own
# directory and files inside a sandbox's directory excepted).
state_snapshot() {
    find "$STATE" -mindepth 1 -maxdepth 2 -not -path "$STATE/runsc/*" | sort
    "$(runsc_bin)" --root "$STATE/runsc" list -quiet 2>/dev/null | sort
}
BEFORE="$(state_snapshot)"

# bad NAME STATUS STDERR_REGEX COMMAND...
bad() {
    local name="$1" want="$2" regex="$3"
    shift 3
    assert_exit "$name: exit $want" "$want" "$@"
    assert_eq "$name: exactly one line on stderr" 1 "$(line_count "$LAST_ERR")"
    assert_match "$name: stderr says what and why" "$regex" "$LAST_ERR"
    assert_eq "$name: nothing on stdout" "" "$LAST_OUT"
    local after
    after="$(state_snapshot)"
    if [[ "$after" == "$BEFORE" ]]; then
        pass "$name: the state directory is unchanged"
    else
        fail "$name: the state directory is unchanged" "$(diff <(echo "$BEFORE") <(echo "$after") | grep '^[<>]')"
    fi
}

# --- the command line ---------------------------------------------------------------------
bad "unknown verb 'crete'" 2 "crete.*did you mean 'create'" sw crete
bad "unknown verb with options before it" 2 "frobnicate" sw --state-dir "$STATE" frobnicate
bad "unknown flag --hidepd" 2 "hidepd.*did you mean '--hidepid'" sw create --hidepd 2
bad "unknown flag for ls" 2 "--frobnicate" sw ls --frobnicate
# Only the verb the command line names is built (cmd/main.cpp): it is found
# past the global options and their values, even a value that spells a verb,
# and --help before any verb still lists them all.
capture sw --remote-binary run --json ls
assert_eq "a global option's value that spells a verb (--remote-binary run ls): ls runs" \
    "0:[" "$LAST_RC:${LAST_OUT:0:1}"
capture sw --help
for verb in create run ls prune wait cp image audit pool version completion; do
    assert_true "--help lists $verb" grep -qE "^  $verb( |,)" <<<"$LAST_OUT"
done
bad "unknown verb after a global option's value" 2 "lss.*did you mean 'ls'" sw --host local lss
# As docker exec takes it, the command may follow the id without `--`: the
# first bare word after the id starts it, and nothing after it is ours.
capture sw run "$ID" id -u
assert_eq "run without -- (run ID id -u): the command runs" "0:0" "$LAST_RC:$LAST_OUT"
capture sw run "$ID" --user 1001 sh -c 'echo "$0" -v'
assert_eq "run without --: options after the command are the command's" "1001:sh -v" \
    "$(sw run "$ID" --user 1001 id -u 2>/dev/null):$LAST_OUT"
bad "run without -- and an unknown option before the command" 2 "--frob" sw run "$ID" --frob id
bad "run with no command" 2 "command" sw run "$ID"
bad "run with both -c and --" 2 "-c" sw run "$ID" -c 'echo x' -- echo y
bad "run with an id and --template" 2 "template" sw run "$ID" --template base -- true
bad "run without an id or --template" 2 "ID|template" sw run -- true
bad "-- outside run" 2 "--" sw ls -- x
bad "--hidepid 3" 2 "hidepid" sw create --hidepid 3
bad "--hidepid two" 2 "hidepid.*two.*0.*1.*2" sw create --hidepid two
bad "--audit with --no-audit" 2 "audit" sw create --audit --no-audit
bad "--user abc (create)" 2 "--user.*abc" sw create --user abc
bad "--user 1001: (create)" 2 "--user.*1001:" sw create --user 1001:
bad "--user -1:0 (create)" 2 "--user" sw create --user -1:0
bad "--user abc (run)" 2 "--user.*abc" sw run "$ID" --user abc -- true
bad "--user 1001: (run)" 2 "--user.*1001:" sw run "$ID" --user 1001: -- true
bad "--user -1:0 (run)" 2 "--user" sw run "$ID" --user -1:0 -- true
bad "--env FOO" 2 "--env.*FOO" sw run "$ID" --env FOO -- true
bad "--env =x" 2 "--env" sw run "$ID" --env =x -- true
bad "--cwd relative" 2 "--cwd" sw run "$ID" --cwd tmp -- true
bad "--timeout soon" 2 "--timeout.*soon" sw run "$ID" --timeout soon -- true
bad "--timeout -1s" 2 "--timeout" sw run "$ID" --timeout -1s -- true
bad "--timeout 0s" 2 "--timeout" sw run "$ID" --timeout 0s -- true
bad "--timeout 0 (same as 0s, not an instant kill)" 2 "--timeout" sw run "$ID" --timeout 0 -- echo hi
bad "--label without =" 2 "--label.*novalue" sw create --label novalue
bad "--name with a slash" 2 "name" sw create --name ../escape
# What goes into a record or a request must be UTF-8: refused at the flag, not an internal error.
bad "--label with byte 0xFF" 2 "--label: not UTF-8 \(byte 0xFF" sw create --label $'k=\xff'
bad "--label with a key that is not UTF-8" 2 "--label: not UTF-8" sw create --label $'\xc3=v'
assert_exit "--label with byte 0xFF, --json: exit 2" 2 sw --json create --label $'k=\xff'
assert_match "--label with byte 0xFF, --json: the message in the document" "--label: not UTF-8" "$(jq -r .error.message <<<"$LAST_OUT")"
bad "--name with byte 0xFF" 2 "--name: not UTF-8" sw create --name $'a\xff'
bad "--env with byte 0xFF" 2 "--env: not UTF-8" sw run "$ID" --env $'A=\xff' -- true
bad "--cwd with byte 0xFF" 2 "--cwd: not UTF-8" sw run "$ID" --cwd $'/tmp/\xff' -- true
bad "one-shot --label with byte 0xFF" 2 "--label: not UTF-8" sw run --template base --label $'k=\xff' -- true
bad "--host with an unknown scheme" 2 "host 'ftp://worker'.*ssh://" sw ls --host ftp://worker
bad "--host ssh:// without a host" 2 "no host" sw ls --host ssh://
bad "--host ssh:// with a bad port" 2 "bad port" sw ls --host ssh://w:99999

# --- ids ------------------------------------------------------------------------------------
bad "run on an unknown id" 4 "no such sandbox.*sw-000000000000" sw run sw-000000000000 -- true
bad "inspect an unknown id" 4 "no such sandbox.*nosuch" sw inspect nosuch
bad "terminate an unknown id" 4 "no such sandbox.*nosuch" sw terminate nosuch
bad "rm an unknown id" 4 "no such sandbox.*nosuch" sw rm nosuch
bad "rm a path-like id" 4 "no such sandbox" sw rm ../sandboxes

# --- templates --------------------------------------------------------------------------------
bad "unknown template" 4 "unknown template 'nosuch'" sw create --template nosuch
bad "unknown template, close to a real one" 4 "did you mean 'base'" sw create --template basee
bad "one-shot with an unknown template" 4 "unknown template" sw run --template nosuch -- true
bad "template file that does not exist" 4 "$T/missing.yaml" sw create --template "$T/missing.yaml"

printf 'extends: b.yaml\nimage: base\n' >"$T/a.yaml"
printf 'extends: a.yaml\n' >"$T/b.yaml"
bad "template cycle a -> b -> a (create)" 2 "cycle.*a\.yaml -> .*b\.yaml -> .*a\.yaml" sw create --template "$T/a.yaml"
bad "template cycle a -> b -> a (validate)" 2 "cycle.*a\.yaml -> .*b\.yaml -> .*a\.yaml" sw template validate "$T/a.yaml"

printf 'extends: base\nruntime_options:\n  hidepd: 2\n' >"$T/unknown-key.yaml"
bad "unknown key with a hint" 2 "unknown-key\.yaml.*hidepd.*did you mean 'hidepid'" sw create --template "$T/unknown-key.yaml"
bad "unknown key (validate)" 2 "unknown-key\.yaml.*hidepd.*did you mean 'hidepid'" sw template validate "$T/unknown-key.yaml"
printf 'extends: base\nenv:\n  GREETING: "caf\xe9"\n' >"$T/latin1.yaml"
bad "template value not UTF-8 (byte 0xE9)" 2 "latin1\.yaml.* line 3: env\.GREETING: not UTF-8 \(byte 0xE9" sw create --template "$T/latin1.yaml"
bad "template value not UTF-8 (validate)" 2 "latin1\.yaml.*env\.GREETING: not UTF-8" sw template validate "$T/latin1.yaml"
printf 'extends: base\nlabels:\n  \xff: x\n' >"$T/key-ff.yaml"
bad "template key not UTF-8 (byte 0xFF)" 2 "key-ff\.yaml.* line 3: a key in labels: not UTF-8 \(byte 0xFF" sw create --template "$T/key-ff.yaml"
bad "inline template not UTF-8" 2 "labels\.k: not UTF-8" sw create --template $'{"extends": "base", "labels": {"k": "\xff"}}'
printf 'extends: base\nenvv:\n  A: "1"\n' >"$T/unknown-top.yaml"
# A file's unknown top-level key is not quoted (the file may be no template at
# all, /etc/shadow): its line and the hint say where and what.
bad "unknown top-level key" 2 "unknown-top\.yaml.* line 2: template: unknown key \(did you mean 'env'" sw template validate "$T/unknown-top.yaml"
assert_no_match "unknown top-level key: the file's text is not quoted" "envv" "$LAST_ERR"

printf 'extends: base\nruntime_options:\n  hidepid: "two"\n' >"$T/hidepid-two.yaml"
bad "hidepid: \"two\"" 2 "hidepid-two\.yaml.*hidepid.*two" sw create --template "$T/hidepid-two.yaml"
printf 'extends: base\nruntime_options:\n  hidepid: 3\n' >"$T/hidepid-3.yaml"
bad "hidepid: 3" 2 "hidepid-3\.yaml.*hidepid.*3" sw create --template "$T/hidepid-3.yaml"
printf 'extends: base\nruntime_options:\n  audit_max_bytes: -1\n' >"$T/max-neg.yaml"
bad "audit_max_bytes: -1" 2 "max-neg\.yaml.*audit_max_bytes.*-1" sw create --template "$T/max-neg.yaml"
printf 'extends: base\nruntime_options:\n  audit_max_bytes: 0\n' >"$T/max-zero.yaml"
bad "audit_max_bytes: 0" 2 "max-zero\.yaml.*audit_max_bytes.*0" sw create --template "$T/max-zero.yaml"
printf 'extends: base\nruntime_options:\n  audit: maybe\n' >"$T/audit-maybe.yaml"
bad "audit: maybe" 2 "audit.*maybe" sw create --template "$T/audit-maybe.yaml"
bad "inline template with a wrong type" 2 "inline.*hidepid" sw create --template '{"extends":"base","runtime_options":{"hidepid":"two"}}'

printf 'description: bad indentation on line 4\nimage: base\nenv:\n A: "1"\n  B: "2"\n' >"$T/malformed.yaml"
bad "malformed YAML names the file and the line" 2 "malformed\.yaml.* line [45]\b" sw create --template "$T/malformed.yaml"
printf 'image: base\nenv: {A: "1"\n' >"$T/unclosed.yaml"
bad "malformed YAML (validate)" 2 "unclosed\.yaml.*line [0-9]+" sw template validate "$T/unclosed.yaml"
bad "malformed inline template" 2 "inline" sw create --template '{"extends": "base", "env": {'

printf 'extends: no-such-parent\n' >"$T/orphan.yaml"
bad "extends an unknown parent: a bad template (exit 2)" 2 "orphan\.yaml.*no-such-parent" sw create --template "$T/orphan.yaml"
printf 'description: no image anywhere\n' >"$T/no-image.yaml"
bad "a template with no image" 2 "image" sw create --template "$T/no-image.yaml"

# --- the runtime and the state directory ------------------------------------------------------
bad "runsc missing (SANDWEAVE_RUNSC=/nonexistent)" 5 "/nonexistent" env SANDWEAVE_RUNSC=/nonexistent "$SW" create
bad "runsc missing, one-shot" 5 "/nonexistent" env SANDWEAVE_RUNSC=/nonexistent "$SW" run --template base -- true
bad "runsc missing (--runsc)" 5 "/nonexistent" sw create --runsc /nonexistent

# --json: the error is also one JSON document on stdout.
capture sw --json inspect nosuch
assert_eq "--json error: exit 4" 4 "$LAST_RC"
assert_eq "--json error: exit_status in the document" 4 "$(jq -r .error.exit_status <<<"$LAST_OUT")"
assert_match "--json error: message in the document" "no such sandbox" "$(jq -r .error.message <<<"$LAST_OUT")"
assert_eq "--json error: one line on stderr" 1 "$(line_count "$LAST_ERR")"

# A state dir that cannot be used: a regular file, below a file, a read-only mount.
printf 'x' >"$SCRATCH/a-file"
capture sw --state-dir "$SCRATCH/a-file" ls
assert_ne "state dir is a file: non-zero exit" 0 "$LAST_RC"
assert_match "state dir is a file: says which and why" "a-file.*(not a directory|exists)" "$LAST_ERR"
assert_eq "state dir is a file: one line" 1 "$(line_count "$LAST_ERR")"
assert_eq "state dir is a file: the file is untouched" x "$(cat "$SCRATCH/a-file")"
capture sw --state-dir "$SCRATCH/a-file/below" create
assert_ne "state dir below a file: non-zero exit" 0 "$LAST_RC"
assert_match "state dir below a file: names it" "a-file" "$LAST_ERR"

mkdir -p "$SCRATCH/ro"
if mount -t tmpfs -o ro,size=1m tmpfs "$SCRATCH/ro"; then
    capture sw --state-dir "$SCRATCH/ro" create --template base
    assert_ne "read-only state dir: create fails" 0 "$LAST_RC"
    assert_match "read-only state dir: says why" "[Rr]ead-only|not writable" "$LAST_ERR"
    assert_eq "read-only state dir: one line" 1 "$(line_count "$LAST_ERR")"
    capture sw --state-dir "$SCRATCH/ro/state" ls
    assert_ne "a state dir to be made on a read-only mount: ls fails" 0 "$LAST_RC"
    assert_match "a state dir to be made on a read-only mount: says why" "[Rr]ead-only|not writable" "$LAST_ERR"
    umount "$SCRATCH/ro"
else
    fail "mount a read-only tmpfs for the test"
fi

# An existing, populated state dir made read-only (a read-only bind mount).
mount --bind "$STATE/sandboxes" "$STATE/sandboxes" && mount -o remount,bind,ro "$STATE/sandboxes"
capture sw create --template base
assert_ne "sandboxes/ read-only: create fails" 0 "$LAST_RC"
assert_match "sandboxes/ read-only: says why" "[Rr]ead-only|not writable" "$LAST_ERR"
assert_eq "sandboxes/ read-only: one line" 1 "$(line_count "$LAST_ERR")"
umount "$STATE/sandboxes"
assert_eq "sandboxes/ read-only: nothing was created" "$BEFORE" "$(state_snapshot)"

assert_eq "the existing sandbox survived all of this" running "$(sw_state "$ID")"
sw rm "$ID" >/dev/null 2>&1
assert_no_leftovers "after bad input"
finish
