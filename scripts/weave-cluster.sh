#!/usr/bin/env bash
# A one-machine Slurm cluster for trying Weave and for its tests: munged,
# slurmctld and three slurmd (nodes w1, w2, w3; --nodes for more) on this host, loopback only,
# everything under one directory of its own (the system's /etc/slurm and
# /etc/munge are neither read nor changed).
#
# Usage: scripts/weave-cluster.sh [OPTIONS] start|stop|status|env
#   start   install what is missing (Debian: slurmctld slurmd slurm-client
#           munge), write the configuration, start the daemons that are not
#           running and wait until sinfo shows every node idle (twice is fine)
#   stop    cancel every job, stop the daemons and wait until none of the
#           cluster's processes (daemons, job steps, tasks) is left
#   status  what runs, the nodes' states and the jobs
#   env     print `export SLURM_CONF=...` and the workers' settings, for
#           eval "$(scripts/weave-cluster.sh env)"
# Options:
#   --dir DIR             where keys, configuration, logs and state live
#                         [/var/lib/sandweave-cluster]
#   --port-base N         slurmctld listens on N, node wI's slurmd on N+I [17000]
#   --slots N             sandbox slots (the count-only GRES sbx) per node [4];
#                         each node declares max(8, N) CPUs and 1 GiB per CPU,
#                         so that N one-CPU sandboxes fit
#   --nodes N             how many nodes (w1 ... wN) [3, or as many as the
#                         cluster in --dir was started with]
#   --slurmd-timeout S    seconds without a slurmd before its node is DOWN [10]
#   --message-timeout S   Slurm's MessageTimeout [3]: each ping of a dead
#                         slurmd takes this long to fail, which adds to the
#                         time before its node is DOWN (docs/weave.md)
#   --timeout S           how long start waits for the nodes [60]
#   --sandweave B         the sandweave of the workers: each node's worker
#                         daemon (`sandweave worker`, which owns the node's
#                         sandboxes) and the Slurm epilog, which at the end of
#                         each job terminates (audit barrier first) the
#                         sandboxes recorded with that job [sandweave on PATH]
#   --retain DUR          how long a worker keeps a sandbox whose job ended,
#                         for its export [24h]
#   --controller-user U   the Weave controller's Unix user, which the worker
#                         daemons serve like root (made a system user when
#                         missing) [sandweave-weave]
# Needs root: it installs packages, slurmd starts job steps as the
# submitting user, which only root can do, and the worker daemons run
# sandboxes. As on a site, only those two run as root: slurmctld runs as
# SlurmUser=slurm and munged as munge (the accounts Debian's packages make).
set -euo pipefail

prog="weave-cluster.sh"
dir=/var/lib/sandweave-cluster
port_base=17000
slots=4
slurmd_timeout=10
message_timeout=3
wait_timeout=60
node_count=""
action=""
sandweave="$(command -v sandweave || true)"
retain=24h
controller_user=sandweave-weave

die() { printf '%s: %s\n' "$prog" "$*" >&2; exit 1; }
say() { printf '%s: %s\n' "$prog" "$*" >&2; }
usage() { sed -n '2,43p' "$0" | sed 's/^# \{0,1\}//'; }

is_uint() { [[ "$1" =~ ^[0-9]+$ ]]; }
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) [ $# -ge 2 ] || die "--dir needs a value"; dir="$2"; shift ;;
        --port-base) [ $# -ge 2 ] && is_uint "$2" || die "--port-base needs a number"; port_base="$2"; shift ;;
        --slots) [ $# -ge 2 ] && is_uint "$2" || die "--slots needs a number"; slots="$2"; shift ;;
        --nodes) [ $# -ge 2 ] && is_uint "$2" || die "--nodes needs a number"; node_count="$2"; shift ;;
        --slurmd-timeout) [ $# -ge 2 ] && is_uint "$2" || die "--slurmd-timeout needs a number"; slurmd_timeout="$2"; shift ;;
        --message-timeout) [ $# -ge 2 ] && is_uint "$2" || die "--message-timeout needs a number"; message_timeout="$2"; shift ;;
        --timeout) [ $# -ge 2 ] && is_uint "$2" || die "--timeout needs a number"; wait_timeout="$2"; shift ;;
        --sandweave) [ $# -ge 2 ] || die "--sandweave needs a value"; sandweave="$2"; shift ;;
        --controller-user) [ $# -ge 2 ] && [[ "$2" =~ ^[a-z_][a-z0-9_-]*$ ]] || die "--controller-user needs a user name"; controller_user="$2"; shift ;;
        --retain) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9][0-9hms]*$ ]] || die "--retain needs a duration (24h, 90m)"; retain="$2"; shift ;;
        -h|--help) usage; exit 0 ;;
        start|stop|status|env) [ -z "$action" ] || die "one action at a time"; action="$1" ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done
[ -n "$action" ] || { usage >&2; exit 2; }
[[ "$dir" == /* ]] || dir="$PWD/$dir"
dir="${dir%/}"
conf="$dir/etc/slurm.conf"
# Without --nodes, the nodes of the cluster already in --dir (so that stop
# and env find them all), else three.
if [ -z "$node_count" ]; then
    node_count=$(grep -c '^NodeName=' "$conf" 2>/dev/null || true)
    ((node_count >= 1)) || node_count=3
fi
((node_count >= 1 && node_count <= 64)) || die "--nodes must be between 1 and 64"
nodes=()
for ((i = 1; i <= node_count; i++)); do nodes+=("w$i"); done
cpus=$((slots > 8 ? slots : 8))
((port_base >= 1024 && port_base + ${#nodes[@]} <= 65535)) || die "--port-base must be between 1024 and $((65535 - ${#nodes[@]}))"
((slots >= 1 && slots <= 1024)) || die "--slots must be between 1 and 1024"
((slurmd_timeout >= 5)) || die "--slurmd-timeout must be at least 5 seconds"
((message_timeout >= 2 && message_timeout <= 100)) || die "--message-timeout must be between 2 and 100 seconds"
# Slurm's configuration parser splits on whitespace and '#'.
[[ "$dir" =~ ^[A-Za-z0-9_./+-]+$ ]] || die "--dir may contain only letters, digits and _ . / + -: $dir"
if [ -n "$sandweave" ]; then
    [[ "$sandweave" == /* ]] || sandweave="$PWD/$sandweave"
    [[ "$sandweave" =~ ^[A-Za-z0-9_./+-]+$ ]] || die "--sandweave may contain only letters, digits and _ . / + -: $sandweave"
fi

munge_socket="$dir/munge/munge.socket"

# Slurm's commands and daemons, pointed at this cluster. SLURM_CONF is given to
# them only, not exported to every helper this script runs: the daemons pass
# it on to job steps and their tasks, which is how stop finds them.
with_conf() { SLURM_CONF="$conf" "$@"; }

# --- processes ---------------------------------------------------------------------

# The pid in FILE when that process is alive and is the program NAME. A
# zombie is not alive: a daemon killed with SIGKILL keeps its name until
# init reaps it, which can take seconds here.
pid_of() {  # FILE NAME
    local pid stat
    [ -r "$1" ] || return 1
    pid="$(tr -dc 0-9 <"$1")"
    [ -n "$pid" ] && [ -r "/proc/$pid/comm" ] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
    stat="$(cat "/proc/$pid/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    [ "${stat%% *}" != Z ] || return 1
    echo "$pid"
}
munged_pid() { pid_of "$dir/munge/munged.pid" munged; }
slurmctld_pid() { pid_of "$dir/run/ctld/slurmctld.pid" slurmctld; }
slurmd_pid() { pid_of "$dir/run/slurmd-$1.pid" slurmd; }
worker_pid() { pid_of "$dir/run/worker-$1.pid" sandweave; }
worker_socket() { echo "$dir/workers/$1/run/worker.sock"; }

# Every process started by this cluster's daemons: they all carry our
# SLURM_CONF (see with_conf) in the environment they were started with.
cluster_pids() {
    local p
    for p in /proc/[0-9]*; do
        { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf" || continue
        is_ours "${p#/proc/}" || echo "${p#/proc/}"
    done
    munged_pid || true
}

# Whether PID is this script or one of its own children (they inherit the
# caller's SLURM_CONF, if it was exported).
is_ours() {  # PID
    local pid="$1"
    while [ -n "$pid" ] && [ "$pid" -gt 1 ]; do
        [ "$pid" = "$$" ] && return 0
        pid="$(awk '/^PPid:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)"
    done
    return 1
}

# Sends TERM to each PID, waits up to SECONDS, then KILLs what is left.
end_pids() {  # SECONDS PID...
    local seconds="$1" deadline pid left
    shift
    [ $# -gt 0 ] || return 0
    kill -TERM "$@" 2>/dev/null || true
    deadline=$((SECONDS + seconds))
    while :; do
        left=()
        for pid in "$@"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
        [ ${#left[@]} -gt 0 ] || return 0
        ((SECONDS < deadline)) || break
        sleep 0.1
    done
    kill -KILL "${left[@]}" 2>/dev/null || true
}

# --- start -------------------------------------------------------------------------

require_root() {
    [ "$(id -u)" = 0 ] || die "$action needs root (installing packages; slurmd starts job steps as the submitting user)"
}

install_packages() {
    local packages=(slurmctld slurmd slurm-client munge iproute2) missing=() p
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
    say "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 || die "could not install ${missing[*]}"
}

write_conf() {  # FILE: slurm.conf for this cluster
    local i
    cat <<EOF
# Written by scripts/weave-cluster.sh: a one-machine cluster, loopback only.
ClusterName=sandweave
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port_base
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
# Bind to the configured addresses (127.0.0.1), never to every interface.
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=$dir/state/ctld
SlurmctldPidFile=$dir/run/ctld/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdSpoolDir=$dir/state/slurmd-%n
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmdLogFile=$dir/log/slurmd-%n.log
# Three slurmd on one host: each takes the node description below, not the hardware.
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
DefMemPerCPU=256
GresTypes=sbx
# As a real site runs Slurm: each job and step in cgroups of its own (this
# host mounts cgroup v1: cgroup.conf), every process of a step ended with it,
# and an extern step holding each allocation from its start. Nothing of a
# sandbox lives in a job's cgroups: the worker daemons own the sandboxes.
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
PrologFlags=contain
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
# A request no node could ever grant (more CPUs or memory than any has) fails
# at submission with Slurm's reason instead of pending forever.
EnforcePartLimits=ALL
# salloc --no-shell leaves no process behind to watch: never end an allocation for inactivity.
InactiveLimit=0
SlurmdTimeout=$slurmd_timeout
# Slurm retries a refused connection once a second for MessageTimeout, so a
# dead slurmd is noticed about MessageTimeout after a ping: keep it short on loopback.
MessageTimeout=$message_timeout
ReturnToService=2
KillWait=5
# At the end of each job: its sandboxes end, audit barrier first (docs/weave.md, "Lifetimes").
Epilog=$dir/etc/epilog
MinJobAge=60
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
EOF
    for i in "${!nodes[@]}"; do
        printf 'NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=%d RealMemory=%d Gres=sbx:%d State=UNKNOWN\n' \
            "${nodes[$i]}" $((port_base + i + 1)) "$cpus" $((cpus * 1024)) "$slots"
    done
    printf 'PartitionName=sandboxes Nodes=%s Default=YES MaxTime=INFINITE State=UP\n' "$(IFS=,; echo "${nodes[*]}")"
}

write_cgroup_conf() {
    cat <<EOF
# Written by scripts/weave-cluster.sh: Slurm's cgroups, on this host's cgroup v1.
CgroupPlugin=cgroup/v1
ConstrainCores=yes
ConstrainRAMSpace=yes
EOF
}

write_gres_conf() {
    # Count-only: Slurm counts the slots, no device files are bound.
    printf 'Name=sbx Count=%d Flags=CountOnly\n' "$slots"
}

# The workers' epilog: slurmd runs it as root at the end of every job on a
# node, with SLURM_JOB_ID and SLURMD_NODENAME. It must exit 0 (a failing
# epilog drains the node); what it did goes to log/epilog-<node>.log.
write_epilog() {
    cat <<EOF
#!/bin/sh
# Written by scripts/weave-cluster.sh: the sandboxes recorded with the ending job end.
sandweave='$sandweave'
[ -n "\$SLURM_JOB_ID" ] && [ -n "\$SLURMD_NODENAME" ] && [ -x "\$sandweave" ] || exit 0
state="$dir/workers/\$SLURMD_NODENAME/state"
[ -d "\$state" ] || exit 0
"\$sandweave" __slurm-epilog --state-dir "\$state" "\$SLURM_JOB_ID" >>"$dir/log/epilog-\$SLURMD_NODENAME.log" 2>&1
exit 0
EOF
}

# The cluster as the controller (and a user) needs it: where Slurm's
# configuration is and each worker's sandweave state directory.
write_env() {
    local n
    printf '# Written by scripts/weave-cluster.sh; read with: eval "$(scripts/weave-cluster.sh --dir %s env)"\n' "$dir"
    printf 'export SLURM_CONF=%s\n' "$conf"
    printf 'export SANDWEAVE_WEAVE_CLUSTER_DIR=%s\n' "$dir"
    printf 'export SANDWEAVE_WEAVE_WORKERS="%s"\n' "${nodes[*]}"
    for n in "${nodes[@]}"; do
        printf 'export SANDWEAVE_WEAVE_STATE_%s=%s\n' "$n" "$dir/workers/$n/state"
        printf 'export SANDWEAVE_WEAVE_SOCKET_%s=%s\n' "$n" "$(worker_socket "$n")"
    done
    printf 'export SANDWEAVE_WEAVE_SNAPSHOTS=%s\n' "$dir/snapshots"
    # munged's socket: clients on this host present munge credentials through
    # it, and the controller checks them (docs/weave.md, "Identities").
    printf 'export SANDWEAVE_WEAVE_MUNGE_SOCKET=%s\n' "$munge_socket"
}

any_running() {
    local n
    if munged_pid >/dev/null || slurmctld_pid >/dev/null; then return 0; fi
    for n in "${nodes[@]}"; do slurmd_pid "$n" >/dev/null && return 0; done
    return 1
}

# munged refuses a socket below a directory that not everyone may enter.
check_searchable() {
    local d="$dir"
    while d="$(dirname "$d")"; [ "$d" != / ]; do
        [ "$(( $(stat -c %#a "$d") & 01 ))" = 1 ] ||
            die "munged needs every directory above its socket searchable by all: chmod o+x $d, or pick another --dir"
    done
}

# A worker's <state>/snapshots becomes a link to the shared directory (what
# it held first moves there).
share_snapshots() {
    local own="$1"
    [ -L "$own" ] && return 0
    if [ -d "$own" ]; then
        find "$own" -mindepth 1 -maxdepth 1 -exec mv -n -t "$dir/snapshots" {} +
        rmdir "$own" || die "$own: could not be replaced by a link to $dir/snapshots"
    fi
    ln -s "$dir/snapshots" "$own"
}

prepare_dir() {
    local n
    umask 022
    mkdir -p "$dir"
    check_searchable
    chmod 0755 "$dir"
    mkdir -p "$dir/etc" "$dir/run" "$dir/log" "$dir/state/ctld"
    # Owned by the daemons' own users, which run as on a site: munged
    # insists on a socket directory only its user can write and a key only it
    # can read; slurmctld (SlurmUser) writes its state, pid and log.
    install -d -m 0711 -o munge -g munge "$dir/munge"
    chown -R munge:munge "$dir/munge"
    install -d -m 0755 -o slurm -g slurm "$dir/state/ctld" "$dir/run/ctld"
    chown -R slurm:slurm "$dir/state/ctld"
    local log
    for log in slurmctld munged; do
        [ -e "$dir/log/$log.log" ] || install -m 0640 /dev/null "$dir/log/$log.log"
    done
    chown slurm:slurm "$dir/log/slurmctld.log"
    chown munge:munge "$dir/log/munged.log"
    # One snapshot directory every worker shares (as a site's shared
    # filesystem would be): a snapshot taken on one worker restores on any.
    install -d -m 0700 "$dir/snapshots"
    for n in "${nodes[@]}"; do
        install -d -m 0700 "$dir/workers/$n/state"
        # Searchable: the relays run as the sandboxes' users and reach the
        # worker daemon's socket here (it judges each peer itself).
        install -d -m 0711 "$dir/workers/$n/run"
        chmod 0711 "$dir/workers/$n/run"
        install -d -m 0755 "$dir/state/slurmd-$n"
        share_snapshots "$dir/workers/$n/state/snapshots"
    done
    if [ ! -s "$dir/munge/munge.key" ]; then
        rm -f "$dir/munge/munge.key"
        mungekey --create --keyfile="$dir/munge/munge.key" || die "could not create the munge key"
    fi
    chown munge:munge "$dir/munge/munge.key"
    chmod 0600 "$dir/munge/munge.key"
    # A running cluster keeps its settings: changing them needs a stop first.
    write_conf >"$conf.new"
    write_gres_conf >"$dir/etc/gres.conf.new"
    write_cgroup_conf >"$dir/etc/cgroup.conf.new"
    if { [ -f "$conf" ] && ! cmp -s "$conf.new" "$conf"; } ||
        { [ -f "$dir/etc/gres.conf" ] && ! cmp -s "$dir/etc/gres.conf.new" "$dir/etc/gres.conf"; } ||
        { [ -f "$dir/etc/cgroup.conf" ] && ! cmp -s "$dir/etc/cgroup.conf.new" "$dir/etc/cgroup.conf"; }; then
        if any_running; then
            rm -f "$conf.new" "$dir/etc/gres.conf.new" "$dir/etc/cgroup.conf.new"
            die "the cluster in $dir runs with other settings; stop it first"
        fi
    fi
    mv -f "$conf.new" "$conf"
    mv -f "$dir/etc/gres.conf.new" "$dir/etc/gres.conf"
    mv -f "$dir/etc/cgroup.conf.new" "$dir/etc/cgroup.conf"
    # The epilog is not part of slurm.conf's settings: a running cluster takes a new one.
    write_epilog >"$dir/etc/epilog.new"
    chmod 0755 "$dir/etc/epilog.new"
    mv -f "$dir/etc/epilog.new" "$dir/etc/epilog"
    write_env >"$dir/cluster.env.new"
    mv -f "$dir/cluster.env.new" "$dir/cluster.env"
}

# The controller's system user, as tools/systemd/sandweave-controller.service
# has it: no home, no shell.
ensure_controller_user() {
    id -u "$controller_user" >/dev/null 2>&1 && return 0
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
        "$controller_user" || die "could not make the controller's user $controller_user"
}

start_munged() {
    munged_pid >/dev/null && return 0
    rm -f "$munge_socket" "$munge_socket.lock"
    runuser -u munge -- munged --socket="$munge_socket" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed" --num-threads=2 ||
        die "munged did not start (see $dir/log/munged.log)"
}

start_slurmctld() {
    slurmctld_pid >/dev/null && return 0
    with_conf slurmctld -f "$conf" || die "slurmctld did not start (see $dir/log/slurmctld.log)"
}

start_slurmd() {  # NODE
    slurmd_pid "$1" >/dev/null && return 0
    with_conf slurmd -f "$conf" -N "$1" || die "slurmd for $1 did not start (see $dir/log/slurmd-$1.log)"
}

# Node NODE's worker daemon: `sandweave worker` on the node's state directory
# and socket, as tools/systemd/sandweave-worker.service runs it on a site.
# Started outside Slurm and without the cluster's SLURM_CONF: the sandboxes
# are its descendants, never a job step's, so no step's or job's end kills
# them (stop ends them itself).
start_worker() {  # NODE
    local sock deadline
    worker_pid "$1" >/dev/null && return 0
    [ -x "$sandweave" ] || die "no sandweave binary for the worker daemons (give --sandweave)"
    sock="$(worker_socket "$1")"
    setsid env -u SLURM_CONF -u SANDWEAVE_HOST "$sandweave" --state-dir "$dir/workers/$1/state" \
        worker --socket "$sock" --retain "$retain" --controller-user "$controller_user" </dev/null >>"$dir/log/worker-$1.log" 2>&1 &
    local pid=$!
    echo "$pid" >"$dir/run/worker-$1.pid"
    deadline=$((SECONDS + 10))
    # Listening, not just a socket file: one left by a killed daemon stays.
    until worker_pid "$1" >/dev/null && ss -Hxl 2>/dev/null | grep -qF " $sock "; do
        # (until setsid and env have exec'd it, the pid is not sandweave's yet)
        kill -0 "$pid" 2>/dev/null || die "the worker daemon of $1 did not start (see $dir/log/worker-$1.log)"
        ((SECONDS < deadline)) || die "the worker daemon of $1 does not listen on $sock (see $dir/log/worker-$1.log)"
        sleep 0.05
    done
}

# Prints each node's name and state (sinfo's compact state: idle, mix, down*...).
node_states() { with_conf sinfo -h -N -o '%N %t' 2>/dev/null | sort -u; }

wait_ready() {
    local deadline=$((SECONDS + wait_timeout)) states idle
    while :; do
        states="$(node_states || true)"
        idle="$(awk '$2 ~ /^(idle|mix|alloc)$/' <<<"$states" | wc -l)"
        ((idle == ${#nodes[@]})) && return 0
        ((SECONDS < deadline)) || die "nodes not up after ${wait_timeout}s: $(tr '\n' ' ' <<<"$states")(logs in $dir/log)"
        # A node that registered DOWN earlier (slurmd killed) comes back by itself
        # with ReturnToService=2 once its slurmd answers.
        sleep 0.2
    done
}

do_start() {
    local t0 n
    t0="$(date +%s.%N)"
    require_root
    install_packages
    prepare_dir
    ensure_controller_user
    start_munged
    start_slurmctld
    for n in "${nodes[@]}"; do start_worker "$n"; done
    for n in "${nodes[@]}"; do start_slurmd "$n"; done
    wait_ready
    say "ready in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')s: nodes ${nodes[*]}, $slots sandbox slots each"
    cat <<EOF
Use it:
  eval "\$($0 --dir $dir env)"
  sinfo -N                                  # the workers
  salloc --no-shell --gres=sbx:1 -n1 --mem=256M --time=10
  srun --jobid JOB --overlap hostname       # run in that allocation
  scancel JOB
Stop it:
  $0 --dir $dir stop
EOF
}

# --- stop, status, env -------------------------------------------------------------

do_stop() {
    local pids n
    require_root
    if slurmctld_pid >/dev/null; then
        with_conf scancel --quiet --user=root --full 2>/dev/null || true
        with_conf scancel --quiet --full $(with_conf squeue -h -o %i 2>/dev/null) 2>/dev/null || true
    fi
    pids=()
    for n in "${nodes[@]}"; do slurmd_pid "$n" >/dev/null && pids+=("$(slurmd_pid "$n")"); done
    slurmctld_pid >/dev/null && pids+=("$(slurmctld_pid)")
    end_pids 10 "${pids[@]}"
    # Job steps and their tasks outlive slurmd by design: end them too.
    mapfile -t pids < <(cluster_pids | grep -vxF "$(munged_pid || echo none)")
    end_pids 5 "${pids[@]}"
    munged_pid >/dev/null && end_pids 5 "$(munged_pid)"
    # The worker daemons, then what they ran: each running sandbox is
    # terminated (final audit barrier first; its log stays in the state dir).
    pids=()
    for n in "${nodes[@]}"; do worker_pid "$n" >/dev/null && pids+=("$(worker_pid "$n")"); done
    end_pids 10 "${pids[@]}"
    if [ -x "$sandweave" ]; then
        for n in "${nodes[@]}"; do
            [ -d "$dir/workers/$n/state/sandboxes" ] || continue
            env -u SLURM_CONF -u SANDWEAVE_HOST "$sandweave" --state-dir "$dir/workers/$n/state" \
                terminate --filter state=running >/dev/null 2>&1 || say "could not terminate every sandbox on $n"
        done
    fi
    mapfile -t pids < <(cluster_pids)
    [ ${#pids[@]} -eq 0 ] || die "still running after stop: ${pids[*]}"
    rm -f "$dir"/run/*.pid "$munge_socket" "$munge_socket.lock" "$dir"/workers/*/run/worker.sock
    say "stopped (state kept in $dir)"
}

do_status() {
    local n pid rc=0
    show() {  # NAME PID
        if [ -n "$2" ]; then printf '%-10s running (pid %s)\n' "$1" "$2"; else printf '%-10s stopped\n' "$1"; rc=3; fi
    }
    show munged "$(munged_pid || true)"
    show slurmctld "$(slurmctld_pid || true)"
    for n in "${nodes[@]}"; do show "slurmd-$n" "$(slurmd_pid "$n" || true)"; done
    for n in "${nodes[@]}"; do show "worker-$n" "$(worker_pid "$n" || true)"; done
    if pid="$(slurmctld_pid)"; then
        echo
        with_conf sinfo -N -o '%N %t %G' 2>/dev/null || true
        echo
        with_conf squeue -o '%i %j %T %N %b' 2>/dev/null || true
    fi
    return "$rc"
}

do_env() {
    [ -f "$dir/cluster.env" ] || die "no cluster in $dir (start it first)"
    cat "$dir/cluster.env"
}

case "$action" in
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
    env) do_env ;;
esac
