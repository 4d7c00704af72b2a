#!/usr/bin/env bash
# hidepid through the sandweave CLI: `create --hidepid 0|1|2`, template
# precedence, one-shot runs, and the refusal (exit 5) of a runtime that does not
# enforce hidepid (Debian's stock /usr/bin/runsc).
#
# For each hidepid value one sandbox runs a uid 1002 sleep (P2), a non-dumpable
# uid 1001 process (P3, a static helper compiled here) and a dumpable uid 1001
# sleep (P4) beside root's guest init (PID 1); a probe script then observes
# /proc as uid 1001 and as root. Expected (patched runsc, see runtime/README.md):
#
#   as uid 1001           hidepid=0            hidepid=1          hidepid=2
#   ls /proc (1, P2, P3)  listed               listed             absent
#   /proc/P2/{cmdline,status,task}  ok         EPERM              ENOENT
#   readlink /proc/P2/exe EACCES (ptrace rule) EPERM              ENOENT
#   busybox ps            shows 1, P2          only own processes only own
#   P4 (same uid)         ok                   ok                 ok
#
# Root (Docker's default caps + CAP_SYS_PTRACE) sees everything; /proc/self,
# /proc/thread-self and the caller's own PID and threads always work.
#
# Needs root, /bin/busybox, the patched runsc (runtime/build-runsc.sh), gcc and a
# static libc (libc6-dev) for the helper, and Debian's runsc at /usr/bin/runsc.
#
#   SANDWEAVE        sandweave binary (default $SANDWEAVE_BUILD_DIR/sandweave,
#                    else /work/build-hidepid/sandweave)
#   STOCK_RUNSC      unpatched runsc (default /usr/bin/runsc)
#
# Prints PASS/FAIL lines and "N passed, N failed"; exit 1 on any failure.
set -uo pipefail

if [[ -z "${SANDWEAVE:-}" ]]; then
  if [[ -n "${SANDWEAVE_BUILD_DIR:-}" ]]; then SANDWEAVE="$SANDWEAVE_BUILD_DIR/sandweave"
  else SANDWEAVE=/work/build-hidepid/sandweave; fi
fi
readonly SANDWEAVE
readonly STOCK_RUNSC="${STOCK_RUNSC:-/usr/bin/runsc}"
T0=$SECONDS

pass=0 fail=0
ok() { pass=$((pass + 1)); printf 'PASS %s\n' "$*"; }
bad() { fail=$((fail + 1)); printf 'FAIL %s\n' "$*"; }
check() { # check LABEL CMD...: PASS if CMD succeeds
  local label="$1"
  shift
  if "$@"; then ok "$label"; else bad "$label"; fi
}
finish() {
  echo "$pass passed, $fail failed ($((SECONDS - T0)) s)"
  ((fail == 0))
  exit
}
fatal() { bad "$*"; finish; }

[[ "$(id -u)" == 0 ]] || fatal "must run as root (sandweave drives runsc and overlayfs)"
[[ -x "$SANDWEAVE" ]] || fatal "sandweave binary $SANDWEAVE not found (set SANDWEAVE or SANDWEAVE_BUILD_DIR)"
command -v gcc >/dev/null || fatal "gcc missing (apt-get install gcc libc6-dev): needed for the non-dumpable helper"
[[ -x "$STOCK_RUNSC" ]] || fatal "$STOCK_RUNSC missing (apt-get install runsc): needed for the refusal checks"

work="$(mktemp -d "${TMPDIR:-/tmp}/hidepid-sandweave.XXXXXX")"
export SANDWEAVE_STATE_DIR="$work/state"
mkdir -p "$SANDWEAVE_STATE_DIR"
created=()

sw() { "$SANDWEAVE" "$@" </dev/null; }

cleanup() {
  local id ids
  for id in "${created[@]}"; do sw -q rm "$id" >/dev/null 2>&1 || true; done
  # Anything else left behind (a failed check may have created it).
  ids="$(sw --json ls 2>/dev/null | python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.load(sys.stdin)))' 2>/dev/null)"
  for id in $ids; do
    echo "cleanup: removing leftover sandbox $id" >&2
    sw -q rm "$id" >/dev/null 2>&1 || true
  done
  if grep -q " $work/" /proc/self/mounts; then
    echo "cleanup: mounts left under $work, not removing it" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# create_sb VAR [create args...]: create a sandbox, record it for cleanup.
create_sb() {
  local __var="$1" __id
  shift
  __id="$(sw -q create "$@" 2>"$work/create.err")" || {
    bad "create $*: exit $?: $(tr '\n' ' ' <"$work/create.err")"
    return 1
  }
  created+=("$__id")
  printf -v "$__var" '%s' "$__id"
}

rm_sb() {
  local id="$1" i
  sw -q rm "$id" >/dev/null 2>&1 || bad "rm $id failed"
  for i in "${!created[@]}"; do [[ "${created[$i]}" == "$id" ]] && unset 'created[i]'; done
}

# --- guest files ------------------------------------------------------------------
# The root filesystem's cache in the guest is authoritative (runsc
# --file-access=exclusive), so files are copied from the host into a directory
# the guest has never looked up: /hptest, right after create.
mkdir -p "$work/hptest"
cat >"$work/nodump.c" <<'EOF'
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* nodump sleep: PR_SET_DUMPABLE=0 and wait forever.
 * nodump selfcheck: the same, then with a second thread check that its own
 * /proc entries stay accessible; prints "selfcheck OK". */
static volatile pid_t tid2;

static void *thread(void *arg) {
  tid2 = syscall(SYS_gettid);
  for (;;) pause();
  return arg;
}

static int check(const char *path) {
  char buf[64];
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    printf("%s: %s\n", path, strerror(errno));
    return 1;
  }
  ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n <= 0) {
    printf("%s: read failed\n", path);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  char path[128];
  pthread_t t;
  int bad = 0, listed = 0;
  pid_t pid = getpid();
  struct dirent *de;
  DIR *d;

  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 || prctl(PR_GET_DUMPABLE) != 0) {
    perror("prctl");
    return 2;
  }
  if (argc > 1 && strcmp(argv[1], "sleep") == 0)
    for (;;) pause();
  pthread_create(&t, NULL, thread, NULL);
  while (!tid2) usleep(1000);
  bad |= check("/proc/self/status");
  bad |= check("/proc/thread-self/status");
  snprintf(path, sizeof(path), "/proc/%d/status", pid);
  bad |= check(path);
  snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid2);
  bad |= check(path);
  snprintf(path, sizeof(path), "/proc/%d/status", tid2);
  bad |= check(path);
  if ((d = opendir("/proc")) != NULL) {
    while ((de = readdir(d)) != NULL) listed |= atoi(de->d_name) == pid;
    closedir(d);
  }
  if (!listed) {
    printf("own pid %d not listed in /proc\n", pid);
    bad = 1;
  }
  printf("selfcheck %s\n", bad ? "FAILED" : "OK");
  return bad;
}
EOF
gcc -static -O2 -pthread -o "$work/hptest/nodump" "$work/nodump.c" 2>"$work/gcc.log" ||
  fatal "gcc -static failed (libc6-dev missing?): $(tr '\n' ' ' <"$work/gcc.log")"

# probe.sh P2 P3 P4: one "name|rc|output" line per observation (busybox tools).
cat >"$work/hptest/probe.sh" <<'EOF'
#!/bin/sh
p2=$1 p3=$2 p4=$3
probe() {
  name=$1; shift
  out=$("$@" 2>&1); rc=$?
  printf '%s|%s|%s\n' "$name" "$rc" "$(printf '%s' "$out" | tr '\n' ' ' | sed 's/ *$//' | cut -c1-400)"
}
procpids() { ls /proc | grep -E '^[0-9]+$' | tr '\n' ' '; }
pspids() { ps | awk 'NR > 1 { printf "%s ", $1 }'; }
pslines() { ps | awk -v p="$1" '$1 == p { $1 = $1; print }'; }
probe id id
probe procpids procpids
probe pspids pspids
probe ps_p2 pslines "$p2"
probe stat_p2 stat -c %u /proc/"$p2"
probe cmdline_p2 cat /proc/"$p2"/cmdline
probe status_p2 cat /proc/"$p2"/status
probe task_p2 ls /proc/"$p2"/task
probe exe_p2 readlink -v /proc/"$p2"/exe
probe status_1 cat /proc/1/status
probe cmdline_1 cat /proc/1/cmdline
probe status_p3 cat /proc/"$p3"/status
probe status_p4 grep '^Uid:' /proc/"$p4"/status
probe self_status grep '^Uid:' /proc/self/status
probe thread_self grep '^Uid:' /proc/thread-self/status
probe own_pid grep '^Uid:' /proc/$$/status
probe own_task ls /proc/$$/task
probe own_pid_listed sh -c "ls /proc | grep -qx $$"
probe mounts grep ' /proc ' /proc/mounts
EOF

# install_helpers ID: copy /hptest into the sandbox's root filesystem.
install_helpers() {
  local rootfs="$SANDWEAVE_STATE_DIR/sandboxes/$1/rootfs"
  [[ -d "$rootfs" ]] || { bad "$1: no rootfs at $rootfs"; return 1; }
  cp -a "$work/hptest" "$rootfs/hptest"
}

# bg_pid ID USER CMD...: start CMD in the background in the guest as USER (it
# outlives `sandweave run`, reparented to the guest init); print its guest PID.
# Its stdio goes to /dev/null, or it would hold our command substitution open.
bg_pid() {
  local id="$1" user="$2" pid
  shift 2
  pid="$(sw run "$id" --user "$user" -c "$* </dev/null >/dev/null 2>&1 & echo \$!" 2>"$work/bg.err")"
  [[ "$pid" =~ ^[0-9]+$ ]] || { bad "$id: start '$*' as $user: got '$pid' $(tr '\n' ' ' <"$work/bg.err")"; return 1; }
  echo "$pid"
}

results=""
probe_as() { # probe_as ID USER P2 P3 P4
  results="$(sw run "$1" --user "$2" -- /bin/sh /hptest/probe.sh "$3" "$4" "$5" 2>"$work/probe.err")" ||
    bad "probe as $2 in $1: exit $?: $(tr '\n' ' ' <"$work/probe.err")"
}
rc_of() { printf '%s\n' "$results" | awk -F'|' -v n="$1" '$1 == n { print $2; exit }'; }
out_of() { printf '%s\n' "$results" | awk -v n="$1" 'index($0, n "|") == 1 { sub("^[^|]*[|][^|]*[|]", ""); print; exit }'; }

# expect LABEL NAME WANT. WANT: ok | ok:TEXT (rc 0, output contains TEXT) |
# fail (rc != 0) | err:EXACT (rc != 0, output is exactly EXACT)
expect() {
  local label="$1" name="$2" want="$3" rc out
  rc="$(rc_of "$name")"
  out="$(out_of "$name")"
  if [[ -z "$rc" ]]; then bad "$label: $name: no result"; return; fi
  case "$want" in
    ok) [[ "$rc" == 0 ]] ;;
    ok:*) [[ "$rc" == 0 && "$out" == *"${want#ok:}"* ]] ;;
    fail) [[ "$rc" != 0 ]] ;;
    err:*) [[ "$rc" != 0 && "$out" == "${want#err:}" ]] ;;
    *) false ;;
  esac && ok "$label: $name -> $want" || bad "$label: $name: want $want, got rc=$rc: $out"
}
has_word() { [[ " $1 " == *" $2 "* ]]; }
# listed LABEL NAME PID yes|no: PID is (not) among the words of NAME's output
listed() {
  local label="$1" name="$2" pid="$3" want="$4" out
  out="$(out_of "$name")"
  if [[ "$(rc_of "$name")" != 0 ]]; then bad "$label: $name failed: $out"; return; fi
  if has_word "$out" "$pid"; then [[ "$want" == yes ]]; else [[ "$want" == no ]]; fi &&
    ok "$label: $name: $pid listed=$want" || bad "$label: $name: $pid listed should be $want: $out"
}

# Errors as busybox prints them, per errno.
declare -A ERR=([EPERM]="Operation not permitted" [ENOENT]="No such file or directory" [EACCES]="Permission denied")
expect_errno() { # expect_errno LABEL WHICH(p2|1) ERRNO PID: the denial messages for one target
  local L="$1" tgt="$2" e="${ERR[$3]}" p="${4:-}"
  if [[ "$tgt" == 1 ]]; then
    expect "$L" status_1 "err:cat: can't open '/proc/1/status': $e"
    expect "$L" cmdline_1 "err:cat: can't open '/proc/1/cmdline': $e"
    return
  fi
  expect "$L" cmdline_p2 "err:cat: can't open '/proc/$p/cmdline': $e"
  expect "$L" status_p2 "err:cat: can't open '/proc/$p/status': $e"
  expect "$L" task_p2 "err:ls: /proc/$p/task: $e"
  expect "$L" exe_p2 "err:readlink: /proc/$p/exe: cannot read link: $e"
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
  echo "P2=$p2 (uid 1002)  P3=$p3 (uid 1001, non-dumpable)  P4=$p4 (uid 1001)"
  insp="$(sw inspect "$id")"
  check "hidepid=$h: inspect shows hidepid $h from flag" python3 -c '
import json, sys
j = json.loads(sys.argv[1])
sys.exit(not (j["spec"]["runtime_options"]["hidepid"] == int(sys.argv[2])
              and j["spec"]["origin"]["/runtime_options/hidepid"] == "flag"))' "$insp" "$h"

  # Root: sees everything (CAP_SYS_PTRACE bypasses hidepid and the exe rule).
  # It also reads /proc/P2/status and pins /proc/P2 as a cwd with status open,
  # so uid 1001's lookups below go through cached dentries.
  pin="$(bg_pid "$id" 0:0 "cd /proc/$p2 && exec 3</proc/$p2/status && exec sleep 1000")" &&
    out="$(sw run "$id" --user 0:0 -c "readlink /proc/$pin/cwd; readlink /proc/$pin/fd/3" 2>&1 | tr '\n' ' ')" &&
    [[ "$out" == "/proc/$p2 /proc/$p2/status " ]] && ok "hidepid=$h: root process $pin pins /proc/$p2" ||
    bad "hidepid=$h: root pinning process: $out"
  probe_as "$id" 0:0 "$p2" "$p3" "$p4"
  L="hidepid=$h root"
  expect "$L" id "ok:uid=0"
  for p in 1 "$p2" "$p3" "$p4"; do listed "$L" procpids "$p" yes; listed "$L" pspids "$p" yes; done
  expect "$L" ps_p2 "ok:$p2 1002 sleep 1002"
  expect "$L" stat_p2 "ok:1002"
  expect "$L" cmdline_p2 "ok:sleep"
  expect "$L" status_p2 "ok:Uid:"
  expect "$L" task_p2 "ok:$p2"
  expect "$L" exe_p2 "ok:/bin/busybox"
  expect "$L" status_1 "ok:Name:"
  expect "$L" status_p3 "ok:Uid:"
  expect "$L" status_p4 "ok:Uid:	1001"
  [[ "$(out_of mounts)" == *hidepid=$h* || $h == 0 ]] && ok "$L: mounts" || bad "$L: mounts: $(out_of mounts)"

  probe_as "$id" 1001:1001 "$p2" "$p3" "$p4"
  L="hidepid=$h uid1001"
  expect "$L" id "ok:uid=1001 gid=1001"
  for n in self_status thread_self own_pid; do expect "$L" "$n" "ok:1001"; done
  expect "$L" own_task ok
  expect "$L" own_pid_listed ok
  expect "$L" status_p4 "ok:Uid:	1001"
  listed "$L" procpids "$p4" yes
  listed "$L" pspids "$p4" yes
  case "$h" in
    0)
      expect "$L" mounts "ok:/proc proc rw,"
      [[ "$(out_of mounts)" != *hidepid* ]] && ok "$L: /proc/mounts has no hidepid" || bad "$L: /proc/mounts: $(out_of mounts)"
      for p in 1 "$p2" "$p3"; do listed "$L" procpids "$p" yes; listed "$L" pspids "$p" yes; done
      expect "$L" ps_p2 "ok:$p2 1002 sleep 1002"
      expect "$L" stat_p2 "ok:1002"
      expect "$L" cmdline_p2 "ok:sleep"
      expect "$L" status_p2 "ok:Uid:	1002"
      expect "$L" task_p2 "ok:$p2"
      expect "$L" status_1 "ok:Name:	init"
      expect "$L" status_p3 "ok:Uid:	1001"
      # /proc/PID/exe follows ptrace rules whatever hidepid says (as on Linux).
      expect "$L" exe_p2 "err:readlink: /proc/$p2/exe: cannot read link: Permission denied"
      ;;
    1)
      expect "$L" mounts "ok:hidepid=1"
      for p in 1 "$p2" "$p3"; do listed "$L" procpids "$p" yes; listed "$L" pspids "$p" no; done
      expect "$L" ps_p2 "ok"
      [[ -z "$(out_of ps_p2)" ]] && ok "$L: ps has no line for $p2" || bad "$L: ps shows $(out_of ps_p2)"
      expect "$L" stat_p2 "ok:1002"
      expect_errno "$L" p2 EPERM "$p2"
      expect_errno "$L" 1 EPERM
      expect "$L (non-dumpable same uid)" status_p3 "err:cat: can't open '/proc/$p3/status': Operation not permitted"
      ;;
    2)
      expect "$L" mounts "ok:hidepid=2"
      for p in 1 "$p2" "$p3"; do listed "$L" procpids "$p" no; listed "$L" pspids "$p" no; done
      expect "$L" ps_p2 "ok"
      [[ -z "$(out_of ps_p2)" ]] && ok "$L: ps has no line for $p2" || bad "$L: ps shows $(out_of ps_p2)"
      expect "$L" stat_p2 "err:stat: can't stat '/proc/$p2': No such file or directory"
      expect_errno "$L" p2 ENOENT "$p2"
      expect_errno "$L" 1 ENOENT
      expect "$L (non-dumpable same uid)" status_p3 "err:cat: can't open '/proc/$p3/status': No such file or directory"
      # Cached path: root reads it again right before uid 1001 does.
      out="$(sw run "$id" --user 0:0 -- cat /proc/"$p2"/status 2>&1)"
      [[ "$out" == *"Uid:	1002"* ]] && ok "$L: root re-read /proc/$p2/status" || bad "$L: root re-read: $out"
      out="$(sw run "$id" --user 1001:1001 -- cat /proc/"$p2"/status 2>&1)"
      rc=$?
      [[ $rc != 0 && "$out" == "cat: can't open '/proc/$p2/status': No such file or directory" ]] &&
        ok "$L: cached /proc/$p2/status still denied" || bad "$L: cached /proc/$p2/status: rc=$rc $out"
      out="$(sw run "$id" --user 1001:1001 -c "cd /proc/$p2/task" 2>&1)"
      [[ $? != 0 ]] && ok "$L: cd into cached /proc/$p2/task denied ($out)" || bad "$L: cd /proc/$p2/task worked"
      ;;
  esac
  if ((h == 1)); then
    # Cached path under hidepid=1: EPERM after root's read.
    sw run "$id" --user 0:0 -- cat /proc/"$p2"/status >/dev/null 2>&1
    out="$(sw run "$id" --user 1001:1001 -- cat /proc/"$p2"/status 2>&1)"
    [[ "$out" == "cat: can't open '/proc/$p2/status': Operation not permitted" ]] &&
      ok "$L: cached /proc/$p2/status still denied" || bad "$L: cached /proc/$p2/status: $out"
  fi
  if ((h > 0)); then
    out="$(sw run "$id" --user 1001:1001 -- /hptest/nodump selfcheck 2>&1)"
    [[ "$out" == "selfcheck OK" ]] && ok "$L: non-dumpable caller sees its own /proc entries and threads" ||
      bad "$L: nodump selfcheck: $out"
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
  check "template hidepid 2 + --hidepid 0: inspect" origin_is "$a" 0 flag
  v="$(guest_view "$a")"
  [[ "$v" == "none pid1" ]] && ok "template hidepid 2 + --hidepid 0: guest ($v)" || bad "template + --hidepid 0: guest: $v"
  rm_sb "$a"
fi
if create_sb b --template "$tmpl"; then
  check "template hidepid 2 alone: inspect" origin_is "$b" 2 "template $tmpl"
  v="$(guest_view "$b")"
  [[ "$v" == "hidepid=2 nopid1" ]] && ok "template hidepid 2 alone: guest ($v)" || bad "template alone: guest: $v"
  rm_sb "$b"
fi

# A template inheriting the setting, and an inline one.
printf 'description: child\nextends: %s\n' "$tmpl" >"$work/child.yaml"
if create_sb c --template "$work/child.yaml"; then
  check "child template: hidepid 2 from the parent template" origin_is "$c" 2 "template $tmpl"
  rm_sb "$c"
fi
if create_sb d --template '{"extends": "base", "runtime_options": {"hidepid": 1}}'; then
  check "inline template: hidepid 1" origin_is "$d" 1 "template inline"
  v="$(guest_view "$d")"
  [[ "$v" == "hidepid=1 pid1" ]] && ok "inline template hidepid 1: guest ($v)" || bad "inline template: guest: $v"
  rm_sb "$d"
fi

# --- invalid values: usage errors (exit 2), nothing created -----------------------------
echo "== invalid values"
usage_error() { # usage_error LABEL ARGS...
  local label="$1" err rc
  shift
  err="$(sw "$@" 2>&1 >/dev/null)"
  rc=$?
  [[ $rc == 2 && "$err" == *hidepid* ]] && ok "$label: exit 2 ($err)" || bad "$label: want exit 2 about hidepid, got rc=$rc: $err"
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
[[ "$(tr -d ' \n' <<<"$l")" == "[]" ]] && ok "invalid values left no sandbox" || bad "invalid values left: $l"

# --- one-shot ------------------------------------------------------------------------
echo "== one-shot"
out="$(sw run --template base --hidepid 2 --user 1001:1001 -c 'ls /proc; grep " /proc " /proc/mounts' 2>"$work/oneshot.err")"
rc=$?
pids="$(grep -E '^[0-9]+$' <<<"$out" | tr '\n' ' ')"
[[ $rc == 0 && "$out" == *self* && "$out" == *hidepid=2* ]] && ! has_word "$pids" 1 &&
  ok "one-shot --hidepid 2: ls /proc hides PID 1 (pids: $pids)" ||
  bad "one-shot --hidepid 2: rc=$rc: $(tr '\n' ' ' <<<"$out") $(cat "$work/oneshot.err")"
left="$(sw --json ls 2>&1)"
[[ "$(tr -d ' \n' <<<"$left")" == "[]" ]] && ok "one-shot left no sandbox" || bad "one-shot left: $left"

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
    ok "$label: exit 5: $errlines"
  else
    bad "$label: want exit 5 and one error line about hidepid, got rc=$rc stdout='$out' stderr='$err'"
  fi
  no_sandbox_left >"$work/left.txt" && ok "$label: no sandbox left" || bad "$label: $(cat "$work/left.txt")"
}
refused "stock create --hidepid 2" stock create --hidepid 2
refused "stock create --hidepid 1" stock create --hidepid 1
refused "stock create --template (hidepid 2)" stock create --template "$tmpl"
refused "stock one-shot run --hidepid 2" stock run --template base --hidepid 2 --user 1001:1001 -- ls /proc
check "stock: -q refusal is exactly one line" bash -c '"$@" 2>&1 >/dev/null | { mapfile -t l; [[ ${#l[@]} == 1 && ${l[0]} == *hidepid* ]]; }' _ "$SANDWEAVE" -q --runsc "$STOCK_RUNSC" create --hidepid 2
check "stock: verdict cached in <state>/runtime (hidepid false)" python3 -c '
import json, glob, sys
v = {}
for f in glob.glob(sys.argv[1] + "/runtime/*.json"):
    j = json.load(open(f))
    h = j.get("hidepid")  # a bool, or {"supported": bool, "detail": ...}
    v[j.get("runsc")] = h.get("supported") if isinstance(h, dict) else h
print(v)
sys.exit(v.get(sys.argv[2]) is not False)' "$SANDWEAVE_STATE_DIR" "$STOCK_RUNSC"
err="$(stock create --hidepid 2 2>&1 >/dev/null)"
[[ "$err" != *"checking that"* ]] && ok "stock: second refusal uses the cached verdict" || bad "stock: probed again: $err"
id="$(stock -q create --hidepid 0 2>"$work/stock0.err")"
if [[ $? == 0 && -n "$id" ]]; then
  created+=("$id")
  ok "stock create --hidepid 0 works ($id)"
  v="$(guest_view "$id")"
  [[ "$v" == "none pid1" ]] && ok "stock --hidepid 0: guest ($v)" || bad "stock --hidepid 0: guest: $v"
  ver="$(sw inspect "$id" | python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["runsc"])')"
  [[ "$ver" == "$STOCK_RUNSC" ]] && ok "stock --hidepid 0: record uses $ver" || bad "stock --hidepid 0: runsc $ver"
  rm_sb "$id"
else
  bad "stock create --hidepid 0: $(cat "$work/stock0.err")"
fi
id="$(stock -q create --template "$tmpl" --hidepid 0 2>"$work/stock0.err")"
if [[ $? == 0 && -n "$id" ]]; then
  created+=("$id")
  ok "stock create --template (hidepid 2) --hidepid 0 works"
  rm_sb "$id"
else
  bad "stock create --template (hidepid 2) --hidepid 0: $(cat "$work/stock0.err")"
fi
no_sandbox_left >"$work/left.txt" && ok "no sandbox left at the end" || bad "at the end: $(cat "$work/left.txt")"

finish
