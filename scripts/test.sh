#!/usr/bin/env bash
# Sets up, builds, and runs every test. Exits non-zero on any failure.
#   1. unit tests under AddressSanitizer + UndefinedBehaviorSanitizer
#   2. the audit message decoder under libFuzzer for 60 s (clang), seeded with a
#      corpus recorded from a real runsc session
#   3. the JSON-RPC request decoder and params validator under libFuzzer for 60 s,
#      seeded with request lines from docs/protocol.md
#   4. template and option resolution (inline JSON/YAML, extends chains) under
#      libFuzzer for 45 s, seeded with tests/data/templates/corpus
#   5. the guest agent's frame decoder (what a hostile guest sends the host)
#      under libFuzzer for 45 s, and sandweave e2b's request decoding for 30 s
#   6. go vet and the Go unit tests of the gVisor packages runtime/series
#      patches (runtime/build-runsc.sh --test, on the runtime setup built)
#   7. every unit and integration test against the real runsc (ctest)
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$top/scripts/setup.sh" --test-deps

echo "== unit tests under ASan+UBSan" >&2
"$top/scripts/setup.sh" --build-dir "$top/build-asan" -- -DSANDWEAVE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
(cd "$top/build-asan" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L unit)

# fuzz TARGET SECONDS SEED_CORPUS [DICT]: libFuzzer writes new inputs into a
# scratch corpus in build-fuzz, so the recorded seeds stay as they are.
fuzz() {
  local target="$1" seconds="$2" seeds="$3" dict=()
  [[ -n "${4:-}" ]] && dict=("-dict=$4")
  cmake --build "$top/build-fuzz" -j"$(nproc)" --target "$target" >&2
  mkdir -p "$top/build-fuzz/corpus-$target"
  "$top/build-fuzz/tests/fuzz/$target" -max_total_time="$seconds" -print_final_stats=1 \
    "${dict[@]}" "$top/build-fuzz/corpus-$target" "$seeds" 2>&1 | tail -n 15 >&2
}
CC=clang CXX=clang++ cmake -S "$top" -B "$top/build-fuzz" -DSANDWEAVE_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2

echo "== fuzzing the audit decoder (60 s)" >&2
fuzz fuzz_audit_decoder 60 "$top/tests/data/audit/corpus"

echo "== fuzzing the JSON-RPC request decoder (60 s)" >&2
fuzz fuzz_rpc_request 60 "$top/tests/data/rpc/corpus" "$top/tests/data/rpc/rpc.dict"

echo "== fuzzing template and option resolution (45 s)" >&2
fuzz fuzz_template 45 "$top/tests/data/templates/corpus" "$top/tests/data/templates/template.dict"

echo "== fuzzing the guest agent's frame decoder (45 s)" >&2
fuzz fuzz_agent_frames 45 "$top/tests/data/agent/corpus"

echo "== fuzzing the E2B request decoding (30 s)" >&2
fuzz fuzz_e2b_request 30 "$top/tests/data/e2b/corpus"

echo "== the runtime patches' Go tests" >&2
"$top/runtime/build-runsc.sh" --test >/dev/null

echo "== the e2b JavaScript SDK for tests/integration/e2b.sh (npm ci, pinned by its lockfile)" >&2
# Node >= 20.18.1 (the SDK's engines) is not in Debian 12: without it, e2b.sh skips.
if command -v npm >/dev/null; then (cd "$top/tests/e2b" && npm ci --no-audit --no-fund >&2); fi

echo "== unit and integration tests" >&2
cd "$top/build"
ctest --output-on-failure --timeout 900 -LE fuzz
