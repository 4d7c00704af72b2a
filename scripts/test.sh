#!/usr/bin/env bash
# Sets up, builds, and runs every test. Exits non-zero on any failure.
#   1. setup.sh --test-deps: packages, the patched runtime, and in ./build what
#      the integration tests run (target integration_programs: everything but
#      the unit tests' binary, which step 2 builds)
#   2. one clang tree, ./build-san (AddressSanitizer + UndefinedBehaviorSanitizer,
#      -O0, the fuzzed layers -O1 with libFuzzer's coverage, -Werror, unity
#      batches): the unit tests, then libFuzzer, in two lanes:
#      a. the audit message decoder for 60 s, seeded with a corpus recorded
#         from a real runsc session
#      b. the JSON-RPC request decoder and params validator for 60 s, seeded
#         with request lines from docs/protocol.md
#      c. template and option resolution (inline JSON/YAML, extends chains) for
#         45 s, seeded with tests/data/templates/corpus
#      d. the guest agent's frame decoder (what a hostile guest sends the host)
#         for 45 s, and sandweave e2b's request decoding for 30 s
#   3. go vet and the Go unit tests of the gVisor packages runtime/series
#      patches (runtime/build-runsc.sh --test, on the Go cache step 1 filled)
#   4. the integration tests against the real runsc (ctest in ./build, the
#      unit label excepted: step 2 runs it), SANDWEAVE_TEST_JOBS at a time
#      (default 2, one per core; what tests share on the host, the Slurm
#      clusters above all, is serialized by tests/CMakeLists.txt)
# Steps 2 and 3 run in the background while step 4 runs (their output is
# shown when they end), their compiles niced so the tests keep the CPU they
# need; each step's time is printed as `== STEP: ok in Ns`.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
jobs="${SANDWEAVE_TEST_JOBS:-2}"
t_start=$SECONDS
logs="$top/build/test-logs"

step_start() { echo "== $1" >&2; }
step_end() {  # NAME START RC
  if [ "$3" = 0 ]; then echo "== $1: ok in $((SECONDS - $2))s" >&2; else echo "== $1: FAILED (exit $3) in $((SECONDS - $2))s" >&2; fi
}

t=$SECONDS
step_start "setup: packages, patched runtime, build"
"$top/scripts/setup.sh" --test-deps --target integration_programs
step_end "setup: packages, patched runtime, build" "$t" 0
mkdir -p "$logs"

# fuzz TARGET SECONDS SEED_CORPUS [DICT]: libFuzzer writes new inputs into a
# scratch corpus in build-san, so the recorded seeds stay as they are.
fuzz() {
  local target="$1" seconds="$2" seeds="$3" dict=() t=$SECONDS rc=0
  [[ -n "${4:-}" ]] && dict=("-dict=$4")
  echo "== fuzzing $target ($seconds s)"
  mkdir -p "$top/build-san/corpus-$target"
  "$top/build-san/tests/fuzz/$target" -max_total_time="$seconds" -print_final_stats=1 \
    "${dict[@]}" "$top/build-san/corpus-$target" "$seeds" >"$logs/$target.log" 2>&1 || rc=$?
  tail -n 15 "$logs/$target.log"
  step_end "fuzzing $target" "$t" "$rc" 2>&1
  return "$rc"
}

# Step 2, in the background: the sanitizer tree, its unit tests, the fuzzers.
# One compile of the library serves both: clang's ASan+UBSan with line
# tables, at -O0 (half the compile time of -O1) except the layers the fuzzers
# reach, which get -O1 and libFuzzer's coverage (tests/fuzz/CMakeLists.txt).
sanitizers() {
  local t=$SECONDS
  echo "== the sanitizer tree (build-san: clang, ASan+UBSan, libFuzzer)"
  # Unity batches of 8 files: 379 s of CPU instead of 616 cold. Only here:
  # ./build, the binary the integration tests drive, compiles file by file.
  CC=clang CXX=clang++ nice cmake -S "$top" -B "$top/build-san" -DCMAKE_BUILD_TYPE=Debug \
    "-DCMAKE_C_FLAGS_DEBUG=-g1 -O0" "-DCMAKE_CXX_FLAGS_DEBUG=-g1 -O0" \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 \
    -DSANDWEAVE_WERROR=ON -DSANDWEAVE_SANITIZE=ON -DSANDWEAVE_FUZZ=ON
  nice cmake --build "$top/build-san" -j"$(nproc)" --target sandweave_unit_tests \
    fuzz_audit_decoder fuzz_rpc_request fuzz_template fuzz_agent_frames fuzz_e2b_request
  step_end "the sanitizer tree" "$t" 0 2>&1
  t=$SECONDS
  (cd "$top/build-san" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L unit)
  step_end "the unit tests under ASan+UBSan" "$t" 0 2>&1
  # Two lanes of 120 s each, one per core (the cores are free once ctest
  # has ended); each fuzzer runs for its own time. Each one's output is shown whole.
  local rc=0 a b
  (rc=0
    fuzz fuzz_audit_decoder 60 "$top/tests/data/audit/corpus" >"$logs/fuzz-1.out" 2>&1 || rc=1
    fuzz fuzz_rpc_request 60 "$top/tests/data/rpc/corpus" "$top/tests/data/rpc/rpc.dict" >"$logs/fuzz-2.out" 2>&1 || rc=1
    exit "$rc") & a=$!
  (rc=0
    fuzz fuzz_template 45 "$top/tests/data/templates/corpus" "$top/tests/data/templates/template.dict" >"$logs/fuzz-3.out" 2>&1 || rc=1
    fuzz fuzz_agent_frames 45 "$top/tests/data/agent/corpus" >"$logs/fuzz-4.out" 2>&1 || rc=1
    fuzz fuzz_e2b_request 30 "$top/tests/data/e2b/corpus" >"$logs/fuzz-5.out" 2>&1 || rc=1
    exit "$rc") & b=$!
  wait "$a" || rc=1
  wait "$b" || rc=1
  cat "$logs"/fuzz-[1-5].out
  return "$rc"
}

# Step 3, in the background.
go_tests() {
  local t=$SECONDS
  echo "== the runtime patches' Go tests"
  nice "$top/runtime/build-runsc.sh" --test >/dev/null
  step_end "the runtime patches' Go tests" "$t" 0 2>&1
}

(set -e; sanitizers) >"$logs/sanitizers.log" 2>&1 &
san_pid=$!
(set -e; go_tests) >"$logs/go.log" 2>&1 &
go_pid=$!
trap 'kill "$san_pid" "$go_pid" 2>/dev/null || true' EXIT
echo "== in the background: the sanitizer unit tests and the fuzzers ($logs/sanitizers.log), the Go tests ($logs/go.log)" >&2

t=$SECONDS
step_start "the e2b JavaScript SDK for tests/integration/e2b.sh (npm ci, pinned by its lockfile)"
# Node >= 20.18.1 (the SDK's engines) is not in Debian 12: without it, e2b.sh skips.
if command -v npm >/dev/null; then (cd "$top/tests/e2b" && npm ci --no-audit --no-fund >&2); fi
step_end "npm ci" "$t" 0

t=$SECONDS
step_start "integration tests (ctest -j$jobs)"
ctest_rc=0
(cd "$top/build" && ctest --output-on-failure --timeout 900 -j"$jobs" -LE 'fuzz|unit') || ctest_rc=$?
step_end "integration tests" "$t" "$ctest_rc"

# The background steps: their whole output, then how they ended.
passed=0 failed=0
for lane in "sanitizers:$san_pid" "go:$go_pid"; do
  rc=0
  wait "${lane#*:}" || rc=$?
  cat "$logs/${lane%%:*}.log" >&2
  if [ "$rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "== ${lane%%:*}: FAILED (exit $rc)" >&2; fi
done
trap - EXIT
if [ "$ctest_rc" = 0 ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
echo "== all steps in $((SECONDS - t_start))s" >&2
echo "== the steps: the sanitizer unit tests and the fuzzers, the Go tests, ctest" >&2
echo "steps: $passed passed, $failed failed"
[ "$failed" = 0 ]
