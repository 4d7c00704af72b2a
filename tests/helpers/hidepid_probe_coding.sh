#!/bin/sh
# The guest side of hidepid_coding.sh (procps, coreutils and python3 of the
# coding image): hidepid_probe_coding.sh P2 P3 P4
# prints one "name|exit status|output" line per observation of /proc.
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
