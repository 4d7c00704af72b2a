# shellcheck shell=bash
# A throwaway OpenSSH server on a loopback port, for the ssh:// tests
# (tests/integration/ssh.sh) and bench/ssh.sh. Sourced, never run.
#
#   sshd_fixture_init DIR WORKER_STATE_DIR
#       Makes DIR/hostkey, DIR/userkey (in authorized_keys), DIR/otherkey (not),
#       DIR/known_hosts and DIR/sshd_config (a free port on 127.0.0.1, public
#       keys only, SetEnv SANDWEAVE_STATE_DIR=WORKER_STATE_DIR so the worker's
#       state is not the client's). Sets SSHD_DIR, SSHD_PORT, SSHD_CONFIG,
#       SSHD_HOSTKEY, SSHD_USERKEY, SSHD_OTHERKEY, SSHD_KNOWN_HOSTS.
#   sshd_write_config NAME PORT [SETENV...]
#       Another config (DIR/NAME) for the same keys on PORT; SETENV words
#       (VAR=VALUE) replace the default SetEnv. Prints its path.
#   sshd_start [CONFIG]       starts the daemon, returns once it accepts
#   sshd_pid [CONFIG]         the listener's pid ("" when not running)
#   sshd_sessions [CONFIG]    pids of its per-connection children (one per client)
#   sshd_stop [CONFIG]        the listener and its sessions (each by pid)
#   sshd_known_hosts_line PORT [PUBKEY]   "[127.0.0.1]:PORT TYPE KEY"
#   free_port                 a free TCP port on 127.0.0.1
#
# Only this daemon's own processes are signalled, found from its pid file.

SSHD_BIN="${SSHD_BIN:-/usr/sbin/sshd}"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

sshd_known_hosts_line() {  # PORT [PUBKEY]
    printf '[127.0.0.1]:%s %s\n' "$1" "$(cut -d' ' -f1,2 "${2:-$SSHD_HOSTKEY.pub}")"
}

sshd_write_config() {  # NAME PORT [SETENV...]
    local conf="$SSHD_DIR/$1" port="$2"
    shift 2
    local setenv="$*"
    [[ -n "$setenv" ]] || setenv="SANDWEAVE_STATE_DIR=$SSHD_WORKER_STATE"
    cat >"$conf" <<EOF
Port $port
ListenAddress 127.0.0.1
HostKey $SSHD_HOSTKEY
AuthorizedKeysFile $SSHD_DIR/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
UseDNS no
PidFile $conf.pid
SetEnv $setenv
EOF
    printf '%s\n' "$conf"
}

sshd_fixture_init() {  # DIR WORKER_STATE_DIR
    SSHD_DIR="$1"
    SSHD_WORKER_STATE="$2"
    mkdir -p "$SSHD_DIR"
    SSHD_HOSTKEY="$SSHD_DIR/hostkey"
    SSHD_USERKEY="$SSHD_DIR/userkey"
    SSHD_OTHERKEY="$SSHD_DIR/otherkey"
    local k
    for k in "$SSHD_HOSTKEY" "$SSHD_USERKEY" "$SSHD_OTHERKEY"; do
        ssh-keygen -q -t ed25519 -N '' -C "sandweave-test" -f "$k" </dev/null || return 1
    done
    cp "$SSHD_USERKEY.pub" "$SSHD_DIR/authorized_keys"
    SSHD_PORT="$(free_port)" || return 1
    SSHD_CONFIG="$(sshd_write_config sshd_config "$SSHD_PORT")"
    SSHD_KNOWN_HOSTS="$SSHD_DIR/known_hosts"
    sshd_known_hosts_line "$SSHD_PORT" >"$SSHD_KNOWN_HOSTS"
}

sshd_pid() {  # [CONFIG]
    local pidfile="${1:-$SSHD_CONFIG}.pid" pid
    [[ -s "$pidfile" ]] || return 0
    pid="$(cat "$pidfile")"
    # A stale pid file (the daemon was killed) names no sshd.
    if [[ -r "/proc/$pid/cmdline" ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "-f ${1:-$SSHD_CONFIG}"; then
        echo "$pid"
    fi
}

sshd_sessions() {  # [CONFIG]
    local pid
    pid="$(sshd_pid "$@")"
    [[ -n "$pid" ]] && pgrep -P "$pid"
    return 0
}

_sshd_port_of() { awk '$1 == "Port" { print $2 }' "$1"; }

sshd_start() {  # [CONFIG]
    local conf="${1:-$SSHD_CONFIG}" port i
    port="$(_sshd_port_of "$conf")"
    mkdir -p /run/sshd
    rm -f "$conf.pid"
    "$SSHD_BIN" -f "$conf" -E "$conf.log" </dev/null || return 1
    for ((i = 0; i < 100; i++)); do
        if [[ -n "$(sshd_pid "$conf")" ]] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        sleep 0.05
    done
    echo "sshd ($conf) did not start; its log:" >&2
    tail -n 20 "$conf.log" >&2
    return 1
}

sshd_stop() {  # [CONFIG]
    local conf="${1:-$SSHD_CONFIG}" pid sessions
    pid="$(sshd_pid "$conf")"
    [[ -n "$pid" ]] || return 0
    sessions="$(pgrep -P "$pid")"
    kill "$pid" $sessions 2>/dev/null
    local i
    for ((i = 0; i < 50; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    kill -9 "$pid" $sessions 2>/dev/null
    rm -f "$conf.pid"
    return 0
}
