#!/usr/bin/env bash
# Pools and snapshots, as medians and as ratios against figures measured in the
# same run:
#   pool acquire   `sandweave pool acquire` from a warm pool of 4 (the acquired
#                  sandbox is removed and the pool allowed to refill and settle
#                  between acquires, untimed): median and p99, vs a cold `sandweave
#                  create` and vs raw `runsc run --detach` of an equivalent bundle.
#                  Targets: acquire p50 < 2 ms, p99 < 10 ms.
#   fs snapshot    `snapshot create --kind fs` and `create --from-snapshot` vs the
#                  writable layer size (1, 10, 100 MiB written in the guest with
#                  dd bs=1M), with a raw `cp -a` of the same layer for reference.
#   memory         `snapshot create --kind memory` and its restore vs raw
#                  `runsc checkpoint` / `runsc restore` on an equivalent
#                  sandweave-created sandbox (both run a background sleep; the
#                  raw restore gets a socket as stdin, as sandweave's does).
# Usage: bench/pool_snapshot.sh [ACQUIRES] [REPS]
#   ACQUIRES  timed pool acquires (default 100)
#   REPS      repetitions of every other measurement (default 10)
#   POOL_ONLY=1 measures the pool figures alone (no snapshots).
# Needs root, jq and a built tree (SANDWEAVE, else $SANDWEAVE_BUILD_DIR/sandweave,
# else build/sandweave).
set -euo pipefail
acquires="${1:-100}"
reps="${2:-10}"
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sw="${SANDWEAVE:-${SANDWEAVE_BUILD_DIR:+$SANDWEAVE_BUILD_DIR/sandweave}}"
sw="${sw:-$top/build/sandweave}"
[[ -x "$sw" ]] || { echo "sandweave binary $sw not found (set SANDWEAVE)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is needed" >&2; exit 1; }
state="$(mktemp -d /tmp/sw-bench-ps.XXXXXX)"
scratch="$(mktemp -d /tmp/sw-bench-ps-scratch.XXXXXX)"
export SANDWEAVE_STATE_DIR="$state"
runsc="$("$sw" doctor --json | jq -r '.checks[] | select(.name == "runsc") | .detail' | cut -d: -f1)"
rawroot="$state/raw-runsc"
rawflags=(--root="$rawroot" --platform=ptrace --network=none)
swflags=(--root="$state/runsc" --platform=ptrace --network=none)

cleanup() {
  set +e
  "$sw" pool rm bench >/dev/null 2>&1
  "$sw" ls --ids 2>/dev/null | xargs -r "$sw" rm >/dev/null 2>&1
  for root in "$rawroot" "$state/runsc"; do
    "$runsc" --root="$root" list -q 2>/dev/null | xargs -r -n1 "$runsc" --root="$root" delete --force >/dev/null 2>&1
  done
  awk -v d="$state" 'index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r | xargs -r -n1 umount -l 2>/dev/null
  rm -rf "$state" "$scratch"
}
trap cleanup EXIT

# The time in ns into variable $1, from bash's own clock: no fork, so a sample
# is not the command plus a `$(date)` subshell (about 1 ms here).
stamp() { printf -v "$1" '%s000' "${EPOCHREALTIME//[!0-9]/}"; }
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"  # median, ratio
pct() { sort -n | awk -v p="$1" '{a[NR]=$1} END {i=int(NR*p/100); if (i<NR*p/100) i++; if (i<1) i=1; print a[i]}'; }
ms() { awk -v ns="$1" 'BEGIN {printf "%.1f", ns/1e6}'; }
med_of() { printf '%s\n' "$@" | median; }
# Times COMMAND... (stdout to $scratch/out, stderr to $scratch/err); prints ns.
timed() {
  local t0 t1
  stamp t0
  "$@" >"$scratch/out" 2>"$scratch/err" </dev/null
  stamp t1
  echo $((t1 - t0))
}
# The same as timed, with one end of a socket pair as the command's stdin: a
# sandweave sandbox's init has its agent channel (a socket) as fd 0, and a
# restore fails unless that fd is a socket again.
timed_socket_stdin() {
  python3 - "$scratch" "$@" <<'PY'
import socket, subprocess, sys, time
scratch, argv = sys.argv[1], sys.argv[2:]
ours, guest = socket.socketpair()
with open(scratch + "/out", "wb") as out, open(scratch + "/err", "wb") as err:
    t = time.perf_counter_ns()
    subprocess.run(argv, stdin=guest, stdout=out, stderr=err)
    print(time.perf_counter_ns() - t)
PY
}
warm_of() { "$sw" pool ls --json 2>/dev/null | jq -r '.[] | select(.name == "bench") | .warm'; }
wait_warm() {  # N: up to 30 s
  local deadline=$((SECONDS + 30))
  until [[ "$(warm_of)" == "$1" ]]; do
    ((SECONDS < deadline)) || { echo "pool did not refill to $1" >&2; return 1; }
    sleep 0.05
  done
}

echo "sandweave: $sw" >&2
echo "runsc: $runsc ($("$runsc" --version 2>/dev/null | head -n 1))" >&2
"$sw" image build base >/dev/null 2>&1
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cpus (other load skews every figure)" >&2
echo "warming up..." >&2
id=$("$sw" create 2>/dev/null); "$sw" run "$id" -- true; "$sw" rm "$id" >/dev/null

# --- pool acquire vs cold create vs raw runsc --------------------------------------------
# Raw: the base image read-only, guest init as PID 1 (as in a sandweave sandbox), detached.
bundle="$state/raw-bundle"
mkdir -p "$bundle"
(cd "$bundle" && "$runsc" spec -- /bin/sleep 1000)
jq --arg r "$state/images/base/rootfs" '.root = {path: $r, readonly: true} | .process.terminal = false' \
  "$bundle/config.json" >"$bundle/c.json" && mv "$bundle/c.json" "$bundle/config.json"

echo "cold create x $reps, raw runsc run --detach x $reps..." >&2
cold=(); raw=()
for i in $(seq "$reps"); do
  cold+=("$(timed "$sw" create)")
  "$sw" rm "$(cat "$scratch/out")" >/dev/null 2>&1
  raw+=("$(timed "$runsc" "${rawflags[@]}" run --detach --bundle "$bundle" "raw$i")")
  "$runsc" "${rawflags[@]}" delete --force "raw$i" >/dev/null 2>&1 || true
done

echo "pool acquire x $acquires (pool of 4, refilled between acquires)..." >&2
"$sw" pool create bench --size 4 >/dev/null 2>&1
acq=()
for i in $(seq "$acquires"); do
  wait_warm 4
  sleep 0.2  # let the last refilled member finish booting: time acquire, not a concurrent boot
  acq+=("$(timed "$sw" pool acquire bench)")
  got="$(cat "$scratch/out")"
  [[ "$got" =~ ^sw- ]] || { echo "acquire failed: $(cat "$scratch/err")" >&2; exit 1; }
  "$sw" rm "$got" >/dev/null 2>&1
done
"$sw" pool rm bench >/dev/null 2>&1

acq_med=$(med_of "${acq[@]}"); acq_p99=$(printf '%s\n' "${acq[@]}" | pct 99)
cold_med=$(med_of "${cold[@]}"); raw_med=$(med_of "${raw[@]}")
speedup=$(ratio "$cold_med" "$acq_med")

fs_rows=()
rck_t=(); rrs_t=(); msnap_t=(); mrest_t=()
if [[ -z "${POOL_ONLY:-}" ]]; then
# --- fs snapshot vs layer size ------------------------------------------------------------
for mib in 1 10 100; do
  echo "fs snapshot, ${mib} MiB layer x $reps..." >&2
  src=$("$sw" create 2>/dev/null)
  "$sw" run "$src" -c "dd if=/dev/zero of=/root/data bs=1M count=$mib 2>/dev/null"
  snap_t=(); rest_t=(); cp_t=()
  for i in $(seq "$reps"); do
    snap_t+=("$(timed "$sw" snapshot create "$src" --kind fs)")
    s="$(cat "$scratch/out")"
    [[ "$s" =~ ^snap- ]] || { echo "fs snapshot failed: $(cat "$scratch/err")" >&2; exit 1; }
    rest_t+=("$(timed "$sw" create --from-snapshot "$s")")
    r="$(cat "$scratch/out")"
    [[ "$r" =~ ^sw- ]] || { echo "fs restore failed: $(cat "$scratch/err")" >&2; exit 1; }
    "$sw" rm "$r" >/dev/null 2>&1
    "$sw" snapshot rm "$s" >/dev/null 2>&1
    rm -rf "$scratch/cp"; mkdir -p "$scratch/cp"
    cp_t+=("$(timed cp -a --reflink=auto -- "$state/sandboxes/$src/upper/." "$scratch/cp")")
    rm -rf "$scratch/cp"
  done
  fs_rows+=("$mib $(med_of "${snap_t[@]}") $(med_of "${rest_t[@]}") $(med_of "${cp_t[@]}")")
  "$sw" rm "$src" >/dev/null 2>&1
done

# --- memory snapshot vs raw checkpoint / restore -------------------------------------------
echo "memory snapshot x $reps, raw runsc checkpoint/restore x $reps..." >&2
mk_sleeper() {
  local id
  id=$("$sw" create 2>/dev/null)
  "$sw" run "$id" -c 'sleep 1000 </dev/null >/dev/null 2>&1 &'
  echo "$id"
}
msrc=$(mk_sleeper)
msnap_t=(); mrest_t=()
for i in $(seq "$reps"); do
  msnap_t+=("$(timed "$sw" snapshot create "$msrc" --kind memory)")
  s="$(cat "$scratch/out")"
  [[ "$s" =~ ^snap- ]] || { echo "memory snapshot failed: $(cat "$scratch/err")" >&2; exit 1; }
  mrest_t+=("$(timed "$sw" create --from-snapshot "$s")")
  r="$(cat "$scratch/out")"
  [[ "$r" =~ ^sw- ]] || { echo "memory restore failed: $(cat "$scratch/err")" >&2; exit 1; }
  "$sw" run "$r" -- true || { echo "restored sandbox does not run commands" >&2; exit 1; }
  "$sw" rm "$r" >/dev/null 2>&1
  "$sw" snapshot rm "$s" >/dev/null 2>&1
done
"$sw" rm "$msrc" >/dev/null 2>&1

# Raw: the same kind of sandbox, checkpointed and restored in place by runsc itself.
rsrc=$(mk_sleeper)
rck_t=(); rrs_t=()
for i in $(seq "$reps"); do
  img="$scratch/img$i"
  mkdir -p "$img"
  rck_t+=("$(timed "$runsc" "${swflags[@]}" checkpoint --image-path "$img" "$rsrc")")
  [[ -s "$img/checkpoint.img" ]] || { echo "raw checkpoint failed: $(cat "$scratch/err")" >&2; exit 1; }
  "$runsc" "${swflags[@]}" delete "$rsrc" >/dev/null 2>&1 || true
  rrs_t+=("$(timed_socket_stdin "$runsc" "${swflags[@]}" restore --detach --image-path "$img" \
    --bundle "$state/sandboxes/$rsrc/bundle" "$rsrc")")
  st="$("$runsc" "${swflags[@]}" state "$rsrc" 2>/dev/null | jq -r .status)" || true
  [[ "$st" == running ]] || { echo "raw restore failed: $(grep -m1 . "$scratch/err")" >&2; exit 1; }
  rm -rf "$img"
done
"$sw" rm "$rsrc" >/dev/null 2>&1

fi  # POOL_ONLY

# --- report ---------------------------------------------------------------------------------
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
rck=$(med_of "${rck_t[@]}"); rrs=$(med_of "${rrs_t[@]}")
rboth=$(awk -v a="$rck" -v b="$rrs" 'BEGIN {printf "%.0f", a + b}')
msn=$(med_of "${msnap_t[@]}"); mrs=$(med_of "${mrest_t[@]}")
echo
printf '%-44s %10s\n' "pool (median of $acquires acquires, $reps creates)" "ms"
printf '%-44s %10s\n' "pool acquire median" "$(ms "$acq_med")"
printf '%-44s %10s\n' "pool acquire p99" "$(ms "$acq_p99")"
printf '%-44s %10s\n' "cold sandweave create median" "$(ms "$cold_med")"
printf '%-44s %10s\n' "raw runsc run --detach median" "$(ms "$raw_med")"
printf '%-44s %10s\n' "create / acquire (x faster)" "$speedup"
printf '%-44s %10s\n' "acquire / raw runsc run" "$(ratio "$acq_med" "$raw_med")"
printf '%-44s %10s\n' "create / raw runsc run" "$(ratio "$cold_med" "$raw_med")"
printf 'target acquire p50 < 2 ms: %s; p99 < 10 ms: %s\n' \
  "$(awk -v a="$acq_med" 'BEGIN {print (a < 2e6) ? "met" : "MISSED"}')" \
  "$(awk -v a="$acq_p99" 'BEGIN {print (a < 10e6) ? "met" : "MISSED"}')"
[[ -n "${POOL_ONLY:-}" ]] && exit 0
echo
printf '%-10s %12s %12s %12s %10s\n' "fs layer" "snapshot ms" "restore ms" "raw cp ms" "snap/cp"
for row in "${fs_rows[@]}"; do
  read -r mib sn rs cp <<<"$row"
  printf '%-10s %12s %12s %12s %10s\n' "$mib MiB" "$(ms "$sn")" "$(ms "$rs")" "$(ms "$cp")" "$(ratio "$sn" "$cp")"
done
echo
printf '%-44s %10s %10s %7s\n' "memory (median of $reps)" "runsc ms" "sandweave" "ratio"
printf '%-44s %10s %10s %7s\n' "snapshot create vs checkpoint" "$(ms "$rck")" "$(ms "$msn")" "$(ratio "$msn" "$rck")"
printf '%-44s %10s %10s %7s\n' "snapshot create vs checkpoint+restore" "$(ms "$rboth")" "$(ms "$msn")" \
  "$(ratio "$msn" "$rboth")"
printf '%-44s %10s %10s %7s\n' "restore (create --from-snapshot)" "$(ms "$rrs")" "$(ms "$mrs")" "$(ratio "$mrs" "$rrs")"
