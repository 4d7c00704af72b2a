#!/usr/bin/env bash
# Build sandweave's patched gVisor runsc (procfs hidepid=, runtime audit fixes)
# from Debian packages.
#
# Usage: build-runsc.sh [--test] [--force] | --list
#   --test   also run `go vet` and the Go unit tests of the patched packages
#   --force  rebuild even if a cached binary exists for the current cache key
#   --list   print the series' patch files in order and exit
#
# Environment:
#   SANDWEAVE_RUNTIME_CACHE  build cache (default /var/cache/sandweave/runtime)
#   SANDWEAVE_RUNTIME_DIR    install directory (default /usr/local/lib/sandweave)
#
# Progress goes to stderr; the last line on stdout is the installed path.
# The patches and their order are runtime/series. Beside the binary,
# runsc.build.json records the patches built into it.
set -euo pipefail

readonly SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly SCRIPT="$SCRIPT_DIR/$(basename "${BASH_SOURCE[0]}")"
# The patches, in the order they apply: one name a line, `#` comments
# (as debian/patches/series). The list and every patch are in the cache key.
readonly SERIES="$SCRIPT_DIR/series"
readonly CACHE_ROOT="${SANDWEAVE_RUNTIME_CACHE:-/var/cache/sandweave/runtime}"
readonly INSTALL_DIR="${SANDWEAVE_RUNTIME_DIR:-/usr/local/lib/sandweave}"
readonly GVISOR_SRC=/usr/share/gocode/src/gvisor.dev/gvisor
readonly DEBIAN_RUNSC=/usr/bin/runsc
# Go packages touched by the patches: vet runs on all of them, the unit tests
# on those whose tests run without gVisor's own test helpers (Debian does not
# package pkg/sentry/kernel's and the others' test helpers).
readonly TESTED_PKGS=(
  gvisor.dev/gvisor/pkg/sentry/fsimpl/proc
  gvisor.dev/gvisor/pkg/sentry/seccheck/sinks/remote
  gvisor.dev/gvisor/pkg/sentry/seccheck
  gvisor.dev/gvisor/pkg/cpuid
  gvisor.dev/gvisor/pkg/sentry/platform/ptrace
)
readonly PATCHED_PKGS=(
  "${TESTED_PKGS[@]}"
  gvisor.dev/gvisor/pkg/sentry/kernel
  gvisor.dev/gvisor/runsc/boot
  gvisor.dev/gvisor/pkg/sentry/fsimpl/devpts
  gvisor.dev/gvisor/pkg/sentry/pgalloc
  gvisor.dev/gvisor/pkg/sentry/fsimpl/cgroupfs
  gvisor.dev/gvisor/pkg/sentry/vfs
  gvisor.dev/gvisor/pkg/sentry/syscalls/linux
  gvisor.dev/gvisor/pkg/sentry/kernel/auth
  gvisor.dev/gvisor/runsc/cmd
  gvisor.dev/gvisor/runsc/sandbox
)

log() { printf 'build-runsc: %s\n' "$*" >&2; }
die() { printf 'build-runsc: error: %s\n' "$*" >&2; exit 1; }

run_tests=0
force=0
list=0
for arg in "$@"; do
  case "$arg" in
    --test) run_tests=1 ;;
    --force) force=1 ;;
    --list) list=1 ;;
    -h|--help) sed -n '2,16p' "$SCRIPT" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument: $arg (see --help)" ;;
  esac
done

# PATCHES: the series' patches, as paths, in order.
PATCHES=()
[[ -r "$SERIES" ]] || die "series file not found: $SERIES"
while IFS= read -r line || [[ -n "$line" ]]; do
  line="${line%%#*}"
  line="${line//[[:space:]]/}"
  [[ -n "$line" ]] || continue
  [[ "$line" =~ ^[a-z0-9][a-z0-9._-]*\.patch$ ]] || die "$SERIES: not a patch name: $line"
  [[ -r "$SCRIPT_DIR/$line" ]] || die "$SERIES: patch not found: $SCRIPT_DIR/$line"
  PATCHES+=("$SCRIPT_DIR/$line")
done <"$SERIES"
((${#PATCHES[@]})) || die "$SERIES lists no patches"
readonly PATCHES
if [[ "$list" == 1 ]]; then
  for p in "${PATCHES[@]}"; do basename "$p"; done
  exit 0
fi

tmp=""
cleanup() { if [[ -n "$tmp" ]]; then rm -rf "$tmp"; fi; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- Debian packages ---------------------------------------------------------
# golang-gvisor-gvisor-dev: gVisor source (+ its Go dependencies);
# golang-go: toolchain; runsc: donor of the real vdso.so; python3: ELF parsing;
# patch: applies the patches.
pkg_installed() {
  [[ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null || true)" == installed ]]
}
missing=()
for p in golang-go golang-gvisor-gvisor-dev runsc python3 patch; do
  pkg_installed "$p" || missing+=("$p")
done
if ((${#missing[@]})); then
  [[ "$(id -u)" == 0 ]] || die "missing Debian packages (${missing[*]}); run as root or install them"
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update >&2 || die "apt-get update failed"
  apt-get install -y --no-install-recommends "${missing[@]}" >&2 || die "apt-get install ${missing[*]} failed"
fi
command -v go >/dev/null || die "go not found in PATH (golang-go installed?)"
[[ -d "$GVISOR_SRC/runsc" ]] || die "gVisor source not found at $GVISOR_SRC"
[[ -x "$DEBIAN_RUNSC" ]] || die "$DEBIAN_RUNSC not found (needed for its vdso)"

pkgver() { dpkg-query -W -f='${Version}' "$1"; }
gvisor_ver="$(pkgver golang-gvisor-gvisor-dev)"
go_ver="$(pkgver golang-go)"
runsc_ver="$(pkgver runsc)"
version="${gvisor_ver}+sandweave"

# --- Cache key -----------------------------------------------------------------
key="$(
  {
    for p in "${PATCHES[@]}"; do
      printf '%s ' "$(basename "$p")"
      sha256sum <"$p"
    done
    sha256sum <"$SERIES"
    sha256sum <"$SCRIPT"
    printf 'golang-gvisor-gvisor-dev=%s\ngolang-go=%s\nrunsc=%s\n' "$gvisor_ver" "$go_ver" "$runsc_ver"
  } | sha256sum | cut -d' ' -f1
)"
out_dir="$CACHE_ROOT/$key"
out="$out_dir/runsc"

mkdir -p "$CACHE_ROOT" || die "cannot create cache directory $CACHE_ROOT"
export GOCACHE="${GOCACHE:-$CACHE_ROOT/go-build}"

# --- Patched source overlay ----------------------------------------------------
# A full copy of Debian's gVisor tree (~17 MB) with the patches applied; it is
# the first GOPATH entry, so every gvisor.dev/gvisor package resolves to it and
# all other dependencies resolve to /usr/share/gocode.
prepare_overlay() {
  tmp="$(mktemp -d "${TMPDIR:-/tmp}/sandweave-runsc.XXXXXX")"
  local src="$tmp/gopath/src/gvisor.dev/gvisor"
  mkdir -p "$(dirname "$src")"
  cp -a "$GVISOR_SRC" "$src"
  local p
  for p in "${PATCHES[@]}"; do
    log "applying $(basename "$p")"
    patch -d "$src" -p1 --batch --forward --quiet <"$p" >&2 ||
      die "$(basename "$p") does not apply to $GVISOR_SRC ($gvisor_ver)"
  done
  log "extracting vdso from $DEBIAN_RUNSC"
  python3 - "$DEBIAN_RUNSC" "$src/pkg/sentry/loader/vdsodata/vdso.so" <<'PY' || die "vdso extraction failed"
import struct, sys

def soname(img):
    """Returns DT_SONAME of an ELF64 little-endian image, or None."""
    phoff, = struct.unpack_from('<Q', img, 0x20)
    phentsize, phnum = struct.unpack_from('<HH', img, 0x36)
    loads, dyn = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from('<IIQQQQ', img, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dyn = (p_offset, p_filesz)
    if dyn is None:
        return None
    strtab = name = None
    for off in range(dyn[0], dyn[0] + dyn[1], 16):
        tag, val = struct.unpack_from('<qQ', img, off)
        if tag == 0:
            break
        if tag == 5:
            strtab = val
        elif tag == 14:
            name = val
    if strtab is None or name is None:
        return None
    for vaddr, offset, filesz in loads:
        if vaddr <= strtab < vaddr + filesz:
            start = strtab - vaddr + offset + name
            return img[start:img.index(b'\0', start)]
    return None

data = open(sys.argv[1], 'rb').read()
found = []
pos = data.find(b'\x7fELF', 1)
while pos >= 0:
    hdr = data[pos:pos + 64]
    # ELFCLASS64, little-endian, ET_DYN, EM_X86_64 or EM_AARCH64.
    if len(hdr) == 64 and hdr[4] == 2 and hdr[5] == 1:
        e_type, e_machine = struct.unpack_from('<HH', hdr, 16)
        shoff, = struct.unpack_from('<Q', hdr, 0x28)
        shentsize, shnum = struct.unpack_from('<HH', hdr, 0x3a)
        size = shoff + shnum * shentsize
        if e_type == 3 and e_machine in (62, 183) and 64 < size <= 1 << 20 and pos + size <= len(data):
            img = data[pos:pos + size]
            try:
                if soname(img) == b'linux-vdso.so.1':
                    found.append(img)
            except (struct.error, ValueError):
                pass
    pos = data.find(b'\x7fELF', pos + 1)
if len(found) != 1:
    sys.exit('expected exactly one embedded linux-vdso.so.1, found %d' % len(found))
open(sys.argv[2], 'wb').write(found[0])
print('build-runsc: vdso: %d bytes' % len(found[0]), file=sys.stderr)
PY
}

gobuild_env() {
  env GOPATH="$tmp/gopath:/usr/share/gocode" GO111MODULE=off CGO_ENABLED=0 GOFLAGS= "$@"
}

run_go_tests() {
  local start=$SECONDS
  # -trimpath: the overlay's directory is new every run, and without it that
  # path is in every package's cache key, so each run recompiled the tree.
  log "go vet ${PATCHED_PKGS[*]}"
  # -composites=false: upstream code has unkeyed composite literals;
  # -asmdecl=false: upstream pkg/cpuid's assembly names its arguments
  # differently from its Go declaration.
  (cd "$tmp" && gobuild_env go vet -trimpath -composites=false -asmdecl=false "${PATCHED_PKGS[@]}") >&2 ||
    die "go vet failed"
  log "go test ${TESTED_PKGS[*]}"
  (cd "$tmp" && gobuild_env go test -trimpath -count=1 -v "${TESTED_PKGS[@]}") >&2 || die "go unit tests failed"
  log "go vet and tests in $((SECONDS - start))s"
}

if [[ -x "$out" && "$force" == 0 ]]; then
  log "cached: $out (key ${key:0:12})"
  if [[ "$run_tests" == 1 ]]; then
    prepare_overlay
    run_go_tests
  fi
else
  prepare_overlay
  if [[ "$run_tests" == 1 ]]; then run_go_tests; fi
  log "building runsc $version (GOCACHE=$GOCACHE)"
  start=$SECONDS
  mkdir -p "$out_dir"
  (cd "$tmp" && gobuild_env go build -trimpath -buildvcs=false \
    -ldflags "-X main.version=$version" -o "$tmp/runsc" gvisor.dev/gvisor/runsc) >&2 || die "go build failed"
  # Not `runsc --version | grep -q`: with pipefail, grep exiting at the first
  # line can fail the pipeline with SIGPIPE in runsc.
  built_version="$("$tmp/runsc" --version 2>&1)" || die "built runsc --version failed: $built_version"
  grep -qF "runsc version $version" <<<"$built_version" ||
    die "built runsc does not report version $version: $built_version"
  # Publish atomically so a concurrent or interrupted build never leaves a
  # partial binary behind the cache key.
  install -m 0755 "$tmp/runsc" "$out_dir/.runsc.$$"
  printf 'version=%s\ngolang-gvisor-gvisor-dev=%s\ngolang-go=%s\nrunsc=%s\ngo=%s\n' \
    "$version" "$gvisor_ver" "$go_ver" "$runsc_ver" "$(go version)" >"$out_dir/build-info"
  mv -f "$out_dir/.runsc.$$" "$out"
  log "built in $((SECONDS - start))s: $out"
fi

# --- Install ----------------------------------------------------------------
target="$INSTALL_DIR/runsc"
mkdir -p "$INSTALL_DIR" || die "cannot create $INSTALL_DIR"
if [[ -f "$target" ]] && cmp -s "$out" "$target"; then
  log "already installed: $target"
else
  staged="$INSTALL_DIR/.runsc.$$"
  install -m 0755 "$out" "$staged"
  mv -f "$staged" "$target"
  log "installed $target"
fi

# What the installed binary is, for `sandweave version` and `doctor`: the
# patches in it (in order, with their sha256), its own sha256 (so a reader can
# tell the file describes this very binary), and the Debian sources it came
# from. Written atomically beside it, after the binary.
manifest="$target.build.json"
{
  printf '{\n  "version": "%s",\n  "sha256": "%s",\n  "patches": [' "$version" "$(sha256sum <"$target" | cut -d' ' -f1)"
  sep=""
  for p in "${PATCHES[@]}"; do
    printf '%s\n    {"name": "%s", "sha256": "%s"}' "$sep" "$(basename "$p" .patch)" "$(sha256sum <"$p" | cut -d' ' -f1)"
    sep=","
  done
  printf '\n  ],\n  "golang-gvisor-gvisor-dev": "%s",\n  "golang-go": "%s"\n}\n' "$gvisor_ver" "$go_ver"
} >"$manifest.$$"
mv -f "$manifest.$$" "$manifest"
echo "$target"
