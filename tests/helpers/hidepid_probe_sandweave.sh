#!/bin/sh
# The guest side of hidepid_sandweave.sh (busybox, the base image):
#   hidepid_probe_sandweave.sh P2 P3 P4
# prints one "name|exit status|output" line per observation of /proc.
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
