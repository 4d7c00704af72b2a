#!/usr/bin/env bash
# A guest cannot hide a command behind the size of its arguments or
# environment (man sandweave-audit, "Limits"): an execve with 1.5 MB of
# arguments, one with 1.5 MB of environment and one with both are recorded
# whole (syscall/execve/exit and sentry/execve, every argument exact), so is
# the largest point gVisor can make (argv and environment each filling their
# 2 MiB with empty strings: 8 MiB encoded), and the export is complete with
# nothing dropped or truncated. Such a point is
# larger than one socket message may be; the runtime sends it in fragments
# and the writer puts them together. Needs root and a working runsc.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "runsc, mounts"
require_cmd jq python3
require_helpers audit_hostile
# Short paths: the writer's sink socket path must stay under 100 bytes.
TMPDIR=/tmp sw_setup
T=$SCRATCH
unset SANDWEAVE_HOST

ID=$("$SW" create --template base --audit 2>"$T/create.err") ||
    fatal "create --audit" "$(cat "$T/create.err")"

# 15 arguments of 100000 bytes: 1.5 MB (gVisor allows 2 MiB, 128 KiB each).
"$SW" run "$ID" -- sh -c 'a=$(printf "%0100000d" 0); exec /bin/true $a $a $a $a $a $a $a $a $a $a $a $a $a $a $a' \
    >"$T/argv.out" 2>&1
assert_true "1.5 MB of arguments ran ($(head -c 300 "$T/argv.out"))" test $? = 0
# The same in the environment.
"$SW" run "$ID" -- sh -c 'a=$(printf "%0100000d" 1); for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do export "BIG$i=$a"; done; exec /bin/true bigenv' \
    >"$T/env.out" 2>&1
assert_true "1.5 MB of environment ran ($(head -c 300 "$T/env.out"))" test $? = 0
# Both at once: a point of 3 MB.
"$SW" run "$ID" -- sh -c 'a=$(printf "%0100000d" 2); for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do export "BOTH$i=$a"; done; exec /bin/true both $a $a $a $a $a $a $a $a $a $a $a $a $a $a $a' \
    >"$T/both.out" 2>&1
assert_true "1.5 MB of arguments and 1.5 MB of environment ran ($(head -c 300 "$T/both.out"))" test $? = 0
# The largest point: 2097142 empty arguments and 2097152 empty variables.
"$SW" cp "$HELPERS/audit_hostile" "$ID:/tmp/audit_hostile" >/dev/null 2>&1 &&
    "$SW" run "$ID" -- /bin/sh -c 'chmod 755 /tmp/audit_hostile' ||
    fatal "helper copied into the guest"
"$SW" run "$ID" -- /tmp/audit_hostile empties >"$T/empties.out" 2>&1
assert_true "execve with 4 million empty strings ran ($(head -c 300 "$T/empties.out"))" test $? = 0

E=$T/big.jsonl
"$SW" audit export "$ID" "$E" >"$T/export.out" 2>&1
rc=$?
assert_true "export exits 0 ($(cat "$T/export.out"))" test $rc = 0
assert_true "complete=true, dropped 0, nothing truncated ($(jq -c '{complete, dropped, reasons, counters}' "$E.status.json" 2>&1))" \
    jq -e '.complete == true and .dropped == 0 and .reasons == [] and .counters.truncated == 0 and .counters.runtime_dropped == 0' \
    "$E.status.json"
assert_true "the export verifies" "$SW" audit verify "$E"

python3 - "$E" >"$T/check.out" 2>&1 <<'PY'
import json, sys

recs = [json.loads(line) for line in open(sys.argv[1], "rb")]
ok = True

def check(name, cond):
    global ok
    print(("PASS " if cond else "FAIL ") + name)
    ok = ok and bool(cond)

def digits(d):
    return "0" * 99999 + str(d) if d else "0" * 100000

def argv_is(argv, head, d):
    """argv == head + 15 arguments of 100000 bytes ending in digit d, with a
    message that says how it differs."""
    if argv is None:
        return False
    want = head + [digits(d)] * 15
    return len(argv) == len(want) and all(len(a) == len(w) and a == w for a, w in zip(argv, want))

for point, env_key in (("syscall/execve/exit", "envv"), ("sentry/execve", "env")):
    got = [r for r in recs if r["point"] == point]
    check(point + ": 1.5 MB argv, 16 arguments exact (prefix, count, each length)",
          any(argv_is(r.get("argv"), ["/bin/true"], 0) for r in got))
    check(point + ": 1.5 MB environment, every BIGn exact",
          any(r.get("argv") == ["/bin/true", "bigenv"] and
              all("BIG%d=%s" % (i, digits(1)) in r.get(env_key, []) for i in range(1, 16)) for r in got))
    check(point + ": both at once (3 MB)",
          any(argv_is(r.get("argv"), ["/bin/true", "both"], 2) and
              all("BOTH%d=%s" % (i, digits(2)) in r.get(env_key, []) for i in range(1, 16)) for r in got))
check("syscall/execve/exit: the largest point, 2097142 empty arguments and 2097152 empty variables",
      any(r.get("argv", [None])[:1] == ["/bin/true"] and len(r["argv"]) == 2097143 and not any(r["argv"][1:]) and
          len(r.get("envv", [])) == 2097152 and not any(r["envv"])
          for r in recs if r["point"] == "syscall/execve/exit"))
check("no writer/truncated_message record", not any(r["point"] == "writer/truncated_message" for r in recs))
sys.exit(0 if ok else 1)
PY
rc=$?
while read -r line; do
    case "$line" in
        PASS\ *) pass "${line#PASS }" ;;
        FAIL\ *) fail "${line#FAIL }" ;;
        *) printf '  %s\n' "$line" ;;
    esac
done <"$T/check.out"
assert_true "the record checks ran" test $rc = 0 -o "$(grep -c '^FAIL' "$T/check.out")" -gt 0

finish
