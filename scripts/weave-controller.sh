#!/usr/bin/env bash
# The one-machine Weave: the Slurm cluster of scripts/weave-cluster.sh and a
# `sandweave controller` in front of it, with a certificate and token of its
# own (made at its first start), listening on loopback.
#
# Usage: scripts/weave-controller.sh [OPTIONS] start|stop|env
#   start   start the cluster (weave-cluster.sh start), then the controller,
#           and wait until it listens
#   stop    stop the controller, then the cluster
#   env     print the client's settings: SANDWEAVE_HOST,
#           SANDWEAVE_WEAVE_TOKEN_FILE and SANDWEAVE_WEAVE_FINGERPRINT, for
#           eval "$(scripts/weave-controller.sh env)"
# Options:
#   --dir DIR       the cluster's directory; the controller's is DIR/controller
#                   [/var/lib/sandweave-cluster]
#   --port N        the controller's TCP port on 127.0.0.1 [7443]
#   --sandweave B   the sandweave binary [sandweave on PATH]
#   --new-cert      make a new certificate and token before starting
#   --user U        the controller's Unix user, made a system user when
#                   missing: the controller runs as U holding only
#                   CAP_SETUID and CAP_SETGID (to run each user's Slurm
#                   commands as that user), as
#                   tools/systemd/sandweave-controller.service runs it
#                   [sandweave-weave]
# Other options (--port-base, --slots, ...) go to weave-cluster.sh, and so
# does --sandweave (for the workers' epilog).
set -euo pipefail

prog="weave-controller.sh"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir=/var/lib/sandweave-cluster
port=7443
sandweave="$(command -v sandweave || true)"
new_cert=0
user=sandweave-weave
cluster_args=()
action=""
die() { printf '%s: %s\n' "$prog" "$*" >&2; exit 1; }
say() { printf '%s: %s\n' "$prog" "$*" >&2; }
usage() { sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --dir) [ $# -ge 2 ] || die "--dir needs a value"; dir="$2"; shift ;;
        --port) [ $# -ge 2 ] && [[ "$2" =~ ^[0-9]+$ ]] || die "--port needs a number"; port="$2"; shift ;;
        --sandweave) [ $# -ge 2 ] || die "--sandweave needs a value"; sandweave="$2"; shift ;;
        --new-cert) new_cert=1 ;;
        --user) [ $# -ge 2 ] && [[ "$2" =~ ^[a-z_][a-z0-9_-]*$ ]] || die "--user needs a user name"; user="$2"; shift ;;
        --port-base|--slots|--nodes|--slurmd-timeout|--message-timeout|--timeout)
            [ $# -ge 2 ] || die "$1 needs a value"; cluster_args+=("$1" "$2"); shift ;;
        -h|--help) usage; exit 0 ;;
        start|stop|env) [ -z "$action" ] || die "one action at a time"; action="$1" ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done
[ -n "$action" ] || { usage >&2; exit 2; }
[[ "$dir" == /* ]] || dir="$PWD/$dir"
dir="${dir%/}"
cdir="$dir/controller"
pidfile="$dir/run/controller.pid"
cluster() {
    "$here/weave-cluster.sh" --dir "$dir" --sandweave "$sandweave" --controller-user "$user" \
        "${cluster_args[@]}" "$@"
}
controller_pid() {
    local pid
    pid="$(cat "$pidfile" 2>/dev/null)" || return 1
    # By its command line, not its binary: a rebuilt binary's old process
    # shows "(deleted)" as its exe and must still be found.
    [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
        grep -qF -- " controller --controller-dir $cdir " && echo "$pid"
}

do_env() {
    [ -f "$cdir/fingerprint" ] || die "no controller in $cdir (start it first)"
    printf 'export SANDWEAVE_HOST=weave://127.0.0.1:%s\n' "$port"
    printf 'export SANDWEAVE_WEAVE_TOKEN_FILE=%s\n' "$cdir/token"
    printf 'export SANDWEAVE_WEAVE_FINGERPRINT=%s\n' "$(cat "$cdir/fingerprint")"
}

do_start() {
    [ "$(id -u)" = 0 ] || die "needs root (the cluster's slurmd starts steps as root; runsc)"
    [ -x "$sandweave" ] || die "no sandweave binary (give --sandweave)"
    cluster start >/dev/null
    if controller_pid >/dev/null; then say "the controller already runs (pid $(controller_pid))"; do_env; return; fi
    if ((new_cert)); then rm -f "$cdir/controller.crt" "$cdir/controller.key" "$cdir/token" "$cdir/fingerprint"; fi
    mkdir -p "$dir/run" "$dir/log"
    # The controller's directory is its user's (weave-cluster.sh start made
    # the user); what root wrote there before is handed over.
    install -d -m 0700 -o "$user" -g "$(id -gn "$user")" "$cdir"
    chown -R "$user:$(id -gn "$user")" "$cdir"
    # It runs as $user: a binary below a directory that user cannot enter (a
    # checkout in root's home) is copied into the cluster's directory, which
    # every user can search (munged needs that too).
    local binary="$sandweave"
    if ! setpriv --reuid="$user" --regid="$(id -g "$user")" --clear-groups test -x "$binary"; then
        install -D -m 0755 "$sandweave" "$dir/bin/sandweave"
        binary="$dir/bin/sandweave"
    fi
    # setsid: the controller outlives this script; its srun children carry
    # the cluster's SLURM_CONF, so weave-cluster.sh stop ends them too.
    # setpriv: as the unit file has it, its user with CAP_SETUID and
    # CAP_SETGID as its only capabilities (ambient, so they survive exec).
    setsid env -u SANDWEAVE_HOST setpriv --reuid="$user" --regid="$(id -g "$user")" --init-groups \
        --inh-caps=-all,+setuid,+setgid --ambient-caps=-all,+setuid,+setgid \
        --bounding-set=-all,+setuid,+setgid \
        "$binary" controller --controller-dir "$cdir" --listen "127.0.0.1:$port" \
        --cluster-env "$dir/cluster.env" </dev/null >>"$dir/log/controller.log" 2>&1 &
    echo $! >"$pidfile"
    # It listens once it has adopted the sandboxes of the jobs Slurm still
    # runs for it (a restart): about a minute per thousand on two CPUs.
    local i
    for i in $(seq 3000); do
        if ss -Hltnp "sport = :$port" 2>/dev/null | grep -qF "pid=$(cat "$pidfile"),"; then
            say "controller listening on 127.0.0.1:$port (pid $(cat "$pidfile"), log $dir/log/controller.log)"
            do_env
            return
        fi
        kill -0 "$(cat "$pidfile")" 2>/dev/null || die "the controller did not start: $(tail -n 3 "$dir/log/controller.log")"
        ((i != 100)) || say "waiting for the controller to adopt its sandboxes and listen"
        sleep 0.1
    done
    die "the controller is not listening after 300 s (see $dir/log/controller.log)"
}

do_stop() {
    local pid i
    if pid="$(controller_pid)"; then
        kill -TERM "$pid"
        for i in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    fi
    rm -f "$pidfile"
    cluster stop
}

case "$action" in
    start) do_start ;;
    stop) do_stop ;;
    env) do_env ;;
esac
