#!/usr/bin/env bash
# hidepid in the `coding` image (Debian bookworm): the core visibility matrix
# observed the way an agent would, through procps (`ps aux`, `ps -ef`,
# `ps -p`, `pgrep`, `top`), coreutils `cat` and Python's os.listdir.
#
# Per hidepid value one sandbox (template coding, --hidepid N) runs a uid 1002
# sleep (P2), a non-dumpable uid 1001 process (P3, tests/helpers/nodump.c)
# and a uid 1001 sleep (P4) beside root's guest init (PID 1). As uid 1001:
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
# Needs root, the patched runsc (runtime/build-runsc.sh), debootstrap, python3,
# and the helpers of tests/helpers/ (nodump, the probe) from the build.
# Prints PASS/FAIL lines and a summary; exit 1 on any failure.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
readonly LABEL="sandweave-test=hidepid_coding"

require_root "sandweave drives runsc and overlayfs"
require_cmd python3
require_helpers nodump hidepid_probe_coding.sh
test_setup
work="$SCRATCH"
exec </dev/null # no guest command reads our stdin
export SANDWEAVE_STATE_DIR="${SANDWEAVE_CODING_STATE_DIR:-/var/tmp/sandweave-test-coding}"
mkdir -p "$SANDWEAVE_STATE_DIR" || fatal "create the state directory $SANDWEAVE_STATE_DIR"

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
on_cleanup cleanup_sandboxes
cleanup_sandboxes

# --- the image (built once) ----------------------------------------------------------
if ! sw image ls 2>/dev/null | awk 'NR > 1 && $1 == "coding" { found = 1 } END { exit !found }'; then
  echo "building the coding image in $SANDWEAVE_STATE_DIR (debootstrap, a few minutes)" >&2
  t=$SECONDS
  sw image build coding 2>&1 | tee "$work/image.err" >&2
  if ((PIPESTATUS[0] == 0)); then
    pass "image coding built ($((SECONDS - t)) s)"
  else
    echo "---- sandweave image build coding failed; last messages:" >&2
    grep -v -E 'coding: (Retrieving|Validating|Extracting|Unpacking|Configuring|Installing)' "$work/image.err" | tail -n 20 >&2
    fatal "sandweave image build coding failed (is the Debian mirror reachable? see above)"
  fi
fi

# --- guest helpers ---------------------------------------------------------------------
mkdir -p "$work/hptest"
cp "$HELPERS/nodump" "$work/hptest/nodump"
# probe.sh P2 P3 P4: "name|rc|output" lines. Uses procps, coreutils and python3.
cp "$HELPERS/hidepid_probe_coding.sh" "$work/hptest/probe.sh"

bg_pid() { # bg_pid ID USER CMD...: guest PID of a background process
  local id="$1" user="$2" pid
  shift 2
  pid="$(sw run "$id" --user "$user" -c "$* </dev/null >/dev/null 2>&1 & echo \$!" 2>"$work/bg.err")"
  [[ "$pid" =~ ^[0-9]+$ ]] || { fail "$id: start '$*' as $user: got '$pid' $(tr '\n' ' ' <"$work/bg.err")"; return 1; }
  echo "$pid"
}

for h in 0 1 2; do
  echo "== coding, hidepid=$h"
  id="$(sw -q create --template coding --hidepid "$h" --label "$LABEL" 2>"$work/create.err")" || {
    fail "create --template coding --hidepid $h: $(tr '\n' ' ' <"$work/create.err")"
    continue
  }
  # A directory the guest has never looked up (its root fs cache is exclusive).
  cp -a "$work/hptest" "$SANDWEAVE_STATE_DIR/sandboxes/$id/rootfs/hptest" || { fail "$id: copying helpers"; continue; }
  p2="$(bg_pid "$id" 1002:1002 sleep 1002)" || continue
  p3="$(bg_pid "$id" 1001:1001 /hptest/nodump sleep)" || continue
  p4="$(bg_pid "$id" 1001:1001 sleep 1004)" || continue
  echo "P2=$p2 (uid 1002)  P3=$p3 (uid 1001, non-dumpable)  P4=$p4 (uid 1001)"

  PROBE="$(sw run "$id" --user 0:0 -- /bin/sh /hptest/probe.sh "$p2" "$p3" "$p4" 2>&1)"
  L="hidepid=$h root"
  for n in psaux_pids psef_pids top_pids py_pids; do
    for p in 1 "$p2" "$p3" "$p4"; do probe_listed "$L" "$n" "$p" yes; done
  done
  probe_expect "$L" psaux_1 "is:root 1 /.sandweave/init"
  probe_expect "$L" psaux_p2 "is:1002 $p2 sleep 1002"
  probe_expect "$L" psef_p2 "is:1002 $p2 1 sleep 1002"
  probe_expect "$L" psp_p2 "is:$p2 1002 sleep 1002"
  probe_expect "$L" pgrep_p2 "is:$p2"
  probe_expect "$L" pgrep_p3 "is:$p3"
  probe_expect "$L" status_p2 "ok:Uid:	1002"
  probe_expect "$L" status_p3 "ok:Uid:	1001"

  PROBE="$(sw run "$id" --user 1001:1001 -- /bin/sh /hptest/probe.sh "$p2" "$p3" "$p4" 2>&1)"
  L="hidepid=$h uid1001"
  probe_expect "$L" id "ok:uid=1001 gid=1001"
  for n in psaux_pids psef_pids top_pids py_pids; do probe_listed "$L" "$n" "$p4" yes; done
  probe_expect "$L" status_p4 "ok:1001"
  probe_expect "$L" psp_self "ok:1001"
  probe_expect "$L" self_status "ok:1001"
  probe_expect "$L" thread_self "ok:1001"
  case "$h" in
    0)
      [[ "$(probe_out mounts)" != *hidepid* ]] && pass "$L: no hidepid in /proc/mounts" || fail "$L: mounts: $(probe_out mounts)"
      for n in psaux_pids psef_pids top_pids py_pids; do
        for p in 1 "$p2" "$p3"; do probe_listed "$L" "$n" "$p" yes; done
      done
      probe_expect "$L" psaux_1 "is:root 1 /.sandweave/init"
      probe_expect "$L" psaux_p2 "is:1002 $p2 sleep 1002"
      probe_expect "$L" psef_p2 "is:1002 $p2 1 sleep 1002"
      probe_expect "$L" psp_p2 "is:$p2 1002 sleep 1002"
      probe_expect "$L" pgrep_p2 "is:$p2"
      probe_expect "$L" pgrep_p3 "is:$p3"
      probe_expect "$L" status_p2 "ok:Uid:	1002"
      probe_expect "$L" cmdline_1 "ok:/.sandweave/init"
      probe_expect "$L" status_p3 "ok:Uid:	1001"
      ;;
    1 | 2)
      [[ $h == 1 ]] && e="Operation not permitted" || e="No such file or directory"
      [[ $h == 1 ]] && inproc=yes || inproc=no
      probe_expect "$L" mounts "ok:hidepid=$h"
      for n in psaux_pids psef_pids top_pids; do
        for p in 1 "$p2" "$p3"; do probe_listed "$L" "$n" "$p" no; done
      done
      # /proc itself still lists the PIDs under hidepid=1 only.
      for p in 1 "$p2" "$p3"; do probe_listed "$L" py_pids "$p" "$inproc"; done
      probe_expect "$L" psaux_p2 "is:"
      probe_expect "$L" psef_p2 "is:"
      probe_expect "$L" psaux_1 "is:"
      probe_expect "$L" psp_p2 "fail:"
      probe_expect "$L" pgrep_p2 "fail:"
      probe_expect "$L" pgrep_p3 "fail:"
      probe_expect "$L" status_p2 "fail:cat: /proc/$p2/status: $e"
      probe_expect "$L" cmdline_1 "fail:cat: /proc/1/cmdline: $e"
      probe_expect "$L (non-dumpable same uid)" status_p3 "fail:cat: /proc/$p3/status: $e"
      ;;
  esac
  sw -q rm "$id" >/dev/null 2>&1 || fail "rm $id failed"
done

finish
