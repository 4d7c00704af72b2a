#!/usr/bin/env bash
# hidepid in the `coding` image (Debian bookworm): the core visibility matrix
# observed the way an agent would, through procps (`ps aux`, `ps -ef`,
# `ps -p`, `pgrep`, `top`), coreutils `cat` and Python's os.listdir.
#
# Per hidepid value one sandbox (template coding, --hidepid N) runs a uid 1002
# sleep (P2), a non-dumpable uid 1001 process (P3, a static helper compiled
# here) and a uid 1001 sleep (P4) beside root's guest init (PID 1). As uid 1001:
#   hidepid=0  everything listed and readable
#   hidepid=1  ps/pgrep/top show only uid 1001's dumpable processes; `cat
#              /proc/P2/status` -> Operation not permitted; /proc still lists P2
#   hidepid=2  the same in ps; /proc no longer lists them; No such file or directory
# Root sees everything in every mode.
#
# The image is built once (debootstrap, a few minutes) into a persistent state
# directory, SANDWEAVE_CODING_STATE_DIR (default /var/tmp/sandweave-test-coding),
# kept between runs; every sandbox this test creates is removed. If the image
# cannot be built (no Debian mirror, no debootstrap) the test FAILS, loudly.
#
# Needs root, the patched runsc (runtime/build-runsc.sh), debootstrap, gcc with a
# static libc (libc6-dev). SANDWEAVE: binary (default
# $SANDWEAVE_BUILD_DIR/sandweave, else /work/build-hidepid/sandweave).
# Prints PASS/FAIL lines and "N passed, N failed"; exit 1 on any failure.
set -uo pipefail

if [[ -z "${SANDWEAVE:-}" ]]; then
  if [[ -n "${SANDWEAVE_BUILD_DIR:-}" ]]; then SANDWEAVE="$SANDWEAVE_BUILD_DIR/sandweave"
  else SANDWEAVE=/work/build-hidepid/sandweave; fi
fi
readonly SANDWEAVE
export SANDWEAVE_STATE_DIR="${SANDWEAVE_CODING_STATE_DIR:-/var/tmp/sandweave-test-coding}"
readonly LABEL="sandweave-test=hidepid_coding"
T0=$SECONDS

pass=0 fail=0
ok() { pass=$((pass + 1)); printf 'PASS %s\n' "$*"; }
bad() { fail=$((fail + 1)); printf 'FAIL %s\n' "$*"; }
finish() {
  echo "$pass passed, $fail failed ($((SECONDS - T0)) s)"
  ((fail == 0))
  exit
}
fatal() { bad "$*"; finish; }

[[ "$(id -u)" == 0 ]] || fatal "must run as root (sandweave drives runsc and overlayfs)"
[[ -x "$SANDWEAVE" ]] || fatal "sandweave binary $SANDWEAVE not found (set SANDWEAVE or SANDWEAVE_BUILD_DIR)"
command -v gcc >/dev/null || fatal "gcc missing (apt-get install gcc libc6-dev): needed for the non-dumpable helper"
mkdir -p "$SANDWEAVE_STATE_DIR" || fatal "cannot create $SANDWEAVE_STATE_DIR"

work="$(mktemp -d "${TMPDIR:-/tmp}/hidepid-coding.XXXXXX")"
sw() { "$SANDWEAVE" "$@" </dev/null; }

# Every sandbox of ours carries $LABEL; cleanup removes all of them, including
# leftovers of an earlier, interrupted run (the state directory persists).
cleanup_sandboxes() {
  local id
  for id in $(sw --json ls 2>/dev/null | python3 -c '
import json, sys
k, v = sys.argv[1].split("=", 1)
print(" ".join(s["id"] for s in json.load(sys.stdin) if s["spec"].get("labels", {}).get(k) == v))' "$LABEL" 2>/dev/null); do
    sw -q rm "$id" >/dev/null 2>&1 || echo "cleanup: could not remove sandbox $id" >&2
  done
}
cleanup() {
  cleanup_sandboxes
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cleanup_sandboxes

# --- the image (built once) ----------------------------------------------------------
if ! sw image ls 2>/dev/null | awk 'NR > 1 { print $1 }' | grep -qx coding; then
  echo "building the coding image in $SANDWEAVE_STATE_DIR (debootstrap, a few minutes)" >&2
  t=$SECONDS
  sw image build coding 2>&1 | tee "$work/image.err" >&2
  if ((PIPESTATUS[0] == 0)); then
    ok "image coding built ($((SECONDS - t)) s)"
  else
    echo "---- sandweave image build coding failed; last messages:" >&2
    grep -v -E 'coding: (Retrieving|Validating|Extracting|Unpacking|Configuring|Installing)' "$work/image.err" | tail -n 20 >&2
    fatal "sandweave image build coding failed (is the Debian mirror reachable? see above)"
  fi
fi

# --- guest helpers ---------------------------------------------------------------------
mkdir -p "$work/hptest"
cat >"$work/nodump.c" <<'EOF'
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>
/* Non-dumpable, then wait forever. */
int main(void) {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 || prctl(PR_GET_DUMPABLE) != 0) {
    perror("prctl");
    return 2;
  }
  for (;;) pause();
}
EOF
gcc -static -O2 -o "$work/hptest/nodump" "$work/nodump.c" 2>"$work/gcc.log" ||
  fatal "gcc -static failed (libc6-dev missing?): $(tr '\n' ' ' <"$work/gcc.log")"

# probe.sh P2 P3 P4: "name|rc|output" lines. Uses procps, coreutils and python3.
cat >"$work/hptest/probe.sh" <<'EOF'
#!/bin/sh
p2=$1 p3=$2 p4=$3
probe() {
  name=$1; shift
  out=$("$@" 2>&1); rc=$?
  printf '%s|%s|%s\n' "$name" "$rc" "$(printf '%s' "$out" | tr '\n' ' ' | sed 's/ *$//' | cut -c1-400)"
}
col() { awk -v c="$1" 'NR > 1 { printf "%s ", $c }'; }
psaux_pids() { ps aux | col 2; }
psef_pids() { ps -ef | col 2; }
psaux_line() { ps aux | awk -v p="$1" '$2 == p { print $1, $2, $11, $12 }'; }
psef_line() { ps -ef | awk -v p="$1" '$2 == p { print $1, $2, $3, $8, $9 }'; }
top_pids() { top -b -n 1 | awk 'f { printf "%s ", $1 } $1 == "PID" { f = 1 }'; }
psp() { o=$(ps -p "$1" -o pid=,user=,args=); r=$?; [ -z "$o" ] || echo $o; return $r; }
py_pids() { python3 -c 'import os; print(" ".join(sorted(p for p in os.listdir("/proc") if p.isdigit())))'; }
probe id id
probe psaux_pids psaux_pids
probe psef_pids psef_pids
probe top_pids top_pids
probe py_pids py_pids
probe psaux_p2 psaux_line "$p2"
probe psef_p2 psef_line "$p2"
probe psaux_1 psaux_line 1
probe psp_p2 psp "$p2"
probe pgrep_p2 pgrep -u 1002 sleep
probe pgrep_p3 pgrep -x nodump
probe status_p2 cat /proc/"$p2"/status
probe cmdline_1 cat /proc/1/cmdline
probe status_p3 cat /proc/"$p3"/status
probe status_p4 grep '^Uid:' /proc/"$p4"/status
probe psp_self psp $$
probe self_status grep '^Uid:' /proc/self/status
probe thread_self grep '^Uid:' /proc/thread-self/status
probe mounts grep ' /proc ' /proc/mounts
EOF

results=""
rc_of() { printf '%s\n' "$results" | awk -F'|' -v n="$1" '$1 == n { print $2; exit }'; }
out_of() { printf '%s\n' "$results" | awk -v n="$1" 'index($0, n "|") == 1 { sub("^[^|]*[|][^|]*[|]", ""); print; exit }'; }
# expect LABEL NAME WANT: ok | ok:TEXT (contains) | is:TEXT (rc 0, exactly TEXT)
#   | fail:TEXT (rc != 0, exactly TEXT)
expect() {
  local label="$1" name="$2" want="$3" rc out
  rc="$(rc_of "$name")"
  out="$(out_of "$name")"
  if [[ -z "$rc" ]]; then bad "$label: $name: no result"; return; fi
  case "$want" in
    ok) [[ "$rc" == 0 ]] ;;
    ok:*) [[ "$rc" == 0 && "$out" == *"${want#ok:}"* ]] ;;
    is:*) [[ "$rc" == 0 && "$out" == "${want#is:}" ]] ;;
    fail:*) [[ "$rc" != 0 && "$out" == "${want#fail:}" ]] ;;
    *) false ;;
  esac && ok "$label: $name -> $want" || bad "$label: $name: want $want, got rc=$rc: $out"
}
# listed LABEL NAME PID yes|no
listed() {
  local label="$1" name="$2" pid="$3" want="$4" out
  out="$(out_of "$name")"
  if [[ "$(rc_of "$name")" != 0 ]]; then bad "$label: $name failed: $out"; return; fi
  if [[ " $out " == *" $pid "* ]]; then [[ "$want" == yes ]]; else [[ "$want" == no ]]; fi &&
    ok "$label: $name: $pid listed=$want" || bad "$label: $name: $pid listed should be $want: $out"
}

bg_pid() { # bg_pid ID USER CMD...: guest PID of a background process
  local id="$1" user="$2" pid
  shift 2
  pid="$(sw run "$id" --user "$user" -c "$* </dev/null >/dev/null 2>&1 & echo \$!" 2>"$work/bg.err")"
  [[ "$pid" =~ ^[0-9]+$ ]] || { bad "$id: start '$*' as $user: got '$pid' $(tr '\n' ' ' <"$work/bg.err")"; return 1; }
  echo "$pid"
}

for h in 0 1 2; do
  echo "== coding, hidepid=$h"
  id="$(sw -q create --template coding --hidepid "$h" --label "$LABEL" 2>"$work/create.err")" || {
    bad "create --template coding --hidepid $h: $(tr '\n' ' ' <"$work/create.err")"
    continue
  }
  # A directory the guest has never looked up (its root fs cache is exclusive).
  cp -a "$work/hptest" "$SANDWEAVE_STATE_DIR/sandboxes/$id/rootfs/hptest" || { bad "$id: copying helpers"; continue; }
  p2="$(bg_pid "$id" 1002:1002 sleep 1002)" || continue
  p3="$(bg_pid "$id" 1001:1001 /hptest/nodump)" || continue
  p4="$(bg_pid "$id" 1001:1001 sleep 1004)" || continue
  echo "P2=$p2 (uid 1002)  P3=$p3 (uid 1001, non-dumpable)  P4=$p4 (uid 1001)"

  results="$(sw run "$id" --user 0:0 -- /bin/sh /hptest/probe.sh "$p2" "$p3" "$p4" 2>&1)"
  L="hidepid=$h root"
  for n in psaux_pids psef_pids top_pids py_pids; do
    for p in 1 "$p2" "$p3" "$p4"; do listed "$L" "$n" "$p" yes; done
  done
  expect "$L" psaux_1 "is:root 1 /.sandweave/init"
  expect "$L" psaux_p2 "is:1002 $p2 sleep 1002"
  expect "$L" psef_p2 "is:1002 $p2 1 sleep 1002"
  expect "$L" psp_p2 "is:$p2 1002 sleep 1002"
  expect "$L" pgrep_p2 "is:$p2"
  expect "$L" pgrep_p3 "is:$p3"
  expect "$L" status_p2 "ok:Uid:	1002"
  expect "$L" status_p3 "ok:Uid:	1001"

  results="$(sw run "$id" --user 1001:1001 -- /bin/sh /hptest/probe.sh "$p2" "$p3" "$p4" 2>&1)"
  L="hidepid=$h uid1001"
  expect "$L" id "ok:uid=1001 gid=1001"
  for n in psaux_pids psef_pids top_pids py_pids; do listed "$L" "$n" "$p4" yes; done
  expect "$L" status_p4 "ok:1001"
  expect "$L" psp_self "ok:1001"
  expect "$L" self_status "ok:1001"
  expect "$L" thread_self "ok:1001"
  case "$h" in
    0)
      [[ "$(out_of mounts)" != *hidepid* ]] && ok "$L: no hidepid in /proc/mounts" || bad "$L: mounts: $(out_of mounts)"
      for n in psaux_pids psef_pids top_pids py_pids; do
        for p in 1 "$p2" "$p3"; do listed "$L" "$n" "$p" yes; done
      done
      expect "$L" psaux_1 "is:root 1 /.sandweave/init"
      expect "$L" psaux_p2 "is:1002 $p2 sleep 1002"
      expect "$L" psef_p2 "is:1002 $p2 1 sleep 1002"
      expect "$L" psp_p2 "is:$p2 1002 sleep 1002"
      expect "$L" pgrep_p2 "is:$p2"
      expect "$L" pgrep_p3 "is:$p3"
      expect "$L" status_p2 "ok:Uid:	1002"
      expect "$L" cmdline_1 "ok:/.sandweave/init"
      expect "$L" status_p3 "ok:Uid:	1001"
      ;;
    1 | 2)
      [[ $h == 1 ]] && e="Operation not permitted" || e="No such file or directory"
      [[ $h == 1 ]] && inproc=yes || inproc=no
      expect "$L" mounts "ok:hidepid=$h"
      for n in psaux_pids psef_pids top_pids; do
        for p in 1 "$p2" "$p3"; do listed "$L" "$n" "$p" no; done
      done
      # /proc itself still lists the PIDs under hidepid=1 only.
      for p in 1 "$p2" "$p3"; do listed "$L" py_pids "$p" "$inproc"; done
      expect "$L" psaux_p2 "is:"
      expect "$L" psef_p2 "is:"
      expect "$L" psaux_1 "is:"
      expect "$L" psp_p2 "fail:"
      expect "$L" pgrep_p2 "fail:"
      expect "$L" pgrep_p3 "fail:"
      expect "$L" status_p2 "fail:cat: /proc/$p2/status: $e"
      expect "$L" cmdline_1 "fail:cat: /proc/1/cmdline: $e"
      expect "$L (non-dumpable same uid)" status_p3 "fail:cat: /proc/$p3/status: $e"
      ;;
  esac
  sw -q rm "$id" >/dev/null 2>&1 || bad "rm $id failed"
done

finish
