#!/usr/bin/env bash
# The `coding` template works for what an agent does first: a shell, GNU
# coreutils (ls/stat use statx with AT_NO_AUTOMOUNT, which stock gVisor
# rejected), Python and git, as an unprivileged uid. The image is built once in
# a persistent state dir shared with hidepid_coding.sh (debootstrap, minutes).
set -uo pipefail
: "${SANDWEAVE:?SANDWEAVE must name the sandweave binary under test}"
export SANDWEAVE_STATE_DIR="${SANDWEAVE_CODING_STATE_DIR:-/var/tmp/sandweave-test-coding}"
mkdir -p "$SANDWEAVE_STATE_DIR"
passed=0 failed=0 id=""
cleanup() { [ -n "$id" ] && "$SANDWEAVE" rm "$id" >/dev/null 2>&1; }
trap cleanup EXIT
check() {  # NAME EXPECTED_REGEX ACTUAL
  if [[ "$3" =~ $2 ]]; then passed=$((passed + 1)); echo "PASS $1"
  else failed=$((failed + 1)); echo "FAIL $1"; echo "     expected to match: $2"; echo "     actual: $3"; fi
}

if ! "$SANDWEAVE" image ls --json | grep -q '"name": "coding"'; then
  "$SANDWEAVE" image build coding >&2 || { echo "FAIL image build coding"; echo "0 passed, 1 failed"; exit 1; }
fi
id=$("$SANDWEAVE" create --template coding)
check "create --template coding prints an id" '^sw-[0-9a-f]{12}$' "$id"
out=$("$SANDWEAVE" run "$id" --user 1001:1001 -- ls -la / 2>&1)
check "GNU ls lists / as uid 1001" 'usr' "$out"
check "GNU ls does not fail with EINVAL" '^clean$' "$(grep -q 'Invalid argument' <<<"$out" && echo einval || echo clean)"
out=$("$SANDWEAVE" run "$id" --user 1001:1001 -- stat -c '%F' / 2>&1)
check "GNU stat works" '^directory$' "$out"
out=$("$SANDWEAVE" run "$id" --user 1001:1001 -- python3 -c 'import sys; print(sys.version_info[0])' 2>&1)
check "python3 runs" '^3$' "$out"
out=$("$SANDWEAVE" run "$id" --user 1001:1001 --cwd /tmp -c 'git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && git log --oneline | wc -l' 2>&1)
check "git commits in /tmp" '^1$' "$out"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
