#!/usr/bin/env bash
# hidepid through the sandweave CLI: `create --hidepid 0|1|2`, template
# precedence, one-shot runs, and the refusal (exit 5) of a runtime that does not
# enforce hidepid (Debian's stock /usr/bin/runsc).
#
# For each hidepid value one sandbox runs a uid 1002 sleep (P2), a non-dumpable
# uid 1001 process (P3, tests/helpers/nodump.c) and a dumpable uid 1001
# sleep (P4) beside root's guest init (PID 1); a probe script then observes
# /proc as uid 1001 and as root. Expected (patched runsc, see runtime/README.md):
#
#   as uid 1001           hidepid=0            hidepid=1          hidepid=2
#   ls /proc (1, P2, P3)  listed               listed             absent
#   /proc/P2/{cmdline,status,task}  ok         EPERM              ENOENT
#   readlink /proc/P2/exe EACCES (ptrace rule) EPERM              ENOENT
#   busybox ps            shows 1, P2          only own processes only own
#   P4 (same uid)         ok                   ok                 ok
#   P5's environ, maps, auxv, mem, fd/, cwd, root, exe
#                         EACCES (Linux modes  EPERM              ENOENT
#                         and ptrace checks)
#
# P5 is root's sleep started with a secret in its environment (`run -e`); the
# caller's own P4 keeps those files readable (mem: /proc/self/mem).
#
# Root (Docker's default caps + CAP_SYS_PTRACE) sees everything; /proc/self,
# /proc/thread-self and the caller's own PID and threads always work.
#
# Needs root, /bin/busybox, the patched runsc (runtime/build-runsc.sh), python3,
# the helpers of tests/helpers/ (nodump, the probe) from the build, and Debian's
# runsc at /usr/bin/runsc.
#
#   STOCK_RUNSC      unpatched runsc (default /usr/bin/runsc)
#
# Prints PASS/FAIL lines and a summary; exit 1 on any failure.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
readonly STOCK_RUNSC="${STOCK_RUNSC:-/usr/bin/runsc}"

require_root "sandweave drives runsc and overlayfs"
require_cmd python3
require_helpers nodump hidepid_probe_sandweave.sh
[[ -x "$STOCK_RUNSC" ]] || fatal "$STOCK_RUNSC is installed (apt-get install runsc): needed for the refusal checks"
sw_setup
work="$SCRATCH"
exec </dev/null # no guest command reads our stdin

# create_sb VAR [create args...]: create a sandbox (lib.sh removes what is left at exit).
create_sb() {
  local __var="$1" __id
  shift
  __id="$(sw -q create "$@" 2>"$work/create.err")" || {
    fail "create $*: exit $?: $(tr '\n' ' ' <"$work/create.err")"
    return 1
  }
  printf -v "$__var" '%s' "$__id"
}

rm_sb() { sw -q rm "$1" >/dev/null 2>&1 || fail "rm $1 failed"; }

# --- guest files ------------------------------------------------------------------
# The root filesystem's cache in the guest is authoritative (runsc
# --file-access=exclusive), so files are copied from the host into a directory
# the guest has never looked up: /hptest, right after create.
mkdir -p "$work/hptest"
cp "$HELPERS/nodump" "$work/hptest/nodump"
# probe.sh P2 P3 P4: one "name|rc|output" line per observation (busybox tools).
cp "$HELPERS/hidepid_probe_sandweave.sh" "$work/hptest/probe.sh"

# install_helpers ID: copy /hptest into the sandbox's root filesystem.
install_helpers() {
  local rootfs="$SANDWEAVE_STATE_DIR/sandboxes/$1/rootfs"
  [[ -d "$rootfs" ]] || { fail "$1: no rootfs at $rootfs"; return 1; }
  cp -a "$work/hptest" "$rootfs/hptest"
}

# bg_pid ID USER CMD...: start CMD in the background in the guest as USER (it
# outlives `sandweave run`, reparented to the guest init), with USER's secret
# in its environment; print its guest PID.
# Its stdio goes to /dev/null, or it would hold our command substitution open.
bg_pid() {
  local id="$1" user="$2" pid
  shift 2
  pid="$(sw run "$id" --user "$user" -e "SW_PROBE_SECRET=$(secret_of "$user")" -c "$* </dev/null >/dev/null 2>&1 & echo \$!" 2>"$work/bg.err")"
  [[ "$pid" =~ ^[0-9]+$ ]] || { fail "$id: start '$*' as $user: got '$pid' $(tr '\n' ' ' <"$work/bg.err")"; return 1; }
  echo "$pid"
}

secret_of() { echo "s3cret-$$-$1"; } # secret_of USER
probe_as() { # probe_as ID USER P2 P3 P4 P5: the probe's lines in PROBE (see lib.sh)
  PROBE="$(sw run "$1" --user "$2" -- /bin/sh /hptest/probe.sh "$3" "$4" "$5" "$6" 2>"$work/probe.err")" ||
    fail "probe as $2 in $1: exit $?: $(tr '\n' ' ' <"$work/probe.err")"
}
has_word() { [[ " $1 " == *" $2 "* ]]; }
# Errors as busybox prints them, per errno.
declare -A ERR=([EPERM]="Operation not permitted" [ENOENT]="No such file or directory" [EACCES]="Permission denied")
expect_errno() { # expect_errno LABEL WHICH(p2|1) ERRNO PID: the denial messages for one target
  local L="$1" tgt="$2" e="${ERR[$3]}" p="${4:-}"
  if [[ "$tgt" == 1 ]]; then
    probe_expect "$L" status_1 "fail:cat: can't open '/proc/1/status': $e"
    probe_expect "$L" cmdline_1 "fail:cat: can't open '/proc/1/cmdline': $e"
    return
  fi
  probe_expect "$L" cmdline_p2 "fail:cat: can't open '/proc/$p/cmdline': $e"
  probe_expect "$L" status_p2 "fail:cat: can't open '/proc/$p/status': $e"
  probe_expect "$L" task_p2 "fail:ls: /proc/$p/task: $e"
  probe_expect "$L" exe_p2 "fail:readlink: /proc/$p/exe: cannot read link: $e"
}

# --- the matrix -----------------------------------------------------------------
for h in 0 1 2; do
  echo "== hidepid=$h"
  id=""
  create_sb id --hidepid "$h" || continue
  install_helpers "$id" || continue
  p2="$(bg_pid "$id" 1002:1002 sleep 1002)" || continue
  p3="$(bg_pid "$id" 1001:1001 /hptest/nodump sleep)" || continue
  p4="$(bg_pid "$id" 1001:1001 sleep 1004)" || continue
  p5="$(bg_pid "$id" 0:0 sleep 1005)" || continue
  echo "P2=$p2 (uid 1002)  P3=$p3 (uid 1001, non-dumpable)  P4=$p4 (uid 1001)  P5=$p5 (root, secret env)"
  insp="$(sw inspect "$id")"
  assert_true "hidepid=$h: inspect shows hidepid $h from flag" python3 -c '
import json, sys
j = json.loads(sys.argv[1])
sys.exit(not (j["spec"]["runtime_options"]["hidepid"] == int(sys.argv[2])
              and j["spec"]["origin"]["/runtime_options/hidepid"] == "flag"))' "$insp" "$h"

  # Root: sees everything (CAP_SYS_PTRACE bypasses hidepid and the exe rule).
  # It also reads /proc/P2/status and pins /proc/P2 as a cwd with status open,
  # so uid 1001's lookups below go through cached dentries.
  pin="$(bg_pid "$id" 0:0 "cd /proc/$p2 && exec 3</proc/$p2/status && exec sleep 1000")" &&
    out="$(sw run "$id" --user 0:0 -c "readlink /proc/$pin/cwd; readlink /proc/$pin/fd/3" 2>&1 | tr '\n' ' ')" &&
    [[ "$out" == "/proc/$p2 /proc/$p2/status " ]] && pass "hidepid=$h: root process $pin pins /proc/$p2" ||
    fail "hidepid=$h: root pinning process: $out"
  probe_as "$id" 0:0 "$p2" "$p3" "$p4" "$p5"
  L="hidepid=$h root"
  probe_expect "$L" id "ok:uid=0"
  for p in 1 "$p2" "$p3" "$p4"; do probe_listed "$L" procpids "$p" yes; probe_listed "$L" pspids "$p" yes; done
  probe_expect "$L" ps_p2 "ok:$p2 1002 sleep 1002"
  probe_expect "$L" stat_p2 "ok:1002"
  probe_expect "$L" cmdline_p2 "ok:sleep"
  probe_expect "$L" status_p2 "ok:Uid:"
  probe_expect "$L" task_p2 "ok:$p2"
  probe_expect "$L" exe_p2 "ok:/bin/busybox"
  probe_expect "$L" status_1 "ok:Name:"
  probe_expect "$L" status_p3 "ok:Uid:"
  probe_expect "$L" status_p4 "ok:Uid:	1001"
  [[ "$(probe_out mounts)" == *hidepid=$h* || $h == 0 ]] && pass "$L: mounts" || fail "$L: mounts: $(probe_out mounts)"
  for n in p4:1001:1001 p5:0:0; do
    u="${n#*:}" n="${n%%:*}"
    for f in maps smaps auxv mem fd fdinfo cwdls; do probe_expect "$L" "${f}_$n" ok; done
    probe_expect "$L" "environ_$n" "ok:SW_PROBE_SECRET=$(secret_of "$u")"
    probe_expect "$L" "cwd_$n" "is:/"
    probe_expect "$L" "root_$n" "is:/"
    probe_expect "$L" "exe_$n" "is:/bin/busybox"
  done
  probe_expect "$L" modes_p5 "is:environ -r-------- auxv -r-------- maps -r--r--r-- mem -r-------- fd dr-x------ fdinfo dr-x------"

  probe_as "$id" 1001:1001 "$p2" "$p3" "$p4" "$p5"
  L="hidepid=$h uid1001"
  # Root's P5: Linux's modes and ptrace checks below /proc/PID at hidepid 0,
  # hidepid's own denial above it at 1 and 2. Its secret never shows.
  declare -A p5_denial=([0]=EACCES [1]=EPERM [2]=ENOENT)
  for f in environ maps smaps auxv mem fd fdinfo cwd root exe cwdls; do
    probe_expect "$L root's process" "${f}_p5" "${p5_denial[$h]}"
  done
  root_secret="$(secret_of 0:0)"
  [[ "$PROBE" != *"$root_secret"* ]] && pass "$L: root's secret environment never shows" ||
    fail "$L: root's secret environment shows: $(grep -F "$root_secret" <<<"$PROBE")"
  # The caller's own process, not its descendant, at every hidepid.
  for f in maps smaps auxv fd fdinfo cwdls; do probe_expect "$L own process" "${f}_p4" ok; done
  probe_expect "$L own process" environ_p4 "ok:SW_PROBE_SECRET=$(secret_of 1001:1001)"
  probe_expect "$L own process" cwd_p4 "is:/"
  probe_expect "$L own process" root_p4 "is:/"
  probe_expect "$L own process" exe_p4 "is:/bin/busybox"
  probe_expect "$L" mem_self ok
  probe_expect "$L" id "ok:uid=1001 gid=1001"
  for n in self_status thread_self own_pid; do probe_expect "$L" "$n" "ok:1001"; done
  probe_expect "$L" own_task ok
  probe_expect "$L" own_pid_listed ok
  probe_expect "$L" status_p4 "ok:Uid:	1001"
  probe_listed "$L" procpids "$p4" yes
  probe_listed "$L" pspids "$p4" yes
  case "$h" in
    0)
      probe_expect "$L" mounts "ok:/proc proc rw,"
      [[ "$(probe_out mounts)" != *hidepid* ]] && pass "$L: /proc/mounts has no hidepid" || fail "$L: /proc/mounts: $(probe_out mounts)"
      for p in 1 "$p2" "$p3"; do probe_listed "$L" procpids "$p" yes; probe_listed "$L" pspids "$p" yes; done
      probe_expect "$L" ps_p2 "ok:$p2 1002 sleep 1002"
      probe_expect "$L" stat_p2 "ok:1002"
      probe_expect "$L" cmdline_p2 "ok:sleep"
      probe_expect "$L" status_p2 "ok:Uid:	1002"
      probe_expect "$L" task_p2 "ok:$p2"
      probe_expect "$L" status_1 "ok:Name:	init"
      probe_expect "$L" status_p3 "ok:Uid:	1001"
      # /proc/PID/exe follows ptrace rules whatever hidepid says (as on Linux).
      probe_expect "$L" exe_p2 "fail:readlink: /proc/$p2/exe: cannot read link: Permission denied"
      probe_expect "$L" modes_p5 "is:environ -r-------- auxv -r-------- maps -r--r--r-- mem -r-------- fd dr-x------ fdinfo dr-x------"
      ;;
    1)
      probe_expect "$L" mounts "ok:hidepid=1"
      for p in 1 "$p2" "$p3"; do probe_listed "$L" procpids "$p" yes; probe_listed "$L" pspids "$p" no; done
      probe_expect "$L" ps_p2 "ok"
      [[ -z "$(probe_out ps_p2)" ]] && pass "$L: ps has no line for $p2" || fail "$L: ps shows $(probe_out ps_p2)"
      probe_expect "$L" stat_p2 "ok:1002"
      expect_errno "$L" p2 EPERM "$p2"
      expect_errno "$L" 1 EPERM
      probe_expect "$L (non-dumpable same uid)" status_p3 "fail:cat: can't open '/proc/$p3/status': Operation not permitted"
      ;;
    2)
      probe_expect "$L" mounts "ok:hidepid=2"
      for p in 1 "$p2" "$p3"; do probe_listed "$L" procpids "$p" no; probe_listed "$L" pspids "$p" no; done
      probe_expect "$L" ps_p2 "ok"
      [[ -z "$(probe_out ps_p2)" ]] && pass "$L: ps has no line for $p2" || fail "$L: ps shows $(probe_out ps_p2)"
      probe_expect "$L" stat_p2 "fail:stat: can't stat '/proc/$p2': No such file or directory"
      expect_errno "$L" p2 ENOENT "$p2"
      expect_errno "$L" 1 ENOENT
      probe_expect "$L (non-dumpable same uid)" status_p3 "fail:cat: can't open '/proc/$p3/status': No such file or directory"
      # Cached path: root reads it again right before uid 1001 does.
      out="$(sw run "$id" --user 0:0 -- cat /proc/"$p2"/status 2>&1)"
      [[ "$out" == *"Uid:	1002"* ]] && pass "$L: root re-read /proc/$p2/status" || fail "$L: root re-read: $out"
      out="$(sw run "$id" --user 1001:1001 -- cat /proc/"$p2"/status 2>&1)"
      rc=$?
      [[ $rc != 0 && "$out" == "cat: can't open '/proc/$p2/status': No such file or directory" ]] &&
        pass "$L: cached /proc/$p2/status still denied" || fail "$L: cached /proc/$p2/status: rc=$rc $out"
      out="$(sw run "$id" --user 1001:1001 -c "cd /proc/$p2/task" 2>&1)"
      [[ $? != 0 ]] && pass "$L: cd into cached /proc/$p2/task denied ($out)" || fail "$L: cd /proc/$p2/task worked"
      ;;
  esac
  if ((h == 1)); then
    # Cached path under hidepid=1: EPERM after root's read.
    sw run "$id" --user 0:0 -- cat /proc/"$p2"/status >/dev/null 2>&1
    out="$(sw run "$id" --user 1001:1001 -- cat /proc/"$p2"/status 2>&1)"
    [[ "$out" == "cat: can't open '/proc/$p2/status': Operation not permitted" ]] &&
      pass "$L: cached /proc/$p2/status still denied" || fail "$L: cached /proc/$p2/status: $out"
  fi
  if ((h > 0)); then
    out="$(sw run "$id" --user 1001:1001 -- /hptest/nodump selfcheck 2>&1)"
    [[ "$out" == "selfcheck OK" ]] && pass "$L: non-dumpable caller sees its own /proc entries and threads" ||
      fail "$L: nodump selfcheck: $out"
  fi
  rm_sb "$id"
done

# --- precedence: template vs flag --------------------------------------------------
echo "== template precedence"
tmpl="$work/hidepid2.yaml"
printf 'description: hidepid test template\nextends: base\nruntime_options:\n  hidepid: 2\n' >"$tmpl"
# origin_is ID HIDEPID ORIGIN
origin_is() {
  sw inspect "$1" | python3 -c '
import json, sys
j = json.load(sys.stdin)
h, o = j["spec"]["runtime_options"]["hidepid"], j["spec"]["origin"]["/runtime_options/hidepid"]
print(f"hidepid={h} origin={o}")
sys.exit(not (h == int(sys.argv[1]) and o == sys.argv[2]))' "$2" "$3"
}
# guest_view ID: uid 1001's view: "<hidepid option or none> <PID 1 listed?>"
guest_view() {
  sw run "$1" --user 1001:1001 -c \
    'o=$(grep " /proc " /proc/mounts | grep -o "hidepid=[0-9]" || echo none); if ls /proc | grep -qx 1; then echo "$o pid1"; else echo "$o nopid1"; fi'
}
if create_sb a --template "$tmpl" --hidepid 0; then
  assert_true "template hidepid 2 + --hidepid 0: inspect" origin_is "$a" 0 flag
  v="$(guest_view "$a")"
  [[ "$v" == "none pid1" ]] && pass "template hidepid 2 + --hidepid 0: guest ($v)" || fail "template + --hidepid 0: guest: $v"
  rm_sb "$a"
fi
if create_sb b --template "$tmpl"; then
  assert_true "template hidepid 2 alone: inspect" origin_is "$b" 2 "template $tmpl"
  v="$(guest_view "$b")"
  [[ "$v" == "hidepid=2 nopid1" ]] && pass "template hidepid 2 alone: guest ($v)" || fail "template alone: guest: $v"
  rm_sb "$b"
fi

# A template inheriting the setting, and an inline one.
printf 'description: child\nextends: %s\n' "$tmpl" >"$work/child.yaml"
if create_sb c --template "$work/child.yaml"; then
  assert_true "child template: hidepid 2 from the parent template" origin_is "$c" 2 "template $tmpl"
  rm_sb "$c"
fi
if create_sb d --template '{"extends": "base", "runtime_options": {"hidepid": 1}}'; then
  assert_true "inline template: hidepid 1" origin_is "$d" 1 "template inline"
  v="$(guest_view "$d")"
  [[ "$v" == "hidepid=1 pid1" ]] && pass "inline template hidepid 1: guest ($v)" || fail "inline template: guest: $v"
  rm_sb "$d"
fi

# --- invalid values: usage errors (exit 2), nothing created -----------------------------
echo "== invalid values"
usage_error() { # usage_error LABEL ARGS...
  local label="$1" err rc
  shift
  err="$(sw "$@" 2>&1 >/dev/null)"
  rc=$?
  [[ $rc == 2 && "$err" == *hidepid* ]] && pass "$label: exit 2 ($err)" || fail "$label: want exit 2 about hidepid, got rc=$rc: $err"
}
usage_error "create --hidepid 3" create --hidepid 3
for v in 3 -1 invisible '"2"' true; do
  printf 'extends: base\nruntime_options:\n  hidepid: %s\n' "$v" >"$work/bad.yaml"
  usage_error "template hidepid: $v" create --template "$work/bad.yaml"
done
if create_sb e; then
  usage_error "run ID --hidepid (create option without --template)" run "$e" --hidepid 2 -- true
  rm_sb "$e"
fi
l="$(sw --json ls 2>&1)"
[[ "$(tr -d ' \n' <<<"$l")" == "[]" ]] && pass "invalid values left no sandbox" || fail "invalid values left: $l"

# --- one-shot ------------------------------------------------------------------------
echo "== one-shot"
out="$(sw run --template base --hidepid 2 --user 1001:1001 -c 'ls /proc; grep " /proc " /proc/mounts' 2>"$work/oneshot.err")"
rc=$?
pids="$(grep -E '^[0-9]+$' <<<"$out" | tr '\n' ' ')"
[[ $rc == 0 && "$out" == *self* && "$out" == *hidepid=2* ]] && ! has_word "$pids" 1 &&
  pass "one-shot --hidepid 2: ls /proc hides PID 1 (pids: $pids)" ||
  fail "one-shot --hidepid 2: rc=$rc: $(tr '\n' ' ' <<<"$out") $(cat "$work/oneshot.err")"
left="$(sw --json ls 2>&1)"
[[ "$(tr -d ' \n' <<<"$left")" == "[]" ]] && pass "one-shot left no sandbox" || fail "one-shot left: $left"

# --- a runtime without hidepid is refused --------------------------------------------
echo "== stock runtime $STOCK_RUNSC"
stock() { sw --runsc "$STOCK_RUNSC" "$@"; }
no_sandbox_left() {
  local l
  l="$(sw --json ls 2>&1)"
  [[ "$(tr -d ' \n' <<<"$l")" == "[]" ]] || { echo "ls --json: $l"; return 1; }
  [[ -z "$(ls -A "$SANDWEAVE_STATE_DIR/sandboxes" 2>/dev/null)" ]] || { echo "sandboxes/: $(ls -A "$SANDWEAVE_STATE_DIR/sandboxes")"; return 1; }
  ! grep -q " $SANDWEAVE_STATE_DIR/" /proc/self/mounts || { echo "mounts left"; return 1; }
}
# refused LABEL ARGS...: exit 5, nothing on stdout, one "sandweave:" error line
# mentioning hidepid (plus, the first time, the info line about the check).
refused() {
  local label="$1" out err rc errlines
  shift
  out="$("$@" 2>"$work/refused.err")"
  rc=$?
  err="$(cat "$work/refused.err")"
  errlines="$(grep -v '^checking that .* enforces hidepid' "$work/refused.err")"
  if [[ $rc == 5 && -z "$out" && "$(wc -l <<<"$errlines")" == 1 && "$errlines" == "sandweave: "*hidepid*refused* ]]; then
    pass "$label: exit 5: $errlines"
  else
    fail "$label: want exit 5 and one error line about hidepid, got rc=$rc stdout='$out' stderr='$err'"
  fi
  no_sandbox_left >"$work/left.txt" && pass "$label: no sandbox left" || fail "$label: $(cat "$work/left.txt")"
}
refused "stock create --hidepid 2" stock create --hidepid 2
refused "stock create --hidepid 1" stock create --hidepid 1
refused "stock create --template (hidepid 2)" stock create --template "$tmpl"
refused "stock one-shot run --hidepid 2" stock run --template base --hidepid 2 --user 1001:1001 -- ls /proc
assert_true "stock: -q refusal is exactly one line" bash -c '"$@" 2>&1 >/dev/null | { mapfile -t l; [[ ${#l[@]} == 1 && ${l[0]} == *hidepid* ]]; }' _ "$SANDWEAVE" -q --runsc "$STOCK_RUNSC" create --hidepid 2
assert_true "stock: verdict cached in <state>/runtime (hidepid false)" python3 -c '
import json, glob, sys
v = {}
for f in glob.glob(sys.argv[1] + "/runtime/*.json"):
    j = json.load(open(f))
    h = j.get("hidepid")  # a bool, or {"supported": bool, "detail": ...}
    v[j.get("runsc")] = h.get("supported") if isinstance(h, dict) else h
print(v)
sys.exit(v.get(sys.argv[2]) is not False)' "$SANDWEAVE_STATE_DIR" "$STOCK_RUNSC"
err="$(stock create --hidepid 2 2>&1 >/dev/null)"
[[ "$err" != *"checking that"* ]] && pass "stock: second refusal uses the cached verdict" || fail "stock: probed again: $err"
id="$(stock -q create --hidepid 0 2>"$work/stock0.err")"
if [[ $? == 0 && -n "$id" ]]; then
  pass "stock create --hidepid 0 works ($id)"
  v="$(guest_view "$id")"
  [[ "$v" == "none pid1" ]] && pass "stock --hidepid 0: guest ($v)" || fail "stock --hidepid 0: guest: $v"
  ver="$(sw inspect "$id" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["runsc"])')"
  [[ "$ver" == "$STOCK_RUNSC" ]] && pass "stock --hidepid 0: record uses $ver" || fail "stock --hidepid 0: runsc $ver"
  rm_sb "$id"
else
  fail "stock create --hidepid 0: $(cat "$work/stock0.err")"
fi
id="$(stock -q create --template "$tmpl" --hidepid 0 2>"$work/stock0.err")"
if [[ $? == 0 && -n "$id" ]]; then
  pass "stock create --template (hidepid 2) --hidepid 0 works"
  rm_sb "$id"
else
  fail "stock create --template (hidepid 2) --hidepid 0: $(cat "$work/stock0.err")"
fi
no_sandbox_left >"$work/left.txt" && pass "no sandbox left at the end" || fail "at the end: $(cat "$work/left.txt")"

finish
