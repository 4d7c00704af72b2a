#!/usr/bin/env bash
# image import: an OCI image this test lays out itself (tests/helpers/oci_image.py:
# a whiteout, an opaque directory, a symlink, a setuid file, a config with Env,
# WorkingDir, User, Entrypoint and Cmd) brought in through each transport
# (oci:DIR, and oci-archive:/docker-archive: files made from it by skopeo),
# then run in a sandbox; a template naming it gets its config as defaults;
# bad input gets one line and leaves nothing in `image ls`.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "runsc, mounts"
require_cmd jq python3 skopeo umoci
require_helpers oci_image.py
TMPDIR=/tmp sw_setup
T=$SCRATCH

python3 "$HELPERS/oci_image.py" "$T/oci" /bin/busybox || fatal "the test image is laid out"
skopeo --insecure-policy copy -q "oci:$T/oci" "oci-archive:$T/img-oci.tar" || fatal "an oci-archive is made"
skopeo --insecure-policy copy -q "oci:$T/oci" "docker-archive:$T/img-docker.tar:web:latest" ||
    fatal "a docker-archive is made"

images() { sw image ls --json | jq -r '.[].name' | sort | tr '\n' ' ' | sed 's/ $//'; }

# --- the three transports --------------------------------------------------------------
assert_exit "import oci:DIR" 0 sw image import web "oci:$T/oci"
assert_eq "import prints the name" web "$LAST_OUT"
assert_exit "import oci-archive:FILE" 0 sw image import web-oa "oci-archive:$T/img-oci.tar"
assert_exit "import docker-archive:FILE" 0 sw image import web-da "docker-archive:$T/img-docker.tar"
assert_eq "image ls lists the three" "web web-da web-oa" "$(images)"

L="$(sw image ls --json)"
assert_eq "image ls: the source" "oci:$T/oci" "$(jq -r '.[] | select(.name == "web") | .source' <<<"$L")"
assert_eq "image ls: the image's creation time" 2024-01-02T03:04:05Z \
    "$(jq -r '.[] | select(.name == "web-da") | .created' <<<"$L")"
assert_true "image ls: a size" test "$(jq -r '.[] | select(.name == "web") | .bytes' <<<"$L")" -gt 100000
capture sw image ls
assert_match "image ls (text): source and created" "web +[0-9]+MiB +2024-01-02T03:04:05Z +oci:$T/oci" "$LAST_OUT"

I="$(sw image inspect web)"
assert_eq "inspect: Env" '["PATH=/usr/local/bin:/usr/bin:/bin","GREETING=hello from the image"]' "$(jq -c .config.env <<<"$I")"
assert_eq "inspect: WorkingDir" /work "$(jq -r .config.working_dir <<<"$I")"
assert_eq "inspect: User as written" agent "$(jq -r .config.user <<<"$I")"
assert_eq "inspect: User resolved in the image's passwd" 1001:1001 "$(jq -r .config.uid_gid <<<"$I")"
assert_eq "inspect: Entrypoint" '["/bin/sh","-c","echo \"$(id -u) $PWD $GREETING: $*\"","entry"]' \
    "$(jq -c .config.entrypoint <<<"$I")"
assert_eq "inspect: Cmd" '["default","cmd"]' "$(jq -c .config.cmd <<<"$I")"
assert_eq "inspect: layers" 2 "$(jq -r .layers <<<"$I")"
assert_match "inspect: the manifest digest" '^sha256:[0-9a-f]{64}$' "$(jq -r .digest <<<"$I")"
assert_exit "inspect of an unknown image: exit 4" 4 sw image inspect nosuch

# --- the layers, seen from inside a sandbox -----------------------------------------------
ID="$(sw create --template '{"image": "web"}')" || fatal "a sandbox on the imported image starts" "$ID"
in_box() { sw run "$ID" --user 0:0 --entrypoint '' -- "$@" 2>&1; }
assert_eq "a file deleted by a whiteout is gone" "no" "$(in_box /bin/sh -c 'test -e /gone.txt && echo yes || echo no')"
assert_eq "the whiteout file itself is not in the tree" "" "$(in_box /bin/ls -a / | grep -F .wh.)"
assert_eq "an opaque directory hides the lower layer's files" "new.txt" "$(in_box /bin/ls /opq)"
assert_eq "a symlink" "keep.txt" "$(in_box /bin/readlink /link)"
assert_eq "... that resolves" "kept" "$(in_box /bin/cat /link)"
assert_eq "a setuid file keeps its mode" "4755 0 0" "$(in_box /bin/stat -c '%a %u %g' /usr/local/bin/suid)"
assert_eq "the image's files keep their owners" "1001 1001" "$(in_box /bin/stat -c '%u %g' /work)"

# The config as defaults of a template that names the image, as docker run has them:
# no command runs Entrypoint + Cmd as the image's User, in its WorkingDir, with its Env.
assert_exit "run ID with no command runs the image's own" 0 sw run "$ID"
assert_eq "... Entrypoint + Cmd, as the User, in the WorkingDir, with the Env" \
    "1001 /work hello from the image: default cmd" "$LAST_OUT"
assert_eq "run ID -- ARGS: the ARGS replace the Cmd, the Entrypoint stays" \
    "1001 /work hello from the image: one two" "$(sw run "$ID" -- one two)"
assert_eq "flags override the image's User, WorkingDir and Env" "0 /tmp from a flag: x" \
    "$(sw run "$ID" --user 0:0 --cwd /tmp -e GREETING='from a flag' -- x)"
assert_eq "--entrypoint '' runs the command as it is" "1001" "$(sw run "$ID" --entrypoint '' -- /bin/id -u)"
assert_eq "--entrypoint PROG replaces it, dropping the Cmd" "a b" "$(sw run "$ID" --entrypoint /bin/echo -- a b)"
assert_eq "... (no Cmd without ARGS)" "" "$(sw run "$ID" --entrypoint /bin/echo)"
assert_eq "-c runs the shell, not the Entrypoint" "hello from the image" "$(sw run "$ID" -c 'echo "$GREETING"')"
assert_exit "--entrypoint '' and no command: a usage error" 2 sw run "$ID" --entrypoint ''
assert_eq "... in one line" 1 "$(line_count "$LAST_ERR")"
assert_match "... that says so" 'no command given' "$LAST_ERR"
assert_eq "a detached run gets the Entrypoint too" "1001 /work hello from the image: bg" \
    "$(h="$(sw run "$ID" -d -- bg)" && sw wait "$ID" "$h" >/dev/null && sw logs "$ID" "$h")"
S="$(sw inspect "$ID")"
assert_eq "inspect: the user came from the image" "image web" "$(jq -r '.spec.origin["/user"]' <<<"$S")"
assert_eq "inspect: the entrypoint" "echo \"\$(id -u) \$PWD \$GREETING: \$*\"" "$(jq -r '.spec.entrypoint[2]' <<<"$S")"
assert_eq "inspect: ... from the image" "image web" "$(jq -r '.spec.origin["/entrypoint"]' <<<"$S")"
assert_eq "inspect: the cmd" '["default","cmd"]' "$(jq -c .spec.cmd <<<"$S")"
assert_eq "inspect: ... from the image" "image web" "$(jq -r '.spec.origin["/cmd"]' <<<"$S")"
sw rm "$ID" >/dev/null

# The one-shot run does the same; a template's own entrypoint/cmd win over the image's.
assert_eq "run --template: the image's own command" "1001 /work hello from the image: default cmd" \
    "$(sw run --template '{"image": "web"}')"
assert_eq "run --template ... -- ARGS" "1001 /work hello from the image: z" \
    "$(sw run --template '{"image": "web"}' -- z)"
assert_eq "a template's cmd wins over the image's" "1001 /work hello from the image: mine" \
    "$(sw run --template '{"image": "web", "cmd": ["mine"]}')"
assert_exit "run --template with no command and none of its own: usage error" 2 sw run --template base
assert_eq "... in one line" 1 "$(line_count "$LAST_ERR")"
assert_match "... naming the template" "no command given, and template base has none of its own" "$LAST_ERR"
assert_eq "... before anything was created" "" "$(sw ls --json | jq -r '.[].id')"

TS="$(sw template show '{"image": "web", "env": {"GREETING": "from the template"}}' --json)"
assert_eq "template show: the image's cwd" /work "$(jq -r .resolved.cwd <<<"$TS")"
assert_eq "template show: ... from the image" "image web" "$(jq -r '.origin["/cwd"]' <<<"$TS")"
assert_eq "template show: the template's own env wins" "from the template" "$(jq -r .resolved.env.GREETING <<<"$TS")"
assert_eq "template show: ... and says so" inline "$(jq -r '.origin["/env/GREETING"]' <<<"$TS")"
assert_eq "template show: the image's PATH" "image web" "$(jq -r '.origin["/env/PATH"]' <<<"$TS")"
assert_eq "template show: Cmd" '["default","cmd"]' "$(jq -c .resolved.cmd <<<"$TS")"
assert_eq "template show: ... from the image" "image web" "$(jq -r '.origin["/cmd"]' <<<"$TS")"
assert_eq "template show: the Entrypoint's origin" "image web" "$(jq -r '.origin["/entrypoint"]' <<<"$TS")"
capture sw template show '{"image": "web"}'
assert_match "template show (text) names the image as the origin" 'user: "1001:1001" +# from image web' "$LAST_OUT"
assert_match "template show (text): the Cmd from the image" 'cmd: \["default","cmd"\] +# from image web' "$LAST_OUT"
ID2="$(sw create --template '{"image": "web"}' --user 0:0)" || fail "a flag overrides the image's user"
assert_eq "an explicit create --user wins over the image's" "0 /work hello from the image: default cmd" \
    "$(sw run "$ID2")"
sw rm "$ID2" >/dev/null
B="$(sw create)" || fatal "a base sandbox starts" "$B"
assert_exit "run ID with no command, no entrypoint or cmd: usage error" 2 sw run "$B"
assert_eq "... in one line" 1 "$(line_count "$LAST_ERR")"
assert_match "... that says why" "no command given, and sandbox $B has none of its own" "$LAST_ERR"
sw rm "$B" >/dev/null

# --- bad input: one line each, nothing half-imported -------------------------------------
before="$(images)"
bad() {  # NAME EXIT SOURCE PATTERN
    assert_exit "$1: exit $2" "$2" sw image import bad "$3"
    assert_eq "$1: one line on stderr" 1 "$(line_count "$LAST_ERR")"
    assert_match "$1: says why" "$4" "$LAST_ERR"
    assert_eq "$1: nothing in image ls" "$before" "$(images)"
}
head -c 5000 /dev/urandom >"$T/garbage.tar"
bad "a corrupt archive" 2 "docker-archive:$T/garbage.tar" 'reading the source'
head -c 20000 "$T/img-oci.tar" >"$T/truncated.tar"
bad "a truncated oci-archive" 2 "oci-archive:$T/truncated.tar" 'reading the source'
bad "a missing file" 2 "oci-archive:$T/nosuch.tar" 'No such file'
bad "an unknown transport" 2 "docker://busybox" "unknown transport 'docker'"
bad "no transport at all" 2 "$T/img-oci.tar" 'unknown transport'
bad "a directory given as an archive" 2 "oci-archive:$T/oci" 'not a file'
python3 "$HELPERS/oci_image.py" "$T/escape" /bin/busybox --escape || fatal "the escaping image is laid out"
bad "a member escaping the root" 2 "oci:$T/escape" "'\\.\\./escape\\.txt' escapes the image's root"
assert_eq "... nothing was written outside" "" "$(find "$STATE" "$T" -name escape.txt -not -path "$T/escape/*")"
python3 "$HELPERS/oci_image.py" "$T/hardlink" /bin/busybox --hardlink-escape || fatal "the hard-link image is laid out"
bad "a hard link leaving the root" 2 "oci:$T/hardlink" 'points outside'
assert_eq "no temporary directories are left" "" "$(find "$STATE/images" -maxdepth 1 -name '.build-*')"
assert_exit "a built-in name is refused" 2 sw image import base "oci:$T/oci"
assert_exit "an existing name is refused" 2 sw image import web "oci:$T/oci"
assert_exit "... unless --force" 0 sw image import web "oci-archive:$T/img-oci.tar" --force
assert_eq "... which records the new source" "oci-archive:$T/img-oci.tar" "$(sw image inspect web | jq -r .source)"

# --- over the API: serve sends progress to a client that asked for it -------------------
rpc_import() {  # NAME CAPABILITIES_JSON
    printf '%s\n' \
        '{"jsonrpc":"2.0","id":0,"method":"hello","params":{"protocol":1,"capabilities":'"$2"'}}' \
        '{"jsonrpc":"2.0","id":1,"method":"image.import","params":{"name":"'"$1"'","source":"oci:'"$T/oci"'"}}' |
        sw serve --stdio 2>/dev/null
}
OUT="$(rpc_import web-rpc '["progress"]')"
assert_match "serve: progress notifications to a client that asked" \
    '"method":"progress","params":\{[^}]*"step":"checking layer 1/2"[^}]*"task":"importing image .web-rpc."' "$OUT"
assert_match "serve: ... a finished report" '"finished":true[^}]*"task":"importing image .web-rpc."' "$OUT"
assert_match "serve: ... then the result" '"id":1,"jsonrpc":"2.0","result":\{.*"name":"web-rpc"' "$OUT"
OUT="$(rpc_import web-rpc2 '[]')"
assert_no_match "serve: none to a client that did not ask" '"method":"progress"' "$OUT"
assert_match "serve: ... which still gets the result" '"id":1,"jsonrpc":"2.0","result":' "$OUT"
for i in web-rpc web-rpc2; do sw image rm "$i" >/dev/null 2>&1; done

# --- progress ------------------------------------------------------------------------------
capture sw image import web-p "oci:$T/oci"
assert_no_match "no progress when stderr is not a terminal" 'checking layer' "$LAST_ERR"
capture sw --progress image import web-p2 "oci:$T/oci"
assert_match "--progress: the layer checks" "importing image 'web-p2': checking layer 1/2" "$LAST_ERR"
assert_match "--progress: the unpack" "importing image 'web-p2': unpacking 2 layer" "$LAST_ERR"
if command -v script >/dev/null; then
    script -qec "$SW image import web-tty oci:$T/oci" "$T/typescript" >/dev/null 2>&1
    assert_match "on a terminal: progress redrawn in place" $'\r\033\\[Kimporting image .web-tty.: checking layer' "$(cat "$T/typescript")"
else
    skipped "script(1) missing: progress on a terminal"
fi
for i in web web-oa web-da web-p web-p2 web-tty; do sw image rm "$i" >/dev/null 2>&1; done
assert_eq "image rm removes them" "" "$(images | tr ' ' '\n' | grep '^web' || true)"
finish
