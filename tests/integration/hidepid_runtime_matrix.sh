#!/usr/bin/env bash
# hidepid runtime matrix: drives the patched runsc directly (no sandweave
# binary) and checks procfs hidepid=0/1/2 semantics from inside gVisor.
#
# Needs root (runsc), /bin/busybox (busybox-static), python3; the helpers of
# tests/helpers/ (nodump, the probe, the config editor) come from the build.
#
#   SANDWEAVE_RUNSC   patched runsc (default $SANDWEAVE_RUNTIME_DIR/runsc, i.e.
#                     /usr/local/lib/sandweave/runsc; built with
#                     runtime/build-runsc.sh when missing)
#   STOCK_RUNSC       unpatched Debian runsc (default /usr/bin/runsc)
#
# Exit status: 0 if every check passed, 1 otherwise, 77 if it cannot run.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
readonly STOCK_RUNSC="${STOCK_RUNSC:-/usr/bin/runsc}"
RUNSC="${SANDWEAVE_RUNSC:-${SANDWEAVE_RUNTIME_DIR:-/usr/local/lib/sandweave}/runsc}"

require_root "runsc"
[[ -x /bin/busybox ]] || skip "/bin/busybox missing (apt-get install busybox-static)"
require_cmd python3
require_helpers nodump hidepid_probe_matrix.sh hidepid_oci_config.py
if [[ ! -x "$RUNSC" ]]; then
  [[ -z "${SANDWEAVE_RUNSC:-}" ]] || fatal "SANDWEAVE_RUNSC names an executable runsc" "$RUNSC is not executable"
  echo "building patched runsc with runtime/build-runsc.sh" >&2
  RUNSC="$("$SANDWEAVE_SOURCE_DIR/runtime/build-runsc.sh" | tail -n1)" || fatal "runtime/build-runsc.sh builds the patched runsc"
fi
echo "runsc: $RUNSC ($("$RUNSC" --version | head -n1))"

test_setup
work="$SCRATCH"
state="$work/state"
containers=()
delete_containers() {
  local id
  for id in "${containers[@]}"; do
    "$RUNSC" --root "$state" delete --force "$id" >/dev/null 2>&1 </dev/null || true
  done
}
on_cleanup delete_containers

# --- rootfs --------------------------------------------------------------------
rootfs="$work/rootfs"
mkdir -p "$rootfs"/{bin,etc,proc,sys,dev,tmp,root}
chmod 1777 "$rootfs/tmp"
cp /bin/busybox "$rootfs/bin/busybox"
for app in $(/bin/busybox --list); do
  [[ "$app" == busybox ]] || ln -sf busybox "$rootfs/bin/$app"
done
cat >"$rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
user1001:x:1001:1001:user1001:/tmp:/bin/sh
user1002:x:1002:1002:user1002:/tmp:/bin/sh
EOF
cat >"$rootfs/etc/group" <<'EOF'
root:x:0:
user1001:x:1001:
user1002:x:1002:
EOF

# nodump: PR_SET_DUMPABLE=0, then either sleeps ("sleep") or checks that its
# own /proc entries (incl. a second thread) stay accessible ("selfcheck").
# probe.sh P2 P3: one "name|rc|output" line per observation.
cp "$HELPERS/nodump" "$rootfs/bin/nodump"
cp "$HELPERS/hidepid_probe_matrix.sh" "$rootfs/bin/probe.sh"
chmod 755 "$rootfs/bin/nodump" "$rootfs/bin/probe.sh"

# --- sandbox helpers -----------------------------------------------------------
# make_bundle DIR RUNSC PROC_OPTION ARGS...: config.json from `runsc spec`,
# with our rootfs, ARGS as the init process and PROC_OPTION on /proc.
make_bundle() {
  local dir="$1" runsc="$2" opt="$3"
  shift 3
  mkdir -p "$dir"
  (cd "$dir" && "$runsc" spec) || return 1
  python3 "$HELPERS/hidepid_oci_config.py" "$dir/config.json" "$rootfs" "$opt" "$@"
}

rs() { "$RUNSC" --root "$state" --network=none --platform=ptrace "$@" </dev/null; }

# probe_as ID USER P2 P3 [EXTRA EXEC FLAGS...]: run probe.sh, keep its lines in
# PROBE for probe_expect (lib.sh).
probe_as() {
  local id="$1" user="$2" p2="$3" p3="$4"
  shift 4
  PROBE="$(rs exec --user "$user" "$@" "$id" /bin/probe.sh "$p2" "$p3" 2>"$work/exec.err")" ||
    { echo "exec as $user failed: $(cat "$work/exec.err")" >&2; PROBE=""; }
}

start_sandbox() {
  local id="$1" opt="$2"
  make_bundle "$work/bundle-$id" "$RUNSC" "$opt" /bin/sleep 1000 || return 1
  containers+=("$id")
  rs run --bundle "$work/bundle-$id" --detach "$id" >"$work/$id.log" 2>&1 || {
    cat "$work/$id.log" >&2
    return 1
  }
}

# detached_pid ID USER [--FLAG=VALUE...] ARGS...: start a detached process,
# print its guest PID.
detached_pid() {
  local id="$1" user="$2" pidfile flags=()
  shift 2
  while [[ "${1:-}" == --* ]]; do flags+=("$1"); shift; done
  pidfile="$(mktemp "$work/pid.XXXXXX")"
  rm -f "$pidfile"
  # --pid-file is given explicitly: without it, runsc's --detach re-exec
  # appends its own --pid-file flag after the command's arguments.
  rs exec --user "$user" --detach --pid-file "$pidfile.host" --internal-pid-file "$pidfile" \
    "${flags[@]}" "$id" "$@" >/dev/null 2>&1 || return 1
  cat "$pidfile"
}

# --- matrix --------------------------------------------------------------------
declare -A proc_opt=([0]="hidepid=0" [1]="hidepid=noaccess" [2]="hidepid=2")
for h in 0 1 2; do
  id="hidepid$h-$$"
  echo "== hidepid=$h (${proc_opt[$h]})"
  if ! start_sandbox "$id" "${proc_opt[$h]}"; then
    fail "hidepid=$h: sandbox did not start"
    continue
  fi
  p2="$(detached_pid "$id" 1002:1002 /bin/sleep 1002)" || p2=""
  if [[ -z "$p2" ]]; then
    fail "hidepid=$h: could not start uid 1002 process"
    continue
  fi
  # A PID that does not exist would make the "hidden" checks below pass
  # without testing anything: a process that did not start is a failure.
  p3="$(detached_pid "$id" 1001:1001 /bin/nodump sleep)" ||
    { fail "hidepid=$h: could not start the non-dumpable uid 1001 process"; p3=99999; }

  # Root first: it must see everything, and its lookups populate the dentry
  # cache for /proc/P2/... before uid 1001 probes (the cached-path case). A
  # root process also keeps /proc/P2 pinned as its cwd with status open.
  detached_pid "$id" 0:0 /bin/sh -c "cd /proc/$p2 && exec 3</proc/$p2/status && exec sleep 1000" >/dev/null ||
    fail "hidepid=$h: could not start root process pinning /proc/$p2"
  probe_as "$id" 0:0 "$p2" "$p3"
  for n in ls_proc_p2 ls_proc_1; do probe_expect "hidepid=$h root" "$n" ok; done
  for n in cmdline_p2 status_p2 task_p2 ps_p2 status_1 own_pid thread_self; do
    probe_expect "hidepid=$h root" "$n" ok
  done
  # Root without CAP_SYS_PTRACE: /proc/PID/exe is subject to ptrace rules
  # regardless of hidepid (same as Linux).
  probe_expect "hidepid=$h root" exe_p2 EACCES
  probe_expect "hidepid=$h root" status_p3 ok

  probe_as "$id" 1001:1001 "$p2" "$p3"
  L="hidepid=$h uid1001"
  probe_expect "$L" id "ok:uid=1001"
  for n in self_status thread_self own_pid; do probe_expect "$L" "$n" "ok:1001"; done
  probe_expect "$L" own_task ok
  probe_expect "$L" ps_self ok
  # Another user's environ, memory, maps, fds and paths: Linux's modes and
  # ptrace checks at hidepid 0, hidepid's own denial at 1 and 2.
  declare -A p2_denial=([0]=EACCES [1]=EPERM [2]=ENOENT)
  for n in environ maps smaps auxv io mem fd fdinfo cwd root; do probe_expect "$L" "${n}_p2" "${p2_denial[$h]}"; done
  for n in environ_self maps_self fd_self cwd_own; do probe_expect "$L" "$n" ok; done
  case "$h" in
    0)
      probe_expect "$L" mounts "ok:dentry_cache_limit"
      assert_no_match "$L: /proc/mounts has no hidepid" hidepid "$(probe_out mounts)"
      for n in ls_proc_p2 ls_proc_1 stat_p2 status_p2 task_p2 ps_p2 status_1; do probe_expect "$L" "$n" ok; done
      probe_expect "$L" cmdline_p2 "ok:sleep"
      probe_expect "$L" exe_p2 EACCES # ptrace read check on /proc/PID/exe, as on Linux
      probe_expect "$L" ls_proc_p3 ok
      ;;
    1)
      probe_expect "$L" mounts "ok:hidepid=1"
      for n in ls_proc_p2 ls_proc_1; do probe_expect "$L" "$n" ok; done
      probe_expect "$L" stat_p2 "ok:1002"
      for n in cmdline_p2 status_p2 task_p2 exe_p2 status_1; do probe_expect "$L" "$n" EPERM; done
      probe_expect "$L" ps_p2 fail
      probe_expect "$L" ls_proc_p3 ok
      probe_expect "$L" status_p3 EPERM
      ;;
    2)
      probe_expect "$L" mounts "ok:hidepid=2"
      for n in ls_proc_p2 ls_proc_1 ps_p2; do probe_expect "$L" "$n" fail; done
      for n in stat_p2 cmdline_p2 status_p2 task_p2 exe_p2 status_1; do probe_expect "$L" "$n" ENOENT; done
      probe_expect "$L" ls_proc_p3 fail
      probe_expect "$L" status_p3 ENOENT
      # Cached path: root reads /proc/P2/status again right before uid 1001.
      rs exec --user 0:0 "$id" /bin/cat /proc/"$p2"/status >/dev/null 2>&1 || fail "$L: root re-read failed"
      PROBE="$(rs exec --user 1001:1001 "$id" /bin/sh -c \
        "out=\$(cat /proc/$p2/status 2>&1); echo \"cached_status|\$?|\$out\"; out=\$(cd /proc/$p2 2>&1); echo \"cached_cd|\$?|\$out\"" 2>&1)"
      probe_expect "$L" cached_status ENOENT
      probe_expect "$L" cached_cd fail
      # CAP_SYS_PTRACE bypasses hidepid (ptrace rules), as does membership of
      # the gid= group (root by default), as on Linux.
      # (Capabilities are not inherited across execve by non-root tasks, so
      # the commands run directly rather than under probe.sh.)
      out="$(rs exec --user 1001:1001 --cap CAP_SYS_PTRACE "$id" /bin/cat /proc/"$p2"/status 2>&1)" &&
        [[ "$out" == *"Uid:"*1002* ]] && pass "$L+CAP_SYS_PTRACE: status_p2 -> ok" ||
        fail "$L+CAP_SYS_PTRACE: status_p2 -> ok" "got: $(tr '\n' ' ' <<<"$out")"
      out="$(rs exec --user 1001:1001 --cap CAP_SYS_PTRACE "$id" /bin/ls /proc 2>&1)" &&
        grep -qx "$p2" <<<"$out" && pass "$L+CAP_SYS_PTRACE: ls_proc_p2 -> ok" ||
        fail "$L+CAP_SYS_PTRACE: ls_proc_p2 -> ok" "ls /proc lacks $p2: $(tr '\n' ' ' <<<"$out")"
      probe_as "$id" 1001:0 "$p2" "$p3"
      for n in ls_proc_p2 status_p2; do probe_expect "$L:gid0 (gid= exemption)" "$n" ok; done
      # Another uid 1001 process (same ids, dumpable) stays visible, unless it
      # holds capabilities the caller lacks (commoncap ptrace rule).
      p4="$(detached_pid "$id" 1001:1001 /bin/sleep 1003)" ||
        { fail "$L: could not start a second uid 1001 process"; p4=99999; }
      p5="$(detached_pid "$id" 1001:1001 --cap=CAP_KILL /bin/sleep 1004)" ||
        { fail "$L: could not start a uid 1001 process with CAP_KILL"; p5=99999; }
      probe_as "$id" 1001:1001 "$p4" "$p5"
      probe_expect "$L same uid" ls_proc_p2 ok
      probe_expect "$L same uid" status_p2 "ok:1001"
      probe_expect "$L same uid with more caps" ls_proc_p3 fail
      probe_expect "$L same uid with more caps" status_p3 ENOENT
      ;;
  esac
  if ((h > 0)); then
    out="$(rs exec --user 1001:1001 "$id" /bin/nodump selfcheck 2>&1)"
    assert_match "hidepid=$h: non-dumpable caller sees its own /proc entries and threads" "selfcheck OK" "$out"
  fi
  if ((h == 2)); then
    # Memory snapshot: the policy is part of the saved procfs state, so it
    # survives checkpoint/restore even into a bundle without the option.
    rid="hidepid2restore-$$"
    make_bundle "$work/bundle-$rid" "$RUNSC" "rw" /bin/sleep 1000 && containers+=("$rid")
    if rs checkpoint --image-path "$work/image" "$id" >"$work/ckpt.log" 2>&1 &&
      rs restore --image-path "$work/image" --bundle "$work/bundle-$rid" --detach "$rid" >>"$work/ckpt.log" 2>&1; then
      probe_as "$rid" 1001:1001 "$p2" "$p3"
      probe_expect "$L restored" mounts "ok:hidepid=2"
      probe_expect "$L restored" ls_proc_p2 fail
      probe_expect "$L restored" status_p2 ENOENT
      probe_expect "$L restored" own_pid "ok:1001"
    else
      fail "$L: checkpoint/restore failed: $(tr '\n' ' ' <"$work/ckpt.log")"
    fi
  fi
  rs delete --force "$id" >/dev/null 2>&1 || true
done

# --- invalid option must refuse to start (never pretend) ---------------------
id="hidepidbad-$$"
make_bundle "$work/bundle-$id" "$RUNSC" "hidepid=3" /bin/true && containers+=("$id")
if rs run --bundle "$work/bundle-$id" "$id" >"$work/$id.log" 2>&1; then
  fail "hidepid=3: sandbox started"
else
  pass "hidepid=3: sandbox refused to start"
fi

# --- stock runsc ignores hidepid (why the patch exists) ----------------------
if [[ -x "$STOCK_RUNSC" ]]; then
  id="hidepidstock-$$"
  make_bundle "$work/bundle-$id" "$STOCK_RUNSC" "hidepid=2" /bin/grep ' /proc ' /proc/mounts && containers+=("$id")
  out="$("$STOCK_RUNSC" --root "$state" --network=none --platform=ptrace run --bundle "$work/bundle-$id" "$id" </dev/null 2>&1)"
  if [[ "$out" == *"dentry_cache_limit"* && "$out" != *hidepid* ]]; then
    pass "stock $STOCK_RUNSC: /proc/mounts lacks hidepid ($out)"
  else
    fail "stock $STOCK_RUNSC: unexpected /proc mount: $out"
  fi
else
  skipped "stock runsc comparison ($STOCK_RUNSC missing)"
fi

finish
