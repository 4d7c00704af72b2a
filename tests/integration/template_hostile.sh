#!/usr/bin/env bash
# Hostile and careless templates, on every path that resolves one:
#   - a YAML alias bomb ("billion laughs": nine levels of nine aliases, a few
#     hundred bytes) is refused at once, naming its file, by template
#     show/validate, create, a batch spec and serve;
#   - a host file named as a template (/etc/shadow) is never quoted back;
#   - a template path from a protocol client (serve --stdio, as ssh:// and a
#     controller's workers run it) is refused, not read, whether it is the
#     template itself or the extends of inline text;
#   - the Python SDK reads a template file where it runs and sends its
#     content (so a local SDK, which drives serve --stdio, still takes files);
#   - a batch spec whose template does not exist or does not resolve fails
#     before anything starts (exit 4 or 2), naming its line, with no retries.
# Each refusal is bounded by `timeout 60` only so that a hang fails the test
# instead of stalling it; the refusals themselves take milliseconds.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root
sw_setup
require_cmd python3

T="$SCRATCH/t"
mkdir -p "$T"

# Nine levels of nine aliases, each line indented by $1 (keys $1a .. $1i).
bomb() {  # PREFIX
    local levels=(a b c d e f g h i) i j line
    printf '%sa: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' "$1"
    for ((i = 1; i < 9; i++)); do
        line="$1${levels[i]}: &${levels[i]} ["
        for ((j = 0; j < 9; j++)); do
            ((j > 0)) && line+=","
            line+="*${levels[i - 1]}"
        done
        printf '%s]\n' "$line"
    done
}
{ echo "image: base"; bomb x; } >"$T/bomb.yaml"           # anchors at the top level
{ echo "extends: base"; echo "env:"; bomb "  "; } >"$T/bomb-env.yaml"  # under a template key
SECRET='root:$6$T0PS3CRET$hash:20228:0:99999:7:::'
printf '%s\ndaemon:*:20228:0:99999:7:::\n' "$SECRET" >"$T/secret"
printf 'extends: base\nlabels: {origin: client-file}\n' >"$T/good.yaml"

# --- the CLI ----------------------------------------------------------------------------
for f in bomb.yaml bomb-env.yaml; do
    for verb in "template show" "template validate" "create --template"; do
        # shellcheck disable=SC2086
        assert_exit "$verb $f: refused (exit 2)" 2 timeout 60 "$SW" $verb "$T/$f"
        assert_match "$verb $f: names the file" "$T/$f" "$LAST_ERR"
        assert_eq "$verb $f: one line" 1 "$(line_count "$LAST_ERR")"
    done
done
assert_match "bomb-env.yaml: says the aliases expand too far" "aliases" "$LAST_ERR"

assert_exit "create --template a host file that is no template: exit 2" 2 sw create --template "$T/secret"
assert_match "... names the file and the line, and says what was expected" \
    "$T/secret.* line 1: template: (expected a map of template keys|unknown key)" "$LAST_ERR"
assert_no_match "... quotes none of it" "T0PS3CRET|root:|daemon" "$LAST_ERR"
if [[ -s /etc/shadow ]]; then
    FIRST="$(head -c 20 /etc/shadow)"
    assert_exit "template show /etc/shadow: exit 2" 2 sw template show /etc/shadow
    assert_true "... quotes none of it" bash -c '[[ "$1" != *"$2"* ]]' _ "$LAST_ERR" "$FIRST"
fi
assert_eq "nothing was created" 0 "$(sw_count)"

# --- serve --stdio: what a remote client (ssh://, a controller's worker) sends ---------------
# The answer to one request (id 1) after the hello.
rpc() {  # METHOD PARAMS_JSON
    printf '%s\n' '{"jsonrpc":"2.0","id":0,"method":"hello","params":{"protocol":1}}' \
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"$1\",\"params\":$2}" |
        timeout 60 "$SW" serve --stdio 2>/dev/null | jq -c 'select(.id == 1)'
}
refused_remote() {  # NAME METHOD PARAMS_JSON
    local out
    out="$(rpc "$2" "$3")"
    assert_eq "serve, $1: refused with exit status 2" 2 "$(jq -r '.error.data.exit_status' <<<"$out")"
    assert_match "serve, $1: says the file is not read for a remote client" \
        "not read for a remote client" "$(jq -r '.error.message' <<<"$out")"
    assert_no_match "serve, $1: quotes no file" "T0PS3CRET|root:" "$out"
}
refused_remote 'sandbox.create {"template": "/etc/shadow"}' sandbox.create '{"template":"/etc/shadow"}'
refused_remote "sandbox.create of a file of this host" sandbox.create "{\"template\":\"$T/secret\"}"
refused_remote "sandbox.create of a good template file" sandbox.create "{\"template\":\"$T/good.yaml\"}"
refused_remote 'sandbox.create {"template": "../../etc/passwd"}' sandbox.create '{"template":"../../etc/passwd"}'
refused_remote "sandbox.create, inline text extending /etc/shadow" sandbox.create \
    "$(jq -nc '{template: "{\"extends\": \"/etc/shadow\"}"}')"
refused_remote "pool.create of /etc/shadow" pool.create '{"name":"p","size":0,"template":"/etc/shadow"}'
refused_remote "template.show of /etc/shadow" template.show '{"template":"/etc/shadow"}'
refused_remote "template.validate of /etc/shadow" template.validate '{"file":"/etc/shadow"}'
assert_eq "serve: nothing was created" 0 "$(sw_count)"
assert_eq "serve: no pool was made" 0 "$(sw --json pool ls | jq length)"

OUT="$(rpc sandbox.create "$(jq -nc --rawfile t "$T/bomb-env.yaml" '{template: $t}')")"
assert_eq "serve: an alias bomb as inline text: exit status 2" 2 "$(jq -r '.error.data.exit_status' <<<"$OUT")"
assert_match "serve: ... says the aliases expand too far" "aliases" "$(jq -r '.error.message' <<<"$OUT")"
OUT="$(rpc template.show '{"template":"base"}')"
assert_eq "serve: a template name still resolves" base "$(jq -r '.result.name' <<<"$OUT")"

# --- the Python SDK: files are read where it runs, and sent as content ----------------------
sdk() {  # PYTHON_CODE (T and SECRET in the environment)
    T="$T" PYTHONPATH="$SANDWEAVE_SOURCE_DIR/python" SANDWEAVE_BIN="$SW" timeout 120 python3 -c "$1"
}
capture sdk '
import os, pathlib
from sandweave import Sandbox
T = os.environ["T"]
for tpl in (pathlib.Path(T) / "good.yaml", T + "/good.yaml"):
    with Sandbox(template=tpl) as env:
        print(env.spec["labels"]["origin"], env.run("echo ran").stdout.strip())
'
assert_eq "SDK: a template file (Path and str) is read on the client: exit 0" 0 "$LAST_RC"
assert_eq "SDK: ... its settings apply and the sandbox runs" \
    "client-file ran"$'\n'"client-file ran" "$LAST_OUT"
capture sdk '
import os
from sandweave import Sandbox, SandweaveError
T = os.environ["T"]
for tpl in ("/etc/shadow", T + "/secret", T + "/bomb-env.yaml", "/nonexistent/t.yaml"):
    try:
        Sandbox(template=tpl)
        print("created", tpl)
    except SandweaveError as e:
        print(e.code, e.message)
'
assert_eq "SDK: refusals: exit 0" 0 "$LAST_RC"
assert_match "SDK: /etc/shadow: a usage error naming the file" "^2 .*/etc/shadow" "$(sed -n 1p <<<"$LAST_OUT")"
assert_match "SDK: a host file that is no template: a usage error naming it" "^2 .*$T/secret" \
    "$(sed -n 2p <<<"$LAST_OUT")"
assert_match "SDK: an alias bomb: a usage error naming the file" "^2 .*bomb-env.yaml.*aliases" "$(sed -n 3p <<<"$LAST_OUT")"
assert_match "SDK: a missing file: not found" "^4 .*/nonexistent/t.yaml" "$(sed -n 4p <<<"$LAST_OUT")"
assert_no_match "SDK: no file is quoted" "T0PS3CRET|root:" "$LAST_OUT"
assert_eq "SDK: nothing is left" 0 "$(sw_count)"

# --- batch: a template that cannot be made fails up front --------------------------------
batch_refused() {  # NAME STATUS REGEX TEMPLATE [DIR]
    local spec="$T/spec-$RANDOM.jsonl" out="$SCRATCH/out-$RANDOM"
    {
        echo '{"id": "fine", "template": "base", "command": ["true"]}'
        jq -nc --arg t "$4" '{id: "bad", template: $t, command: ["true"]}'
    } >"$spec"
    (cd "${5:-$T}" && exec timeout 60 "$SW" batch run "$spec" --out "$out" --retries 3) >"$SCRATCH/b.out" 2>"$SCRATCH/b.err"
    local rc=$? err
    err="$(cat "$SCRATCH/b.err")"
    assert_eq "batch, $1: exit $2" "$2" "$rc"
    assert_match "batch, $1: names the spec's line 2" "$spec:2: .*$3" "$err"
    assert_no_match "batch, $1: no retries, no file quoted" "retr|infrastructure|T0PS3CRET|root:" "$err"
    assert_eq "batch, $1: no episode ran" "" "$(find "$out" -mindepth 1 -maxdepth 1 ! -name '.*' 2>/dev/null)"
    assert_eq "batch, $1: no sandbox was made" 0 "$(sw_count)"
}
batch_refused "an unknown template" 4 "unknown template 'nosuch'" nosuch
batch_refused "a template file that does not exist" 4 "not found" ../../no/such.yaml
batch_refused "../../etc/passwd (a host file)" 2 "expected a map of template keys" ../../etc/passwd /etc/ssh
batch_refused "an alias bomb" 2 "bomb.yaml" "$T/bomb.yaml"

finish
