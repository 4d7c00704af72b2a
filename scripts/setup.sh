#!/usr/bin/env bash
# Sets up a fresh Debian bookworm machine for sandweave and builds it:
#   1. installs the Debian packages sandweave needs (apt-get update first, only
#      when something is missing),
#   2. builds the patched runsc (cached in /var/cache/sandweave/runtime: a second
#      run takes a second) and installs it to /usr/local/lib/sandweave/runsc,
#   3. configures and builds sandweave in ./build (incremental), all targets or
#      only the --target ones, while step 2 runs (its log follows the build's),
#   4. for ./build: links /usr/local/bin/sandweave to it and installs the Python
#      SDK (python/) for /usr/bin/python3 and for the first python3 on PATH
#      (not with SANDWEAVE_SETUP_NO_INSTALL=1: a measurement in a scratch clone).
# Usage: scripts/setup.sh [--test-deps] [--build-dir DIR] [--target T]... [-- extra cmake args]
set -euo pipefail

top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$top/build"
test_deps=0
cmake_args=()
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --test-deps) test_deps=1 ;;
    --build-dir) build_dir="$2"; shift ;;
    --target) targets+=(--target "$2"); shift ;;
    --) shift; cmake_args=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done

say() { printf 'setup: %s\n' "$*" >&2; }

[ "$(id -u)" = 0 ] || { echo "setup.sh: must run as root (runsc, overlay mounts, apt-get)" >&2; exit 1; }

packages=(
  build-essential cmake pkg-config ccache
  libcli11-dev nlohmann-json3-dev libspdlog-dev libssh-dev libyaml-cpp-dev doctest-dev
  libprotobuf-dev protobuf-compiler libssl-dev
  nettle-dev  # SHA-256 (lib/core/sha256.hpp); libssl-dev stays for the unit tests
  libarchive-dev  # sandweave cp: tar streams
  musl-tools  # the guest init is built against musl: fewer pages and system calls before the first command
  runsc golang-go golang-gvisor-gvisor-dev
  busybox-static debootstrap procps util-linux python3 python3-pip python3-setuptools python3-wheel
  skopeo umoci  # image import
  libcpp-httplib-dev  # sandweave e2b: the HTTP server
  libnftables-dev iproute2  # sandbox networks: the egress policy's rules, the namespace and veth
  libldns-dev  # sandbox networks: the resolver of a policy with domain names parses DNS with it
  libnetfilter-log-dev  # sandbox networks: the audit records what the policy refused (NFLOG)
)
if [ "$test_deps" = 1 ]; then
  packages+=(clang clang-format libclang-rt-14-dev jq bc iproute2 nftables libc6-dev openssh-server openssh-client tmux python3-pytest)
  packages+=(zsh fish)  # the completion scripts are checked with each shell
  packages+=(dnsmasq-base)  # the network test's own nameserver, on loopback
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

# The runtime's Go build and sandweave's C++ build side by side: each has
# stretches (configure, links, Go's package graph) that leave a core idle.
say "patched runtime (in the background)"
runtime_log="$(mktemp "${TMPDIR:-/tmp}/sandweave-setup-runtime.XXXXXX")"
"$top/runtime/build-runsc.sh" >"$runtime_log" 2>&1 &
runtime_pid=$!
trap 'kill "$runtime_pid" 2>/dev/null; rm -f "$runtime_log"' EXIT

say "building sandweave in $build_dir${targets[*]:+ (${targets[*]})}"
cmake -S "$top" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANDWEAVE_WERROR=ON "${cmake_args[@]}" >&2
cmake --build "$build_dir" -j"$(nproc)" "${targets[@]}" >&2

runtime_rc=0
wait "$runtime_pid" || runtime_rc=$?
cat "$runtime_log" >&2
trap - EXIT
rm -f "$runtime_log"
[ "$runtime_rc" = 0 ] || { echo "setup.sh: building the patched runtime failed (exit $runtime_rc, output above)" >&2; exit 1; }
# The Python SDK and the binary it runs, for the default build only (not for
# the sanitizer build test.sh makes). One wheel, built offline by Debian's
# python3 (setuptools, wheel) from a copy of python/ (so the tree gets no
# build/ or egg-info), then installed by each interpreter's pip; without pip,
# a .pth names python/.
if [ "$build_dir" = "$top/build" ] && [ "${SANDWEAVE_SETUP_NO_INSTALL:-0}" = 1 ]; then
  say "SANDWEAVE_SETUP_NO_INSTALL=1: /usr/local/bin/sandweave and the Python SDK left as they are"
elif [ "$build_dir" = "$top/build" ]; then
  ln -sfn "$build_dir/sandweave" /usr/local/bin/sandweave
  sdk_tmp="$(mktemp -d)"
  cp -r "$top/python" "$sdk_tmp/src"
  pip_args=(--quiet --no-build-isolation --no-deps --no-index --disable-pip-version-check)
  /usr/bin/python3 -m pip wheel "${pip_args[@]}" --wheel-dir "$sdk_tmp" "$sdk_tmp/src" >&2
  sdk_done=" "
  for py in /usr/bin/python3 "$(command -v python3)"; do
    real="$("$py" -c 'import os, sys; print(os.path.realpath(sys.executable))')"
    case "$sdk_done" in *" $real "*) continue ;; esac
    sdk_done+="$real "
    if "$py" -m pip --version >/dev/null 2>&1; then
      say "Python SDK for $py (pip)"
      extra=(--root-user-action=ignore --force-reinstall)
      "$py" -c 'import os, sysconfig; exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))' \
        && extra+=(--break-system-packages)
      "$py" -m pip install "${pip_args[@]}" "${extra[@]}" "$sdk_tmp"/sandweave-*.whl >&2
    else
      site="$("$py" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')"
      say "Python SDK for $py ($site/sandweave.pth)"
      mkdir -p "$site" && echo "$top/python" >"$site/sandweave.pth"
    fi
    (cd / && "$py" -c 'import sandweave') >&2
  done
  rm -rf "$sdk_tmp"
fi
say "done: $build_dir/sandweave"
