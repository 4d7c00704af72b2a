#!/usr/bin/env bash
# The `coding` template works for what an agent does first: a shell, GNU
# coreutils (ls/stat use statx with AT_NO_AUTOMOUNT, which stock gVisor
# rejected), Python and git, as an unprivileged uid. The image is built once in
# a persistent state dir shared with hidepid_coding.sh (debootstrap, minutes),
# SANDWEAVE_CODING_STATE_DIR (default /var/tmp/sandweave-test-coding); the
# sandbox this test creates is removed.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "sandweave drives runsc and overlayfs"
test_setup
export SANDWEAVE_STATE_DIR="${SANDWEAVE_CODING_STATE_DIR:-/var/tmp/sandweave-test-coding}"
mkdir -p "$SANDWEAVE_STATE_DIR" || fatal "create the state directory $SANDWEAVE_STATE_DIR"
id=""
remove_sandbox() { [[ -n "$id" ]] && sw rm "$id" >/dev/null 2>&1; }
on_cleanup remove_sandbox

if [[ "$(sw image ls --json)" != *'"name": "coding"'* ]]; then
    sw image build coding >&2 || fatal "image build coding" "sandweave image build coding failed (output above)"
fi
id=$(sw create --template coding)
assert_match "create --template coding prints an id" '^sw-[0-9a-f]{12}$' "$id"
out=$(sw run "$id" --user 1001:1001 -- ls -la / 2>&1)
assert_match "GNU ls lists / as uid 1001" 'usr' "$out"
assert_no_match "GNU ls does not fail with EINVAL" 'Invalid argument' "$out"
out=$(sw run "$id" --user 1001:1001 -- stat -c '%F' / 2>&1)
assert_match "GNU stat works" '^directory$' "$out"
out=$(sw run "$id" --user 1001:1001 -- python3 -c 'import sys; print(sys.version_info[0])' 2>&1)
assert_match "python3 runs" '^3$' "$out"
out=$(sw run "$id" --user 1001:1001 --cwd /tmp -c 'git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && git log --oneline | wc -l' 2>&1)
assert_match "git commits in /tmp" '^1$' "$out"
finish
