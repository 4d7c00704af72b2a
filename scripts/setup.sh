#!/usr/bin/env bash
# Sets up a fresh Debian bookworm machine for sandweave and builds it:
#   1. installs the Debian packages sandweave needs (apt-get update first, only
#      when something is missing),
#   2. builds the patched runsc (cached in /var/cache/sandweave/runtime: a second
#      run takes a second) and installs it to /usr/local/lib/sandweave/runsc,
#   3. configures and builds sandweave in ./build (incremental).
# Usage: scripts/setup.sh [--test-deps] [--build-dir DIR] [-- extra cmake args]
set -euo pipefail

top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="$top/build"
test_deps=0
cmake_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --test-deps) test_deps=1 ;;
    --build-dir) build_dir="$2"; shift ;;
    --) shift; cmake_args=("$@"); break ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
  runsc golang-go golang-gvisor-gvisor-dev
  busybox-static debootstrap procps util-linux python3
)
if [ "$test_deps" = 1 ]; then
  packages+=(clang clang-format libclang-rt-14-dev jq bc iproute2 libc6-dev openssh-server openssh-client tmux)
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

say "patched runtime"
"$top/runtime/build-runsc.sh" >&2

say "building sandweave in $build_dir"
cmake -S "$top" -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSANDWEAVE_WERROR=ON "${cmake_args[@]}" >&2
cmake --build "$build_dir" -j"$(nproc)" >&2
say "done: $build_dir/sandweave"
