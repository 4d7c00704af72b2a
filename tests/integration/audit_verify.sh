#!/usr/bin/env bash
# `sandweave audit verify PATH`: a copy of an exported log against its sidecar
# and its record chain, offline. The log comes from the real writer fed a
# recorded runsc session (sandweave-audit-testkit + sandweave-audit-replay, no
# sandbox needed); then each kind of tampering must fail with exit 3 and one
# line naming the first discrepancy: an edited, removed, reordered, appended
# line, a copy cut off at a line boundary or inside a line, a missing sidecar,
# a sidecar of another export, and sidecars whose loss or points disagree.
# The chain is also recomputed here from its documented definition (python),
# so the docs and the writer cannot drift apart.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_env SANDWEAVE_AUDIT_TESTKIT SANDWEAVE_BUILD_DIR
TK=$SANDWEAVE_AUDIT_TESTKIT
REPLAY=$SANDWEAVE_BUILD_DIR/lib/audit/sandweave-audit-replay
require_cmd jq python3
[ -x "$REPLAY" ] || fatal "the audit replayer is built" "$REPLAY is missing"
# Short paths: the writer's sink socket path must stay under 100 bytes.
TMPDIR=/tmp sw_setup
T=$SCRATCH
W=$T/w
finish_writer() { "$TK" finish --dir "$W" >/dev/null 2>&1; }
on_cleanup finish_writer

META=$SANDWEAVE_SOURCE_DIR/tests/data/audit/runsc_trace_metadata_20221219.txt
TRACE=$SANDWEAVE_SOURCE_DIR/tests/data/audit/replay/busybox_session.trace
"$TK" start --dir "$W" --metadata "$META" >/dev/null || fatal "the testkit starts a writer"
"$REPLAY" --socket "$W/sink.sock" --trace "$TRACE" --count 3000 >/dev/null ||
    fatal "the replayer sends a recorded session"
E=$T/e.jsonl
"$TK" export --dir "$W" --dest "$E" --sentry-dropped 0 >/dev/null
[ -s "$E" ] && [ -s "$E.status.json" ] || fatal "the testkit exports a log and its sidecar"
N=$(wc -l <"$E")

# ---------------------------------------------------------------- intact copy
assert_exit "an untouched export verifies (exit 0)" 0 sw audit verify "$E"
assert_match "... and says so in one line with its figures" \
    "^ok lines=$N events=[0-9]+ dropped=[0-9]+ bytes=$(stat -c %s "$E") complete=(true|false) sha256=[0-9a-f]{64}$" \
    "$LAST_OUT"
cp "$E" "$T/copy.jsonl"
cp "$E.status.json" "$T/copy.jsonl.status.json"
assert_exit "a copy elsewhere verifies too (offline, nothing but the two files)" 0 \
    sw audit verify "$T/copy.jsonl"
assert_exit "--status names the sidecar explicitly" 0 \
    sw --json audit verify "$E" --status "$E.status.json"
assert_true "--json: one document, ok true, chain = the sidecar's" \
    jq -e --arg c "$(jq -r .chain "$E.status.json")" '.ok == true and .chain == $c' <<<"$LAST_OUT"

# The documented chain: chain_i = SHA-256(chain_{i-1} || line_i up to ,"chain")[:16],
# chain_0 = 16 zero bytes; every line ends with ,"chain":"<32 hex>"}.
assert_true "the chain follows its documented definition, the sidecar holds the last one" \
    python3 - "$E" <<'EOF'
import hashlib, json, sys
log = sys.argv[1]
prev = bytes(16)
for line in open(log, "rb"):
    line = line.rstrip(b"\n")
    body, tail = line[:-44], line[-44:]
    assert tail.startswith(b',"chain":"') and tail.endswith(b'"}'), tail
    prev = hashlib.sha256(prev + body).digest()[:16]
    assert tail[10:42].decode() == prev.hex(), line[:60]
    json.loads(line)  # every line is still one JSON object
assert json.load(open(log + ".status.json"))["chain"] == prev.hex()
EOF

# Raw records name their syscall; arguments are exact hex strings.
assert_true "raw records carry syscall names and hex arguments" \
    jq -se '[.[] | select(.point | test("^syscall/sysno/"))] | length > 0 and
        all(.[]; (.syscall | type) == "string" and (.arg1 | test("^0x[0-9a-f]+$")))' "$E"

# ---------------------------------------------------------------- tampering
tampered() { # NAME -> a copy with the original sidecar, path on stdout
    cp "$E" "$T/$1.jsonl"
    cp "$E.status.json" "$T/$1.jsonl.status.json"
    echo "$T/$1.jsonl"
}
expect_bad() { # NAME REGEX FILE [ARGS]
    local name=$1 re=$2
    shift 2
    assert_exit "$name: exit 3" 3 sw audit verify "$@"
    assert_match "$name: one line naming the discrepancy" "$re" "$LAST_ERR"
    assert_eq "$name: one line only" 1 "$(line_count "$LAST_ERR")"
}

# An edit inside line 20 that keeps it valid JSON: the chain catches it there,
# before any whole-file check (sha256) could.
F=$(tampered edit)
python3 - "$F" <<'EOF'
import sys
p = sys.argv[1]
lines = open(p, "rb").read().split(b"\n")
l = lines[19]
i = l.index(b'"dropped":0') + len(b'"dropped":')
lines[19] = l[:i] + b"7" + l[i + 1:]
open(p, "wb").write(b"\n".join(lines))
EOF
expect_bad "edited line 20" "line 20: .*chain" "$F"

# An edit whose chain an attacker recomputed for every later line: only the
# sidecar's chain (and sha256) can tell.
F=$(tampered rechained)
python3 - "$F" <<'EOF'
import hashlib, sys
p = sys.argv[1]
lines = open(p, "rb").read().rstrip(b"\n").split(b"\n")
lines[19] = lines[19].replace(b'"dropped":0', b'"dropped":0 ', 1)
prev, out = bytes(16), []
for l in lines:
    body = l[:-44]
    prev = hashlib.sha256(prev + body).digest()[:16]
    out.append(body + b',"chain":"' + prev.hex().encode() + b'"}')
open(p, "wb").write(b"\n".join(out) + b"\n")
EOF
expect_bad "edited and re-chained" "chain .* is not the sidecar's" "$F"

F=$(tampered removed)
sed -i '20d' "$F"
expect_bad "removed line 20" "^sandweave: audit verify .*: line 20: " "$F"

F=$(tampered reordered)
sed -i '20{h;d};21{G}' "$F"
expect_bad "lines 20 and 21 swapped" "line 20: " "$F"

F=$(tampered appended)
tail -n 1 "$E" >>"$F"
expect_bad "a line appended" "line $((N + 1)): " "$F"

F=$(tampered cut)
head -n $((N - 5)) "$E" >"$F"
expect_bad "cut off at a line boundary" "ends at line $((N - 5)).*last_sequence is $N" "$F"

F=$(tampered torn)
head -c $(($(stat -c %s "$E") - 10)) "$E" >"$F"
expect_bad "cut off inside the last line" "line $N: not terminated" "$F"

F=$(tampered nosidecar)
rm -f "$F.status.json"
expect_bad "missing sidecar" "no usable sidecar" "$F"

# The sidecar of another export of the same writer (more records since).
"$REPLAY" --socket "$W/sink.sock" --trace "$TRACE" --count 200 >/dev/null
E2=$T/e2.jsonl
"$TK" export --dir "$W" --dest "$E2" --sentry-dropped 0 >/dev/null
assert_exit "the later export verifies on its own" 0 sw audit verify "$E2"
expect_bad "the sidecar of a later export" "ends at line $N, the sidecar's last_sequence" \
    "$E" --status "$E2.status.json"
expect_bad "the earlier sidecar for the later log" "line $((N + 1)): beyond the sidecar's last_sequence $N" \
    "$E2" --status "$E.status.json"

F=$(tampered dropped)
jq '.dropped += 5' "$E.status.json" >"$F.status.json"
expect_bad "a sidecar whose dropped the gaps do not add up to" "gap records add up to" "$F"

F=$(tampered points)
P=$(jq -r 'select(.point | startswith("syscall/")) | .point' "$E" | head -1)
jq --arg p "$P" 'del(.points[$p])' "$E.status.json" >"$F.status.json"
expect_bad "a point in the log missing from the sidecar" "point $P is not among the sidecar's points" "$F"

F=$(tampered failed)
jq '.error = "disk full"' "$E.status.json" >"$F.status.json"
expect_bad "a sidecar of a failed export" "records a failed export: disk full" "$F"

assert_exit "a log that does not exist is an error, not a verdict" 1 sw audit verify "$T/nope.jsonl"

finish
