#!/usr/bin/env bash
# hidepid runtime matrix: drives the patched runsc directly (no sandweave
# binary) and checks procfs hidepid=0/1/2 semantics from inside gVisor.
#
# Needs root (runsc), busybox-static, python3; gcc + libc6-dev for the
# non-dumpable helper (those checks are reported as skipped without gcc).
#
#   SANDWEAVE_RUNSC   patched runsc (default $SANDWEAVE_RUNTIME_DIR/runsc, i.e.
#                     /usr/local/lib/sandweave/runsc; built with
#                     runtime/build-runsc.sh when missing)
#   STOCK_RUNSC       unpatched Debian runsc (default /usr/bin/runsc)
#
# Exit status: 0 if every check passed, 1 otherwise, 77 if it cannot run.
set -uo pipefail

readonly REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
readonly STOCK_RUNSC="${STOCK_RUNSC:-/usr/bin/runsc}"
RUNSC="${SANDWEAVE_RUNSC:-${SANDWEAVE_RUNTIME_DIR:-/usr/local/lib/sandweave}/runsc}"

pass=0 fail=0 skip=0
ok() { pass=$((pass + 1)); printf 'PASS %s\n' "$*"; }
bad() { fail=$((fail + 1)); printf 'FAIL %s\n' "$*"; }
skipped() { skip=$((skip + 1)); printf 'SKIP %s\n' "$*"; }
cannot_run() { printf 'hidepid_runtime_matrix: cannot run: %s\n' "$*" >&2; exit 77; }

[[ "$(id -u)" == 0 ]] || cannot_run "must run as root (runsc)"
[[ -x /bin/busybox ]] || cannot_run "/bin/busybox missing (apt-get install busybox-static)"
command -v python3 >/dev/null || cannot_run "python3 missing"
if [[ ! -x "$RUNSC" ]]; then
  [[ -z "${SANDWEAVE_RUNSC:-}" ]] || cannot_run "SANDWEAVE_RUNSC=$RUNSC is not executable"
  echo "building patched runsc with runtime/build-runsc.sh" >&2
  RUNSC="$("$REPO/runtime/build-runsc.sh" | tail -n1)" || cannot_run "runtime/build-runsc.sh failed"
fi
echo "runsc: $RUNSC ($("$RUNSC" --version | head -n1))"

work="$(mktemp -d "${TMPDIR:-/tmp}/hidepid-matrix.XXXXXX")"
state="$work/state"
containers=()
cleanup() {
  local id
  for id in "${containers[@]}"; do
    "$RUNSC" --root "$state" delete --force "$id" >/dev/null 2>&1 </dev/null || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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
have_nodump=0
if command -v gcc >/dev/null; then
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
  if gcc -static -O2 -pthread -o "$rootfs/bin/nodump" "$work/nodump.c" 2>"$work/gcc.log"; then
    have_nodump=1
  else
    echo "gcc -static failed (libc6-dev missing?):" >&2
    cat "$work/gcc.log" >&2
  fi
fi

# probe.sh P2 P3: one "name|rc|output" line per observation.
cat >"$rootfs/bin/probe.sh" <<'EOF'
#!/bin/sh
p2=$1 p3=$2
probe() {
  name=$1; shift
  out=$("$@" 2>&1); rc=$?
  printf '%s|%s|%s\n' "$name" "$rc" "$(printf '%s' "$out" | tr '\n' ' ' | cut -c1-300)"
}
listed() { ls /proc | grep -qx "$1"; }
ps_has() { ps -o pid,user,args | awk -v p="$1" '$1 == p { found = 1 } END { exit !found }'; }
probe id id
probe ls_proc_p2 listed "$p2"
probe ls_proc_p3 listed "$p3"
probe ls_proc_1 listed 1
probe stat_p2 stat -c %u /proc/"$p2"
probe cmdline_p2 cat /proc/"$p2"/cmdline
probe status_p2 cat /proc/"$p2"/status
probe task_p2 ls /proc/"$p2"/task
probe exe_p2 readlink -v /proc/"$p2"/exe
probe ps_p2 ps_has "$p2"
probe ps_self ps_has $$
probe status_p3 cat /proc/"$p3"/status
probe status_1 cat /proc/1/status
probe self_status grep '^Uid:' /proc/self/status
probe thread_self grep '^Uid:' /proc/thread-self/status
probe own_pid grep '^Uid:' /proc/$$/status
probe own_task ls /proc/$$/task
probe mounts grep ' /proc ' /proc/mounts
EOF
chmod 755 "$rootfs/bin/probe.sh"

# --- sandbox helpers -----------------------------------------------------------
# make_bundle DIR RUNSC PROC_OPTION ARGS...: config.json from `runsc spec`,
# with our rootfs, ARGS as the init process and PROC_OPTION on /proc.
make_bundle() {
  local dir="$1" runsc="$2" opt="$3"
  shift 3
  mkdir -p "$dir"
  (cd "$dir" && "$runsc" spec) || return 1
  python3 - "$dir/config.json" "$rootfs" "$opt" "$@" <<'EOF'
import json, sys
path, rootfs, opt, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
spec = json.load(open(path))
spec["root"] = {"path": rootfs, "readonly": True}
spec["process"]["args"] = args
spec["process"]["terminal"] = False
# No capabilities: `runsc exec` processes inherit the container's sets unless
# --cap is given, and gVisor (like runc) does not drop them for non-root users.
spec["process"]["capabilities"] = {k: [] for k in
    ("bounding", "effective", "inheritable", "permitted", "ambient")}
spec["hostname"] = "hidepid"
for m in spec["mounts"]:
    if m["destination"] == "/proc":
        m["options"] = [opt]
        break
else:
    sys.exit("no /proc mount in runsc spec")
json.dump(spec, open(path, "w"), indent=2)
EOF
}

rs() { "$RUNSC" --root "$state" --network=none --platform=ptrace "$@" </dev/null; }

# probe_as ID USER P2 P3 [EXTRA EXEC FLAGS...]: run probe.sh, store lines in $results.
results=""
probe_as() {
  local id="$1" user="$2" p2="$3" p3="$4"
  shift 4
  results="$(rs exec --user "$user" "$@" "$id" /bin/probe.sh "$p2" "$p3" 2>"$work/exec.err")" ||
    { echo "exec as $user failed: $(cat "$work/exec.err")" >&2; results=""; }
}

field() { printf '%s\n' "$results" | awk -F'|' -v n="$1" -v f="$2" '$1 == n { print $f; exit }'; }

# expect LABEL NAME WANT: WANT is "ok", "ok:TEXT" (rc 0, output has TEXT),
# "fail" (rc != 0), "EPERM", "ENOENT" or "EACCES" (rc != 0 with that message).
expect() {
  local label="$1" name="$2" want="$3" rc out msg
  rc="$(field "$name" 2)"
  out="$(field "$name" 3)"
  if [[ -z "$rc" ]]; then
    bad "$label: $name: no result"
    return
  fi
  case "$want" in
    ok) [[ "$rc" == 0 ]] ;;
    ok:*) [[ "$rc" == 0 && "$out" == *"${want#ok:}"* ]] ;;
    fail) [[ "$rc" != 0 ]] ;;
    EPERM) msg="Operation not permitted" ;;&
    ENOENT) msg="No such file or directory" ;;&
    EACCES) msg="Permission denied" ;;&
    EPERM|ENOENT|EACCES) [[ "$rc" != 0 && "$out" == *"$msg"* ]] ;;
    *) false ;;
  esac && ok "$label: $name -> $want" || bad "$label: $name: want $want, got rc=$rc: $out"
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
    bad "hidepid=$h: sandbox did not start"
    continue
  fi
  p2="$(detached_pid "$id" 1002:1002 /bin/sleep 1002)" || p2=""
  p3=""
  if ((have_nodump)); then
    p3="$(detached_pid "$id" 1001:1001 /bin/nodump sleep)" || p3=""
  fi
  if [[ -z "$p2" ]]; then
    bad "hidepid=$h: could not start uid 1002 process"
    continue
  fi
  p3="${p3:-99999}"

  # Root first: it must see everything, and its lookups populate the dentry
  # cache for /proc/P2/... before uid 1001 probes (the cached-path case). A
  # root process also keeps /proc/P2 pinned as its cwd with status open.
  detached_pid "$id" 0:0 /bin/sh -c "cd /proc/$p2 && exec 3</proc/$p2/status && exec sleep 1000" >/dev/null ||
    bad "hidepid=$h: could not start root process pinning /proc/$p2"
  probe_as "$id" 0:0 "$p2" "$p3"
  for n in ls_proc_p2 ls_proc_1; do expect "hidepid=$h root" "$n" ok; done
  for n in cmdline_p2 status_p2 task_p2 ps_p2 status_1 own_pid thread_self; do
    expect "hidepid=$h root" "$n" ok
  done
  # Root without CAP_SYS_PTRACE: /proc/PID/exe is subject to ptrace rules
  # regardless of hidepid (same as Linux).
  expect "hidepid=$h root" exe_p2 EACCES
  ((have_nodump)) && expect "hidepid=$h root" status_p3 ok

  probe_as "$id" 1001:1001 "$p2" "$p3"
  L="hidepid=$h uid1001"
  expect "$L" id "ok:uid=1001"
  for n in self_status thread_self own_pid; do expect "$L" "$n" "ok:1001"; done
  expect "$L" own_task ok
  expect "$L" ps_self ok
  case "$h" in
    0)
      expect "$L" mounts "ok:dentry_cache_limit"
      [[ "$(field mounts 3)" != *hidepid* ]] && ok "$L: /proc/mounts has no hidepid" || bad "$L: /proc/mounts: $(field mounts 3)"
      for n in ls_proc_p2 ls_proc_1 stat_p2 status_p2 task_p2 ps_p2 status_1; do expect "$L" "$n" ok; done
      expect "$L" cmdline_p2 "ok:sleep"
      expect "$L" exe_p2 EACCES # ptrace read check on /proc/PID/exe, as on Linux
      ((have_nodump)) && expect "$L" ls_proc_p3 ok
      ;;
    1)
      expect "$L" mounts "ok:hidepid=1"
      for n in ls_proc_p2 ls_proc_1; do expect "$L" "$n" ok; done
      expect "$L" stat_p2 "ok:1002"
      for n in cmdline_p2 status_p2 task_p2 exe_p2 status_1; do expect "$L" "$n" EPERM; done
      expect "$L" ps_p2 fail
      if ((have_nodump)); then
        expect "$L" ls_proc_p3 ok
        expect "$L" status_p3 EPERM
      fi
      ;;
    2)
      expect "$L" mounts "ok:hidepid=2"
      for n in ls_proc_p2 ls_proc_1 ps_p2; do expect "$L" "$n" fail; done
      for n in stat_p2 cmdline_p2 status_p2 task_p2 exe_p2 status_1; do expect "$L" "$n" ENOENT; done
      if ((have_nodump)); then
        expect "$L" ls_proc_p3 fail
        expect "$L" status_p3 ENOENT
      fi
      # Cached path: root reads /proc/P2/status again right before uid 1001.
      rs exec --user 0:0 "$id" /bin/cat /proc/"$p2"/status >/dev/null 2>&1 || bad "$L: root re-read failed"
      results="$(rs exec --user 1001:1001 "$id" /bin/sh -c \
        "out=\$(cat /proc/$p2/status 2>&1); echo \"cached_status|\$?|\$out\"; out=\$(cd /proc/$p2 2>&1); echo \"cached_cd|\$?|\$out\"" 2>&1)"
      expect "$L" cached_status ENOENT
      expect "$L" cached_cd fail
      # CAP_SYS_PTRACE bypasses hidepid (ptrace rules), as does membership of
      # the gid= group (root by default), as on Linux.
      # (Capabilities are not inherited across execve by non-root tasks, so
      # the commands run directly rather than under probe.sh.)
      results="$(rs exec --user 1001:1001 --cap CAP_SYS_PTRACE "$id" /bin/cat /proc/"$p2"/status 2>&1)" &&
        [[ "$results" == *"Uid:"*1002* ]] && ok "$L+CAP_SYS_PTRACE: status_p2 -> ok" ||
        bad "$L+CAP_SYS_PTRACE: status_p2: $results"
      results="$(rs exec --user 1001:1001 --cap CAP_SYS_PTRACE "$id" /bin/ls /proc 2>&1)" &&
        grep -qx "$p2" <<<"$results" && ok "$L+CAP_SYS_PTRACE: ls_proc_p2 -> ok" ||
        bad "$L+CAP_SYS_PTRACE: ls /proc lacks $p2"
      probe_as "$id" 1001:0 "$p2" "$p3"
      for n in ls_proc_p2 status_p2; do expect "$L:gid0 (gid= exemption)" "$n" ok; done
      # Another uid 1001 process (same ids, dumpable) stays visible, unless it
      # holds capabilities the caller lacks (commoncap ptrace rule).
      p4="$(detached_pid "$id" 1001:1001 /bin/sleep 1003)" || p4=99999
      p5="$(detached_pid "$id" 1001:1001 --cap=CAP_KILL /bin/sleep 1004)" || p5=99999
      probe_as "$id" 1001:1001 "$p4" "$p5"
      expect "$L same uid" ls_proc_p2 ok
      expect "$L same uid" status_p2 "ok:1001"
      expect "$L same uid with more caps" ls_proc_p3 fail
      expect "$L same uid with more caps" status_p3 ENOENT
      ;;
  esac
  if ((have_nodump)) && ((h > 0)); then
    results="$(rs exec --user 1001:1001 "$id" /bin/nodump selfcheck 2>&1)"
    [[ "$results" == *"selfcheck OK"* ]] && ok "hidepid=$h: non-dumpable caller sees its own /proc entries and threads" ||
      bad "hidepid=$h: nodump selfcheck: $results"
  fi
  if ((h == 2)); then
    # Memory snapshot: the policy is part of the saved procfs state, so it
    # survives checkpoint/restore even into a bundle without the option.
    rid="hidepid2restore-$$"
    make_bundle "$work/bundle-$rid" "$RUNSC" "rw" /bin/sleep 1000 && containers+=("$rid")
    if rs checkpoint --image-path "$work/image" "$id" >"$work/ckpt.log" 2>&1 &&
      rs restore --image-path "$work/image" --bundle "$work/bundle-$rid" --detach "$rid" >>"$work/ckpt.log" 2>&1; then
      probe_as "$rid" 1001:1001 "$p2" "$p3"
      expect "$L restored" mounts "ok:hidepid=2"
      expect "$L restored" ls_proc_p2 fail
      expect "$L restored" status_p2 ENOENT
      expect "$L restored" own_pid "ok:1001"
    else
      bad "$L: checkpoint/restore failed: $(tr '\n' ' ' <"$work/ckpt.log")"
    fi
  fi
  if ((!have_nodump)); then skipped "hidepid=$h: non-dumpable checks (no gcc -static)"; fi
  rs delete --force "$id" >/dev/null 2>&1 || true
done

# --- invalid option must refuse to start (never pretend) ---------------------
id="hidepidbad-$$"
make_bundle "$work/bundle-$id" "$RUNSC" "hidepid=3" /bin/true && containers+=("$id")
if rs run --bundle "$work/bundle-$id" "$id" >"$work/$id.log" 2>&1; then
  bad "hidepid=3: sandbox started"
else
  ok "hidepid=3: sandbox refused to start"
fi

# --- stock runsc ignores hidepid (why the patch exists) ----------------------
if [[ -x "$STOCK_RUNSC" ]]; then
  id="hidepidstock-$$"
  make_bundle "$work/bundle-$id" "$STOCK_RUNSC" "hidepid=2" /bin/grep ' /proc ' /proc/mounts && containers+=("$id")
  out="$("$STOCK_RUNSC" --root "$state" --network=none --platform=ptrace run --bundle "$work/bundle-$id" "$id" </dev/null 2>&1)"
  if [[ "$out" == *"dentry_cache_limit"* && "$out" != *hidepid* ]]; then
    ok "stock $STOCK_RUNSC: /proc/mounts lacks hidepid ($out)"
  else
    bad "stock $STOCK_RUNSC: unexpected /proc mount: $out"
  fi
else
  skipped "stock runsc comparison ($STOCK_RUNSC missing)"
fi

((skip)) && echo "$skip skipped"
echo "$pass passed, $fail failed"
((fail == 0))
