#!/usr/bin/env bash
# Sets up, builds, and runs every test: unit and integration tests against the
# real runsc (ctest), then the unit tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer. Exits non-zero on any failure.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$top/scripts/setup.sh" --test-deps

echo "== unit and integration tests" >&2
(cd "$top/build" && ctest --output-on-failure --timeout 900)

echo "== unit tests under ASan+UBSan" >&2
"$top/scripts/setup.sh" --build-dir "$top/build-asan" -- -DSANDWEAVE_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
(cd "$top/build-asan" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -L unit)
