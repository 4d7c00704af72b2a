#!/usr/bin/env bash
# A guest cannot hide what it runs from the runtime audit behind its content
# (README, "Protected runtime audit"; man sandweave-audit, "Bytes that are not
# UTF-8"): bytes that are not UTF-8 in argv, the environment, paths, the
# process name and the working directory; paths and arguments near their
# limits; fchdir on directories deleted or renamed since they were opened, and
# find(1). Every such record is in the export, complete=true, and the exact
# bytes come back from the JSONL with Python's surrogateescape. The status's
# reasons agree with its counters. Needs root and a working runsc.

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
"$SW" cp "$HELPERS/audit_hostile" "$ID:/tmp/audit_hostile" >/dev/null 2>&1 &&
    "$SW" run "$ID" -- /bin/sh -c 'chmod 755 /tmp/audit_hostile && mkdir /tmp/h && chown 1001:1001 /tmp/h' ||
    fatal "helper copied into the guest"

# The reported case: one byte that is not UTF-8 in an argument.
"$SW" run "$ID" -- sh -c 'exec /bin/echo "$(printf "a\377b")"' >"$T/echo.out" 2>&1
assert_eq "echo of a\\377b ran" "$(printf 'a\377b')" "$(cat "$T/echo.out")"
"$SW" run "$ID" --user 1001:1001 -- /tmp/audit_hostile dirs /tmp/h >"$T/longpath" 2>"$T/dirs.err"
assert_true "the path and fd cases ran as 1001 ($(head -c 300 "$T/dirs.err"))" test $? = 0 -a -s "$T/longpath"
"$SW" run "$ID" --user 1001:1001 -- /tmp/audit_hostile exec >/dev/null 2>"$T/exec.err"
assert_true "execve with hostile argv and env ran ($(head -c 300 "$T/exec.err"))" test $? = 0
"$SW" run "$ID" --user 1001:1001 -- find /tmp -maxdepth 1 >/dev/null 2>&1
assert_true "find /tmp -maxdepth 1 ran as 1001" test $? = 0

E=$T/hostile.jsonl
"$SW" audit export "$ID" "$E" >"$T/export.out" 2>&1
rc=$?
assert_true "export exits 0 ($(cat "$T/export.out"))" test $rc = 0
assert_true "complete=true, dropped 0, no reasons, nothing dropped in the runtime" \
    jq -e '.complete == true and .dropped == 0 and .reasons == [] and .counters.runtime_dropped == 0' "$E.status.json"
assert_true "records with bytes that are not UTF-8 are counted (escaped_records > 0)" \
    jq -e '.counters.escaped_records > 0' "$E.status.json"
assert_true "the export verifies" "$SW" audit verify "$E"

# Exact bytes, through json.loads and surrogateescape as the docs say.
python3 - "$E" "$T/longpath" >"$T/check.out" 2>&1 <<'PY'
import json, sys

ODD = b"\xff\xfe\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80"
BIG = b"B" + ODD + b"A" * (128 * 1024 - 1 - 1 - len(ODD))
LONG = open(sys.argv[2], "rb").read().rstrip(b"\n")

def raw(v):
    """The exact bytes of a decoded value (strings, lists, dicts)."""
    if isinstance(v, str):
        return v.encode("utf-8", "surrogateescape")
    if isinstance(v, list):
        return [raw(x) for x in v]
    if isinstance(v, dict):
        return {k: raw(x) for k, x in v.items()}
    return v

recs = [json.loads(line) for line in open(sys.argv[1], "rb")]
ok = True

def check(name, cond):
    global ok
    print(("PASS " if cond else "FAIL ") + name)
    ok = ok and bool(cond)

def points(name):
    return [r for r in recs if r["point"] == name]

for p, key in (("syscall/execve/exit", "argv"), ("sentry/execve", "argv")):
    check(p + ": argv [/bin/echo, a\\377b]", any(raw(r.get(key)) == [b"/bin/echo", b"a\xffb"] for r in points(p)))
want_argv = [b"/bin/true", b"a" + ODD + b"b", BIG, b"", b"\\udcff"]
check("syscall/execve/exit: hostile argv (128 KiB argument) and env",
      any(raw(r.get("argv")) == want_argv and b"ODD=" + ODD in raw(r.get("envv", []))
          for r in points("syscall/execve/exit")))
check("sentry/execve: hostile argv and env",
      any(raw(r.get("argv")) == want_argv and b"ODD=" + ODD in raw(r.get("env", []))
          for r in points("sentry/execve")))
check("chdir to cd<odd>", any(raw(r.get("pathname")) == b"cd" + ODD for r in points("syscall/chdir/exit")))
base = b"/tmp/h/cd" + ODD
check("context cwd and process_name keep their bytes",
      any(raw(r["context_data"].get("cwd")) == base and raw(r["context_data"].get("process_name")) == b"n" + ODD
          for r in recs if "context_data" in r))
fchdirs = [raw(r) for r in points("syscall/fchdir/exit")]
check("fchdir records carry no pathname (fchdir has no path argument)",
      len(fchdirs) >= 5 and not any("pathname" in r for r in fchdirs))
check("fchdir on the start directory: fd_path", any(r.get("fd_path") == base for r in fchdirs))
check("fchdir on a deleted directory: fd_path ... (deleted)",
      any(r.get("fd_path") == base + b"/gone (deleted)" for r in fchdirs))
check("fchdir on a renamed directory: fd_path is the new name",
      any(r.get("fd_path") == base + b"/new" + ODD for r in fchdirs))
opens = [raw(r) for r in points("syscall/open/exit") + points("syscall/openat/exit")]
check("open of f<odd>", any(r.get("pathname") == b"f" + ODD for r in opens))
check("open of a %d-byte path" % len(LONG), len(LONG) > 3800 and any(r.get("pathname") == LONG for r in opens))
check("find's records are there", any(raw(r.get("argv")) == [b"find", b"/tmp", b"-maxdepth", b"1"]
                                      for r in points("sentry/execve")))
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
assert_true "the byte checks ran" test $rc = 0 -o "$(grep -c '^FAIL' "$T/check.out")" -gt 0

# reasons agree with the counters: each loss counter names its own reason.
assert_true "reasons agree with the counters" jq -e '
    .counters as $c | .reasons as $r |
    ([["runtime_dropped","runtime_dropped"],["queue_overflow","queue_overflow"],["truncated","truncated_message"],
      ["byte_limit_dropped","byte_limit"],["disk_dropped","disk_failure"]] |
     all(. as [$k, $why] | ($c[$k] > 0) == ($r | index($why) != null) or ($c[$k] == 0))) and
    (.dropped == ($c.runtime_dropped + $c.queue_overflow + $c.truncated + $c.byte_limit_dropped + $c.disk_dropped))' \
    "$E.status.json"

finish
