#!/usr/bin/env bash
# Templates from the user's side: template ls/show/validate, user templates via
# SANDWEAVE_TEMPLATE_PATH and the state dir, file paths, inline JSON/YAML, and an
# extends chain of depth 3 whose merged values really reach the guest.
# (Bad templates: bad_input.sh. The coding image is never built here.)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
sw_setup

TPL="$SCRATCH/templates"
mkdir -p "$TPL" "$SCRATCH/files"

# --- built-ins --------------------------------------------------------------------------
capture sw template ls
assert_eq "template ls exits 0" 0 "$LAST_RC"
assert_match "template ls lists base as built-in" '(^|'$'\n'')base +builtin ' "$LAST_OUT"
assert_match "template ls lists coding as built-in" '(^|'$'\n'')coding +builtin ' "$LAST_OUT"
assert_match "template ls lists desktop as built-in" '(^|'$'\n'')desktop +builtin ' "$LAST_OUT"
capture sw template ls --json
assert_eq "template ls --json names base, coding and desktop" "base coding desktop" \
    "$(jq -r '[.[] | select(.builtin) | .name] | sort | join(" ")' <<<"$LAST_OUT")"

capture sw template show coding
assert_eq "template show coding exits 0" 0 "$LAST_RC"
SHOW="$LAST_OUT"
assert_match "show: the chain" 'coding -> base' "$SHOW"
assert_match "show: image comes from coding" 'image: "?coding"? +# from coding' "$SHOW"
assert_match "show: LANG comes from base" 'LANG: "?C\.UTF-8"? +# from base' "$SHOW"
assert_match "show: PYTHONDONTWRITEBYTECODE comes from coding" 'PYTHONDONTWRITEBYTECODE: "?1"? +# from coding' "$SHOW"
assert_match "show: hidepid comes from base" 'hidepid: 0 +# from base' "$SHOW"
assert_match "show: pids comes from coding" 'pids: 4096 +# from coding' "$SHOW"
capture sw template show --json coding
assert_eq "show --json: resolved image" coding "$(jq -r .resolved.image <<<"$LAST_OUT")"
assert_eq "show --json: origin of LANG" base "$(jq -r '.origin["/env/LANG"]' <<<"$LAST_OUT")"
assert_eq "show --json: chain" '["coding","base"]' "$(jq -c .chain <<<"$LAST_OUT")"
assert_true "template show does not build the coding image" test ! -e "$STATE/images/coding"

# --- a chain of depth 3 in a user directory (SANDWEAVE_TEMPLATE_PATH) ------------------------
cat >"$TPL/gp.yaml" <<'EOF'
description: grandparent
extends: base
cwd: /tmp
env:
  A: gp
  B: gp
  C: gp
labels:
  level: gp
  keep: gp
EOF
cat >"$TPL/mid.yaml" <<'EOF'
description: parent
extends: gp
user: "1001:1001"
env:
  B: mid
labels:
  level: mid
EOF
cat >"$TPL/leaf.yaml" <<'EOF'
extends: mid
cwd: /root
env:
  C: leaf
  D: leaf
EOF
export SANDWEAVE_TEMPLATE_PATH="$TPL"

capture sw template ls
assert_match "template ls shows user templates from SANDWEAVE_TEMPLATE_PATH" '(^|'$'\n'')leaf +user ' "$LAST_OUT"
capture sw template show leaf
assert_match "show leaf: the whole chain" 'leaf -> mid -> gp -> base' "$LAST_OUT"
assert_match "show leaf: A from gp" 'A: "gp" +# from gp' "$LAST_OUT"
assert_match "show leaf: B from mid" 'B: "mid" +# from mid' "$LAST_OUT"
assert_match "show leaf: C from leaf" 'C: "leaf" +# from leaf' "$LAST_OUT"
assert_match "show leaf: LANG from base" 'LANG: "C.UTF-8" +# from base' "$LAST_OUT"
assert_match "show leaf: cwd replaced by leaf" 'cwd: "/root" +# from leaf' "$LAST_OUT"
assert_match "show leaf: user replaced by mid" 'user: "1001:1001" +# from mid' "$LAST_OUT"
assert_match "show leaf: description replaced by mid" 'description: "parent" +# from mid' "$LAST_OUT"

capture sw create --template leaf
assert_eq "create --template leaf exits 0" 0 "$LAST_RC"
LEAF="$LAST_OUT"
capture sw run "$LEAF" -c 'echo "$A $B $C $D $LANG"'
assert_eq "leaf: maps merge across the chain, nearest wins" "gp mid leaf leaf C.UTF-8" "$LAST_OUT"
capture sw run "$LEAF" --user 0 -- pwd
assert_eq "leaf: cwd is the child's" /root "$LAST_OUT"
capture sw run "$LEAF" -- id -u
assert_eq "leaf: the default user is mid's" 1001 "$LAST_OUT"
J="$(sw inspect "$LEAF")"
assert_eq "inspect leaf: template name" leaf "$(jq -r .spec.template <<<"$J")"
assert_eq "inspect leaf: labels merged" '{"keep":"gp","level":"mid"}' "$(jq -c .spec.labels <<<"$J")"
assert_eq "inspect leaf: origin of env B" "template mid" "$(jq -r '.spec.origin["/env/B"]' <<<"$J")"
assert_eq "inspect leaf: origin of user" "template mid" "$(jq -r '.spec.origin["/user"]' <<<"$J")"
capture sw create --template leaf --user 0:0
assert_eq "create --user overrides the template's user" 0 "$(sw run "$LAST_OUT" -- id -u 2>/dev/null)"
assert_eq "inspect: origin of --user is flag" flag "$(sw inspect "$LAST_OUT" | jq -r '.spec.origin["/user"]')"

# --- the state directory's templates/ is a user directory too --------------------------------
printf 'extends: base\nenv:\n  WHERE: state-dir\n' >"$STATE/templates/in-state.yaml"
capture sw run --template in-state -c 'echo $WHERE'
assert_eq "a template in <state>/templates is found by name" state-dir "$LAST_OUT"

# --- a template given as a file path; extends relative to that file --------------------------
printf 'extends: ../templates/gp.yaml\nenv:\n  A: by-path\n' >"$SCRATCH/files/by-path.yaml"
capture sw template validate "$SCRATCH/files/by-path.yaml"
assert_eq "template validate on a good file exits 0" 0 "$LAST_RC"
assert_match "template validate says ok" 'ok' "$LAST_OUT"
capture sw template validate --json "$SCRATCH/files/by-path.yaml"
assert_eq "template validate --json: valid" true "$(jq -r .valid <<<"$LAST_OUT")"
capture sw run --template "$SCRATCH/files/by-path.yaml" -c 'echo "$A $B $(pwd)"'
assert_eq "a template file path; its extends is relative to the file" "by-path gp /tmp" "$LAST_OUT"
( cd "$SCRATCH/files" && capture "$SW" template validate by-path.yaml && [[ $LAST_RC == 0 ]] )
assert_eq "template validate with a bare relative file name" 0 "$?"

# --- inline templates -------------------------------------------------------------------------
capture sw create --template '{"extends":"base","env":{"A":"1"}}'
assert_eq "create with an inline JSON template" 0 "$LAST_RC"
INLINE="$LAST_OUT"
capture sw run "$INLINE" -- sh -c 'echo $A'
assert_eq "inline JSON template: its env reaches the guest" 1 "$LAST_OUT"
assert_eq "inspect: the inline template's value's origin" "template inline" \
    "$(sw inspect "$INLINE" | jq -r '.spec.origin["/env/A"]')"
capture sw run --template $'extends: leaf\nenv:\n  D: inline-yaml\n' -c 'echo "$A $D"'
assert_eq "an inline YAML template extending a user template" "gp inline-yaml" "$LAST_OUT"
capture sw template show '{"extends": "base", "runtime_options": {"audit_max_bytes": "8GiB"}}'
assert_match "show an inline template: the size is normalised" 'audit_max_bytes: 8589934592 +# from inline' "$LAST_OUT"

for id in $(sw ls --ids); do sw rm "$id" >/dev/null 2>&1; done
assert_no_leftovers "after templates"
finish
