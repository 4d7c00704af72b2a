#!/usr/bin/env bash
# Slurm 24.11 for the one-machine cluster: Debian trixie's slurmctld, slurmd
# and Slurm's clients (with the host's munged), run from a debootstrapped trixie root on this
# (bookworm) host, so the controller and the Weave tests can be run against
# Slurm 24.11 as they are against bookworm's 22.05.
#
# Usage: scripts/weave-cluster-trixie.sh [OPTIONS] setup|bin|teardown
#   setup     debootstrap the root (once: debootstrap --variant=minbase
#             trixie, with slurmctld slurmd slurm-client munge), mount what
#             its daemons need, and write a wrapper for each Slurm program;
#             prints the PATH to use
#   bin       print the wrappers' directory
#   teardown  unmount what setup mounted (the root stays for the next setup)
# Options:
#   --root DIR       the trixie root [/var/lib/sw-trixie/root]
#   --share DIR      a host directory the daemons see at the same path (the
#                    clusters' directories live there: their configuration,
#                    epilog, munge socket, state); repeatable [/tmp]
#   --sandweave B    the sandweave binary the workers run [sandweave on PATH]
#
# How: each wrapper (DIR/../bin/squeue, salloc, srun, slurmd, munged, ...)
# runs trixie's program chrooted into the root, so with the wrappers first on
# PATH, scripts/weave-cluster.sh starts trixie's daemons and the controller
# runs trixie's clients (22.05's cannot talk to 24.11). What the daemons run
# of sandweave (the epilog, `serve --stdio` in a job step) must run on the
# host, with bookworm's libraries: inside the root, sandweave's path is a
# small script bound over it that enters the root of a host process setup
# leaves running (nsenter --root: a chroot into a bind of the host's root
# would still count as chrooted, and runsc could make no user namespace). 24.11's slurmd needs /sys/fs/cgroup bound
# recursively and cgroup.conf `CgroupPlugin=cgroup/v1` on this host (which
# mounts cgroup v1), the host's /etc/hosts, and /proc, /sys, /dev. setup
# leaves a loop running that keeps the root's /etc/passwd and /etc/group
# the host's, so slurmctld runs as the host's slurm user, munged as its
# munge, and jobs as the host's users, by the same uids. A wrapper called
# by a user other than root (the unprivileged controller) enters the root
# in a user namespace of its own uid instead of chrooting.
#
# Example:
#   sudo scripts/weave-cluster-trixie.sh --share /var/lib/sw-cluster --sandweave build/sandweave setup
#   sudo env PATH="$(scripts/weave-cluster-trixie.sh bin):$PATH" TMPDIR=/var/lib/sw-cluster \
#       ctest --test-dir build -R weave --output-on-failure
set -euo pipefail

prog="weave-cluster-trixie.sh"
root=/var/lib/sw-trixie/root
shares=()
sandweave="$(command -v sandweave || true)"
action=""
die() { printf '%s: %s\n' "$prog" "$*" >&2; exit 1; }
say() { printf '%s: %s\n' "$prog" "$*" >&2; }
usage() { sed -n '2,41p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        --root) [ $# -ge 2 ] || die "--root needs a value"; root="$2"; shift ;;
        --share) [ $# -ge 2 ] || die "--share needs a value"; shares+=("$2"); shift ;;
        --sandweave) [ $# -ge 2 ] || die "--sandweave needs a value"; sandweave="$2"; shift ;;
        -h|--help) usage; exit 0 ;;
        setup|bin|teardown) [ -z "$action" ] || die "one action at a time"; action="$1" ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
    shift
done
[ -n "$action" ] || { usage >&2; exit 2; }
[ ${#shares[@]} -gt 0 ] || shares=(/tmp)
[[ "$root" == /* ]] || root="$PWD/$root"
root="${root%/}"
bin="$(dirname "$root")/bin"
# Not munged: the host's serves trixie's Slurm as well (munge's protocol is
# the same across 0.5.x), and it runs as munge, which may not chroot.
programs=(squeue sinfo salloc srun sbatch scancel scontrol sacct slurmctld slurmd)

mounted() { findmnt -rn -M "$1" >/dev/null 2>&1; }
bind() {  # SRC DST [--rbind]
    mounted "$2" && return 0
    mount "${3:---bind}" "$1" "$2" || die "cannot bind $1 at $2"
}

do_setup() {
    [ "$(id -u)" = 0 ] || die "needs root (debootstrap, mounts)"
    [ -x "$sandweave" ] || die "no sandweave binary (give --sandweave)"
    sandweave="$(readlink -f "$sandweave")"
    if [ ! -x "$root/usr/sbin/slurmd" ]; then
        command -v debootstrap >/dev/null || die "debootstrap is missing (apt-get install debootstrap)"
        say "debootstrapping trixie into $root (a few minutes)"
        mkdir -p "$root"
        debootstrap --variant=minbase --include=slurmctld,slurmd,slurm-client,munge,util-linux \
            trixie "$root" http://deb.debian.org/debian >&2 || die "debootstrap failed"
    fi
    cp /etc/hosts "$root/etc/hosts"
    bind /proc "$root/proc" --rbind
    bind /sys "$root/sys" --rbind
    bind /dev "$root/dev" --rbind
    mounted "$root/sys/fs/cgroup" || bind /sys/fs/cgroup "$root/sys/fs/cgroup" --rbind
    local d
    for d in "${shares[@]}"; do
        [[ "$d" == /* ]] || d="$PWD/$d"
        mkdir -p "$d" "$root$d"
        bind "$d" "$root$d"
    done
    # A host process whose root the daemons' sandweave enters.
    mkdir -p "$bin"
    local anchor
    anchor="$(cat "$bin/anchor.pid" 2>/dev/null || true)"
    if [ -z "$anchor" ] || [ "$(cat "/proc/$anchor/comm" 2>/dev/null)" != sleep ]; then
        setsid sleep infinity </dev/null >/dev/null 2>&1 &
        anchor=$!
        echo "$anchor" >"$bin/anchor.pid"
    fi
    # The root's users are the host's (slurm, munge, the controller's, the
    # tests' alice and bob, made at any time), by the same uids: a loop
    # copies the host's passwd and group into the root within a second of
    # a change, whole files renamed into place.
    local syncer
    syncer="$(cat "$bin/sync.pid" 2>/dev/null || true)"
    if [ -z "$syncer" ] || ! grep -qF sw-trixie-sync "/proc/$syncer/cmdline" 2>/dev/null; then
        # shellcheck disable=SC2016
        setsid bash -c 'while :; do
            for f in passwd group; do
                cmp -s "/etc/$f" "$1/etc/$f" || { cp "/etc/$f" "$1/etc/$f.sync" && mv -f "$1/etc/$f.sync" "$1/etc/$f"; }
            done
            sleep 1
        done' sw-trixie-sync "$root" </dev/null >/dev/null 2>&1 &
        echo $! >"$bin/sync.pid"
    fi
    # Inside the root, sandweave's path runs the host's sandweave.
    mkdir -p "$(dirname "$root$sandweave")"
    # Root (the epilog, which runs sandboxes) enters the host's root; a
    # job's user (the relay step) may not, and runs the host's binary with
    # the host's loader and libraries, seen read-only at /host.
    mkdir -p "$root/host"
    mounted "$root/host" || { mount --bind / "$root/host" && mount -o remount,bind,ro "$root/host"; } ||
        die "cannot bind / at $root/host"
    # The loader by its real path: the host's /lib64 link is absolute and
    # would lead to trixie's.
    local loader
    loader="$(readlink -f /lib64/ld-linux-x86-64.so.2)"
    printf '#!/bin/sh\n# Written by %s: sandweave runs on the host, with its libraries.\nif [ "$(id -u)" = 0 ]; then exec nsenter --target %s --mount --root --wd -- %s "$@"; fi\nexec /host%s --library-path /host%s /host%s "$@"\n' \
        "$prog" "$anchor" "$sandweave" "$loader" "$(dirname "$loader")" "$sandweave" >"$bin/sandweave-on-host"
    chmod 0755 "$bin/sandweave-on-host"
    [ -e "$root$sandweave" ] || touch "$root$sandweave"
    bind "$bin/sandweave-on-host" "$root$sandweave"
    local p path
    for p in "${programs[@]}"; do
        path=/usr/bin/$p
        [ -x "$root$path" ] || path=/usr/sbin/$p
        [ -x "$root$path" ] || die "trixie's root has no $p"
        # chroot(1) keeps the environment (SLURM_CONF) but not the working
        # directory: Slurm's programs here take absolute paths only. A
        # caller other than root (the controller as its own user, a job's
        # user) may not chroot: it enters the root in a user namespace
        # that maps only its own uid, so it stays who it is to munge and
        # Slurm.
        printf '#!/bin/sh\nif [ "$(id -u)" = 0 ]; then exec chroot %s %s "$@"; fi\nexec unshare --user --map-current-user --root=%s %s "$@"\n' \
            "$root" "$path" "$root" "$path" >"$bin/$p"
        chmod 0755 "$bin/$p"
    done
    say "Slurm $(chroot "$root" dpkg-query -W -f='${Version}' slurmd) from $root; use: PATH=$bin:\$PATH"
    echo "$bin"
}

do_teardown() {
    local m
    for m in $(findmnt -rn -o TARGET | grep -F "$root/" | sort -r); do umount -l "$m" 2>/dev/null || true; done
    local anchor
    anchor="$(cat "$bin/anchor.pid" 2>/dev/null || true)"
    if [ -n "$anchor" ] && [ "$(cat "/proc/$anchor/comm" 2>/dev/null)" = sleep ]; then kill "$anchor"; fi
    rm -f "$bin/anchor.pid"
    local syncer
    syncer="$(cat "$bin/sync.pid" 2>/dev/null || true)"
    if [ -n "$syncer" ] && grep -qF sw-trixie-sync "/proc/$syncer/cmdline" 2>/dev/null; then kill "$syncer"; fi
    rm -f "$bin/sync.pid"
    say "unmounted everything under $root"
}

case "$action" in
    setup) do_setup ;;
    bin) echo "$bin" ;;
    teardown) do_teardown ;;
esac
