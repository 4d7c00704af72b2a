#!/bin/sh
# The guest side of hidepid_runtime_matrix.sh (busybox under a bare runsc):
#   hidepid_probe_matrix.sh P2 P3
# prints one "name|exit status|output" line per observation of /proc.
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
# Files Linux guards with its own modes and ptrace checks whatever hidepid says.
for f in environ maps smaps auxv io; do probe ${f}_p2 cat /proc/"$p2"/$f; done
probe mem_p2 dd if=/proc/"$p2"/mem of=/dev/null bs=1 count=0
probe fd_p2 ls /proc/"$p2"/fd
probe fdinfo_p2 cat /proc/"$p2"/fdinfo/0
for l in cwd root; do probe ${l}_p2 readlink -v /proc/"$p2"/$l; done
probe environ_self cat /proc/self/environ
probe maps_self cat /proc/self/maps
probe fd_self ls /proc/self/fd
probe cwd_own readlink -v /proc/$$/cwd
