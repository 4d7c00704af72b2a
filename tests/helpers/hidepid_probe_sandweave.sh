#!/bin/sh
# The guest side of hidepid_sandweave.sh (busybox, the base image):
#   hidepid_probe_sandweave.sh P2 P3 P4 P5
# prints one "name|exit status|output" line per observation of /proc.
p2=$1 p3=$2 p4=$3 p5=$4
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
# The files Linux guards with its own modes and ptrace checks whatever hidepid
# says, for P5 (another user's process) and P4 (the caller's own, not its
# descendant); mem is opened only (dd, no bytes): reading address 0 fails anyway.
for t in p4:"$p4" p5:"$p5"; do
  n=${t%%:*} p=${t#*:}
  probe environ_$n cat /proc/"$p"/environ
  probe maps_$n cat /proc/"$p"/maps
  probe smaps_$n cat /proc/"$p"/smaps
  probe auxv_$n sh -c "cat /proc/$p/auxv >/dev/null"
  probe mem_$n dd if=/proc/"$p"/mem of=/dev/null bs=1 count=0
  probe fd_$n ls /proc/"$p"/fd
  probe fdinfo_$n cat /proc/"$p"/fdinfo/0
  probe cwd_$n readlink -v /proc/"$p"/cwd
  probe root_$n readlink -v /proc/"$p"/root
  probe exe_$n readlink -v /proc/"$p"/exe
  probe cwdls_$n ls /proc/"$p"/cwd/
done
probe mem_self dd if=/proc/self/mem of=/dev/null bs=1 count=0
probe modes_p5 sh -c "cd /proc/$p5 && stat -c '%n %A' environ auxv maps mem fd fdinfo"
