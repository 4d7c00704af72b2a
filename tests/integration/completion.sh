#!/usr/bin/env bash
# Shell completion: `sandweave completion bash|zsh|fish` scripts that ask the
# binary (`__complete`) and so follow the same CLI11 tree as --help. Driven
# through bash's real completion machinery (complete -p, the registered
# function with COMP_LINE/COMP_WORDS as readline sets them), fish's own
# `complete -C`, and zsh's parser and compdef registration.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_root "runsc"
require_cmd jq
TMPDIR=/tmp sw_setup
T=$SCRATCH
unset SANDWEAVE_HOST
# The scripts call `sandweave` by the name typed: the binary under test.
mkdir -p "$T/bin"
ln -s "$SW" "$T/bin/sandweave"
export PATH="$T/bin:$PATH"

capture sw completion bash
assert_eq "completion bash exits 0" 0 "$LAST_RC"
source <(sandweave completion bash)
assert_match "bash: complete -p shows the function registered" '^complete -F _sandweave sandweave$' \
    "$(complete -p sandweave)"

# What bash's TAB offers at the end of LINE: COMP_* set as readline does
# (COMP_WORDS split at COMP_WORDBREAKS too), the function called, COMPREPLY
# printed one per line.
comp() {  # LINE
    local IFS=$' \t\n'
    COMP_LINE="$1"
    COMP_POINT=${#1}
    read -r -a COMP_WORDS <<<"$(sed 's/\([=:]\)/ \1 /g' <<<"$1")"
    [[ "$1" == *" " ]] && COMP_WORDS+=("")
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    _sandweave sandweave "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]:-}"
    printf '%s\n' "${COMPREPLY[@]}"
}
has() { grep -qxF -- "$1" <<<"$2"; }  # WORD LIST
assert_has() {  # NAME WORD LIST
    if has "$2" "$3"; then pass "$1"; else fail "$1" "no '$2' among: $(tr '\n' ' ' <<<"$3")"; fi
}
assert_hasnt() {  # NAME WORD LIST
    if has "$2" "$3"; then fail "$1" "'$2' offered: $(tr '\n' ' ' <<<"$3")"; else pass "$1"; fi
}

# --- verbs and flags: the same tree as --help ------------------------------------------
TOP="$(comp 'sandweave ')"
verbs="$(sw --help | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF { sub(",$", "", $1); print $1 }')"
assert_ne "--help lists verbs" "" "$verbs"
missing=""
for v in $verbs; do has "$v" "$TOP" || missing+=" $v"; done
assert_eq "every verb of --help is completed" "" "$missing"
assert_has "aliases too (list is ls)" list "$TOP"
assert_hasnt "hidden entry points are not offered" __complete "$TOP"
assert_eq "a prefix narrows the verbs" "image" "$(comp 'sandweave ima')"
sub_verbs="$(sw image --help | sed -n '/^Subcommands:/,/^$/p' | awk 'NR > 1 && NF { sub(",$", "", $1); print $1 }')"
assert_eq "image's subverbs are those of image --help" "$(sort <<<"$sub_verbs")" "$(comp 'sandweave image ' | sort)"
FLAGS="$(comp 'sandweave create --')"
assert_has "create's own flags" --hidepid "$FLAGS"
assert_has "the global flags after a verb" --state-dir "$FLAGS"
assert_hasnt "another verb's flags are not offered" --audit-log "$FLAGS"
assert_eq "a flag's choices" "0 1 2" "$(comp 'sandweave create --hidepid ' | tr '\n' ' ' | sed 's/ $//')"
assert_eq "choices after --flag= (only the value replaces)" "memory" "$(comp 'sandweave snapshot create --kind=m')"
assert_eq "the completion verb's shells" "bash fish zsh" "$(comp 'sandweave completion ' | sort | tr '\n' ' ' | sed 's/ $//')"
assert_eq "nothing after run's --: the command is the guest's" "" "$(comp 'sandweave run x -- l')"

# --- values from the connection ---------------------------------------------------------
TEMPLATES="$(comp 'sandweave create --template ')"
assert_has "templates: base" base "$TEMPLATES"
assert_has "templates: coding" coding "$TEMPLATES"
ID="$(sw create --name compl-box)" || fatal "a sandbox is created" "$ID"
assert_has "sandbox names for inspect" compl-box "$(comp 'sandweave inspect compl')"
assert_has "sandbox ids for inspect" "$ID" "$(comp 'sandweave inspect sw-')"
assert_has "sandbox names for run (an untyped id)" compl-box "$(comp 'sandweave run ')"
assert_has "every further word of rm is one more sandbox" compl-box "$(comp "sandweave rm $ID ")"
assert_has "sandboxes for audit export's first word" compl-box "$(comp 'sandweave audit export ')"
assert_has "images: the one built for the sandbox" base "$(comp 'sandweave image rm ')"
assert_eq "image build: the built-in recipes" "base coding desktop" \
    "$(comp 'sandweave image build ' | sort | tr '\n' ' ' | sed 's/ $//')"
SNAP="$(sw snapshot create "$ID" --kind fs --name compl-snap)" || fail "a snapshot is made" "$SNAP"
assert_has "snapshots for snapshot rm" compl-snap "$(comp 'sandweave snapshot rm ')"
assert_has "snapshots for --from-snapshot" compl-snap "$(comp 'sandweave create --from-snapshot ')"
sw pool create compl-pool --size 0 >/dev/null || fail "an empty pool is made"
assert_has "pools for pool acquire" compl-pool "$(comp 'sandweave pool acquire ')"
mkdir -p "$T/other"
assert_eq "--state-dir on the line is honoured" "" "$(comp "sandweave --state-dir $T/other inspect ")"
: >"$T/zz-log.jsonl"
assert_has "a FILE argument completes files" "$T/zz-log.jsonl" "$(comp "sandweave audit export compl-box $T/zz")"
mkdir -p "$T/zz-dir"
assert_has "--state-dir completes directories" "$T/zz-dir" "$(comp "sandweave --state-dir $T/zz")"
assert_hasnt "--state-dir offers no files" "$T/zz-log.jsonl" "$(comp "sandweave --state-dir $T/zz")"
sw pool rm compl-pool >/dev/null
sw snapshot rm compl-snap >/dev/null
sw rm "$ID" >/dev/null

# --- zsh and fish ---------------------------------------------------------------------
if command -v zsh >/dev/null; then
    sandweave completion zsh >"$T/_sandweave"
    assert_true "zsh parses its script (zsh -n)" zsh -n "$T/_sandweave"
    assert_eq "zsh: the script registers _sandweave for sandweave" _sandweave \
        "$(zsh -fc "autoload -U compinit && compinit -u -d $T/zcompdump && source $T/_sandweave && print \${_comps[sandweave]}" 2>&1)"
else
    skipped "zsh is not installed (apt-get install zsh)"
fi
if command -v fish >/dev/null; then
    sandweave completion fish >"$T/sandweave.fish"
    assert_true "fish parses its script (fish -n)" fish -n "$T/sandweave.fish"
    FISH="$(HOME=$T fish -c "source $T/sandweave.fish; complete -C 'sandweave image '" 2>&1)"
    assert_match "fish: image's subverbs, with their descriptions" $'(^|\n)build\tBuild an image' "$FISH"
    FISH="$(HOME=$T fish -c "source $T/sandweave.fish; complete -C 'sandweave create --hidepid '" 2>&1)"
    assert_eq "fish: a flag's choices" "0 1 2" "$(cut -f1 <<<"$FISH" | tr '\n' ' ' | sed 's/ $//')"
else
    skipped "fish is not installed (apt-get install fish)"
fi

assert_exit "an unknown shell is refused" 2 sw completion tcsh
assert_match "... in one line naming the choices" 'bash, zsh or fish' "$LAST_ERR"
assert_eq "... in one line" 1 "$(line_count "$LAST_ERR")"
finish
