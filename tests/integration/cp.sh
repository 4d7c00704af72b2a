#!/usr/bin/env bash
# sandweave cp, as docker cp does it, through the guest agent's own
# copier (no tar in the guest): both directions, trees with modes, times,
# symlinks and empty directories, byte-exact and large files, tar streams both
# ways, --user ownership, docker cp's path rules, refused escapes (tar members
# and guest symlinks), and failures that leave nothing half-written (a full
# disk here).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup
require_root "runsc, mounts, tmpfs"
require_cmd jq sha256sum cmp tar python3

ID=$(sw create) || fatal "create"
T=$SCRATCH

# A tree: modes, an old mtime, a relative symlink, an empty directory, binary bytes.
mkdir -p "$T/src/sub/deeper" "$T/src/empty"
printf 'hello\n' >"$T/src/hello.txt"
head -c 300000 /dev/urandom >"$T/src/sub/binary.bin"
printf '#!/bin/sh\necho run\n' >"$T/src/sub/run.sh"
chmod 0755 "$T/src/sub/run.sh"
chmod 0600 "$T/src/hello.txt"
chmod 0750 "$T/src/sub/deeper"
ln -s ../hello.txt "$T/src/sub/link"
touch -h -d '2001-02-03 04:05:06' "$T/src/sub/binary.bin" "$T/src/sub/link"
touch -d '2002-03-04 05:06:07' "$T/src/sub/deeper" "$T/src/sub"
listing() {  # DIR: relative path, type, mode, mtime, symlink target
    (cd "$1" && find . -mindepth 1 -printf '%P %y %m %TY%Tm%Td%TH%TM%TS %l\n' | sed 's/\.[0-9]* / /' | sort)
}

# --- in and back out ------------------------------------------------------------------
assert_exit "cp a directory into a sandbox" 0 sw cp "$T/src" "$ID:/tmp"
capture sw run "$ID" -- sh -c 'cd /tmp/src && find . | sort && stat -c "%n %a" hello.txt sub/run.sh sub/deeper && readlink sub/link'
assert_match "the tree arrived, its empty directory too" "./empty" "$LAST_OUT"
assert_match "modes kept" "hello.txt 600" "$LAST_OUT"
assert_match "an executable stays executable" "sub/run.sh 755" "$LAST_OUT"
assert_match "a symlink arrives as a symlink" "\.\./hello\.txt" "$LAST_OUT"
capture sw run "$ID" -- sh -c 'ls -A /tmp | grep sw-cp || true'
assert_eq "no staging name is left in the guest" "" "$LAST_OUT"
assert_exit "cp the directory back out" 0 sw cp "$ID:/tmp/src" "$T/back"
assert_eq "out again: the same tree, modes, mtimes and symlinks" "$(listing "$T/src")" "$(listing "$T/back")"
assert_true "a binary file comes back byte-exact" cmp -s "$T/src/sub/binary.bin" "$T/back/sub/binary.bin"
assert_true "the symlink came back as a symlink" test -L "$T/back/sub/link"

# docker cp's path rules
assert_exit "a file to a new name" 0 sw cp "$T/src/hello.txt" "$ID:/tmp/renamed.txt"
assert_eq "... is that file" "hello" "$(sw run "$ID" -- cat /tmp/renamed.txt)"
sw run "$ID" -- mkdir /tmp/existing
assert_exit "into an existing directory" 0 sw cp "$T/src/hello.txt" "$ID:/tmp/existing"
assert_eq "... lands inside it" "hello" "$(sw run "$ID" -- cat /tmp/existing/hello.txt)"
sw run "$ID" -- mkdir /tmp/contents
assert_exit "SRC/. copies the contents" 0 sw cp "$T/src/." "$ID:/tmp/contents"
assert_eq "... into the directory itself" "hello" "$(sw run "$ID" -- cat /tmp/contents/hello.txt)"
assert_exit "a missing destination parent is an error (1)" 1 sw cp "$T/src/hello.txt" "$ID:/no/such/dir/x"
assert_match "... saying so" "parent directory does not exist" "$LAST_ERR"
assert_eq "... in one line" 1 "$(line_count "$LAST_ERR")"
assert_exit "a missing guest source is an error (1)" 1 sw cp "$ID:/no/such/file" "$T/none"
assert_match "... naming it" "/no/such/file: No such file or directory" "$LAST_ERR"
assert_true "... and writes nothing here" test ! -e "$T/none"
assert_exit "a missing local source is an error (1)" 1 sw cp "$T/no-such" "$ID:/tmp"
assert_exit "no such sandbox: 4" 4 sw cp "$T/src/hello.txt" "sw-nosuch:/tmp"
assert_exit "two local paths: a usage error (2)" 2 sw cp "$T/src" "$T/other"
# A relative guest path is relative to the sandbox's working directory (its
# template's cwd), as docker cp resolves one against WORKDIR.
assert_exit "a relative guest path (cwd /): in" 0 sw cp "$T/src/hello.txt" "$ID:tmp/rel.txt"
assert_eq "... lands below /" "$(cat "$T/src/hello.txt")" "$(sw run "$ID" -- cat /tmp/rel.txt)"
assert_exit "... and out" 0 sw cp "$ID:tmp/rel.txt" "$T/rel-out.txt"
assert_eq "... the same bytes" "$(cat "$T/src/hello.txt")" "$(cat "$T/rel-out.txt")"
WID=$(sw create --template '{"extends": "base", "cwd": "/tmp"}') || fatal "create with cwd /tmp"
assert_exit "a relative guest path (cwd /tmp): in" 0 sw cp "$T/src/hello.txt" "$WID:wd.txt"
assert_eq "... lands in the working directory" "$(cat "$T/src/hello.txt")" \
    "$(sw run "$WID" -- cat /tmp/wd.txt)"
assert_exit "... and out, by the same name" 0 sw cp "$WID:wd.txt" "$T/wd-out.txt"
assert_eq "... the same bytes" "$(cat "$T/src/hello.txt")" "$(cat "$T/wd-out.txt")"
assert_exit "a missing relative guest source names it" 1 sw cp "$WID:nosuch" "$T/none"
assert_match "... as given" "nosuch: No such file or directory" "$LAST_ERR"
sw rm "$WID" >/dev/null
assert_exit "an empty guest path: a usage error (2)" 2 sw cp "$T/src" "$ID:"
assert_exit "a directory onto a file is refused" 1 sw cp "$T/src" "$ID:/tmp/renamed.txt"

# --- large and byte-exact ------------------------------------------------------------------
head -c 52428800 /dev/urandom >"$T/big"
assert_exit "a 50 MiB file in" 0 sw cp "$T/big" "$ID:/tmp/big"
assert_eq "... sha256-equal in the guest" "$(sha256sum <"$T/big" | cut -d' ' -f1)" \
    "$(sw run "$ID" -- sha256sum /tmp/big | cut -d' ' -f1)"
assert_exit "... and out" 0 sw cp "$ID:/tmp/big" "$T/big.back"
assert_true "... byte-exact" cmp -s "$T/big" "$T/big.back"

# --- tar streams ------------------------------------------------------------------------------
sw run "$ID" -- mkdir /tmp/fromtar
tar -C "$T/src" -cf - . | sw cp - "$ID:/tmp/fromtar"
assert_eq "a tar on stdin is extracted into the directory" 0 "$?"
assert_eq "... its files there" "hello" "$(sw run "$ID" -- cat /tmp/fromtar/hello.txt)"
capture sw run "$ID" -- stat -c %a /tmp/fromtar/sub/run.sh
assert_eq "... with their modes" 755 "$LAST_OUT"
mkdir "$T/untar"
sw cp "$ID:/tmp/src" - | tar -C "$T/untar" -xf -
assert_eq "a guest path as a tar on stdout" "$(listing "$T/src")" "$(listing "$T/untar/src")"
assert_exit "a tar into a missing directory is an error" 1 sh -c "tar -C '$T/src' -cf - . | '$SW' cp - '$ID:/tmp/nonexistent'"

# --- --user -------------------------------------------------------------------------------------
sw run "$ID" -- sh -c 'mkdir -p /tmp/u && chown 1001:1001 /tmp/u'
assert_exit "--user 1001:1001 writes as that user" 0 sw cp --user 1001:1001 "$T/src" "$ID:/tmp/u"
capture sw run "$ID" -- sh -c 'stat -c "%u:%g" /tmp/u/src /tmp/u/src/hello.txt /tmp/u/src/sub/binary.bin | sort -u'
assert_eq "... every file is 1001:1001" "1001:1001" "$LAST_OUT"
assert_exit "by default root writes (root:root)" 0 sw cp "$T/src/hello.txt" "$ID:/tmp/rootfile"
assert_eq "... owned by root" "0:0" "$(sw run "$ID" -- stat -c %u:%g /tmp/rootfile)"
assert_exit "--user 1001:1001 cannot write where that user may not" 1 sw cp --user 1001:1001 "$T/src/hello.txt" "$ID:/root/x"
assert_match "... and says why" "Permission denied" "$LAST_ERR"

# --- escapes: refused, nothing written -----------------------------------------------------------
mktar() {  # OUT KIND: a tar with a member that would escape
    python3 - "$@" <<'EOF'
import io, sys, tarfile
out, kind = sys.argv[1], sys.argv[2]
with tarfile.open(out, "w") as t:
    def add(name, data=b"x", **kw):
        i = tarfile.TarInfo(name)
        for k, v in kw.items():
            setattr(i, k, v)
        if i.type == tarfile.REGTYPE:
            i.size = len(data)
            t.addfile(i, io.BytesIO(data))
        else:
            t.addfile(i)
    add("ok.txt")
    if kind == "dotdot":
        add("../escaped.txt")
    elif kind == "abs":
        add("/tmp/escaped-abs.txt")
    elif kind == "through-link":
        add("l", type=tarfile.SYMTYPE, linkname="/etc")
        add("l/escaped.txt")
    elif kind == "abs-link":
        add("l", type=tarfile.SYMTYPE, linkname="/etc/passwd")
    elif kind == "climbing-link":
        add("d", type=tarfile.DIRTYPE, mode=0o755)
        add("d/l", type=tarfile.SYMTYPE, linkname="../../etc")
EOF
}
sw run "$ID" -- mkdir /tmp/esc
for kind in dotdot abs through-link abs-link climbing-link; do
    mktar "$T/$kind.tar" "$kind"
    capture sh -c "'$SW' cp - '$ID:/tmp/esc' <'$T/$kind.tar'"
    assert_eq "a tar with a '$kind' member is refused (exit 1)" 1 "$LAST_RC"
    assert_match "... saying it was refused" "refused" "$LAST_ERR"
    assert_eq "... in one line" 1 "$(line_count "$LAST_ERR")"
done
capture sw run "$ID" -- sh -c 'ls -A /tmp/esc; ls /tmp/escaped* /escaped.txt /etc/escaped.txt 2>/dev/null; true'
assert_eq "... and nothing of those tars was written, inside or outside" "" "$LAST_OUT"

# A guest symlink pointing outside: copied as a symlink, never followed.
sw run "$ID" -- sh -c 'ln -s /etc/shadow /tmp/outlink && mkdir -p /tmp/withlink && ln -s /etc /tmp/withlink/etc'
assert_exit "a guest symlink to an absolute path comes out" 0 sw cp "$ID:/tmp/outlink" "$T/outlink"
assert_eq "... as the symlink itself" "/etc/shadow" "$(readlink "$T/outlink")"
assert_exit "a tree holding a symlink out of it is refused" 1 sw cp "$ID:/tmp/withlink" "$T/withlink"
assert_match "... as pointing outside" "points outside the copy" "$LAST_ERR"
assert_true "... and nothing is written here" test ! -e "$T/withlink"
ls -A "$T" | grep -q '^\.sw-cp' && fail "no staging name is left here" "$(ls -A "$T")" || pass "no staging name is left here"

# --- a symlink at the destination is never written through ----------------------------------
# Two steps: a first copy brings a symlink the guest made (out -> ../decoy); a
# second copy names that symlink as its destination.
mkdir -p "$T/att" "$T/decoy"
sw run "$ID" -- sh -c 'ln -s ../decoy /tmp/evil && printf owned >/tmp/payload'
assert_exit "out, step one: the guest's symlink comes out as a symlink" 0 sw cp "$ID:/tmp/evil" "$T/att/out"
assert_eq "... pointing where the guest said" "../decoy" "$(readlink "$T/att/out")"
for form in "" "/" "/."; do
    capture sw cp "$ID:/tmp/payload" "$T/att/out$form"
    assert_eq "out, step two ('out$form'): refused (exit 1)" 1 "$LAST_RC"
    assert_match "... saying the destination is a symlink" "is a symlink" "$LAST_ERR"
    assert_eq "... in one line" 1 "$(line_count "$LAST_ERR")"
done
assert_eq "... nothing was written through it" "" "$(ls -A "$T/decoy")"
assert_true "... and the symlink is still the symlink" test -L "$T/att/out"

ln -s ../decoy "$T/inlink"
printf owned >"$T/payload"
sw run "$ID" -- mkdir -p /tmp/in /tmp/decoy
assert_exit "in, step one: a symlink goes in as a symlink" 0 sw cp "$T/inlink" "$ID:/tmp/in/out"
for form in "" "/" "/."; do
    capture sw cp "$T/payload" "$ID:/tmp/in/out$form"
    assert_eq "in, step two ('out$form'): refused (exit 1)" 1 "$LAST_RC"
    assert_match "... saying the destination is a symlink" "is a symlink" "$LAST_ERR"
done
assert_eq "... nothing was written through it in the guest" "" "$(sw run "$ID" -- ls -A /tmp/decoy)"

# --- a full disk ------------------------------------------------------------------------------
mkdir -p "$T/small"
mount -t tmpfs -o size=8m tmpfs "$T/small" || fatal "a small tmpfs"
on_cleanup_small() { umount "$T/small" 2>/dev/null || true; }
on_cleanup on_cleanup_small
printf 'old\n' >"$T/small/big"
capture sw cp "$ID:/tmp/big" "$T/small/big"
assert_eq "out onto a full disk: exit 1" 1 "$LAST_RC"
assert_match "... one clear line: no space" "No space left on device" "$LAST_ERR"
assert_eq "... one line" 1 "$(line_count "$LAST_ERR")"
assert_eq "... the earlier content is intact" "old" "$(cat "$T/small/big")"
assert_eq "... and nothing half-written is left" "big" "$(ls -A "$T/small")"

# The guest side of a full disk is the same code (wire/copy.c); a guest
# cannot mount a small tmpfs of its own (no CAP_SYS_ADMIN), so it is the
# host's side that is exercised here (and tests/unit/test_copy_stream.cpp).

sw terminate "$ID" >/dev/null
sw rm "$ID" >/dev/null
finish
