#!/usr/bin/env bash
# The main job on a fresh machine: set up (packages, patched runtime, and a
# build of what it runs: sandweave, its helper and the guest init; test.sh
# builds the tests in the same ./build), build the base image, then the user
# guide's example: a one-shot sandbox whose /proc hides other users' processes
# (hidepid 2), audited, running `id; ls /proc` as uid 1001, with its audit log
# exported to ./episode.jsonl (+ .status.json).
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$top/scripts/setup.sh" --target sandweave --target sandweave-helper
sw="$top/build/sandweave"
"$sw" image build base >/dev/null
"$sw" run --template base --hidepid 2 --audit --audit-log episode.jsonl \
  --user 1001:1001 -c 'id; ls /proc'
