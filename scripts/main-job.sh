#!/usr/bin/env bash
# The main job on a fresh machine: set up, build the base image, and run a
# command as an unprivileged uid in a one-shot sandbox.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$top/scripts/setup.sh"
sw="$top/build/sandweave"
"$sw" image build base >/dev/null
exec "$sw" run --template base --user 1001:1001 -c 'id; ls /proc'
