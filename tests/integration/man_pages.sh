#!/usr/bin/env bash
# Man pages for every verb, in step with --help: each verb of `sandweave --help`
# has a page under man/ (sandweave-VERB.1, or a page whose NAME lists it, as
# sandweave-ps.1 does for logs, kill and wait); the page names each of the
# verb's subverbs and every long flag that `VERB [SUB] --help` lists; sandweave(1)
# lists every verb; and each page renders without a groff warning.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
require_cmd man
TMPDIR=/tmp sw_setup
MAN="$SANDWEAVE_SOURCE_DIR/man"

section() {  # HELP-TEXT TITLE: the first words of the lines of one --help section
    sed -n "/^$2:/,/^\$/p" <<<"$1" | awk 'NR > 1 && NF { sub(",$", "", $1); print $1 }'
}
long_flags() {  # HELP-TEXT: the long flags its Options sections list
    sed -n '/^Options:/,/^Subcommands:/p; /^[A-Z][A-Za-z ]*:$/,/^$/p' <<<"$1" |
        grep -E '^  +-' | grep -oE -- '(^| |,)--[a-z][a-z0-9-]*' | sed 's/^[ ,]*//' |
        grep -vx -- '--help' | sort -u
}
page_of() {  # VERB: the page documenting it
    if [[ -f "$MAN/sandweave-$1.1" ]]; then
        echo "$MAN/sandweave-$1.1"
        return
    fi
    local p
    for p in "$MAN"/sandweave-*.1; do
        if sed -n '/^\.SH NAME/{n;p}' "$p" | grep -qE "(^|[ ,])sandweave\\\\-$1([ ,]|$)"; then
            echo "$p"
            return
        fi
    done
}
mentions_flag() {  # PAGE FLAG: troff writes --x as \-\-x
    grep -qF -- "$(sed 's/-/\\-/g' <<<"$2")" "$1"
}

TOP="$(sw --help)"
VERBS="$(section "$TOP" Subcommands)"
assert_ne "--help lists verbs" "" "$VERBS"
missing_pages="" missing_flags="" missing_subs="" unlisted=""
for v in $VERBS; do
    page="$(page_of "$v")"
    if [[ -z "$page" ]]; then
        missing_pages+=" $v"
        continue
    fi
    base="$(basename "$page" .1)"
    grep -qF -- "${base/-/\\-} (1)" "$MAN/sandweave.1" || unlisted+=" $v"
    help="$(sw "$v" --help)"
    for f in $(long_flags "$help"); do mentions_flag "$page" "$f" || missing_flags+=" $v:$f"; done
    for s in $(section "$help" Subcommands); do
        grep -qw -- "$s" "$page" || missing_subs+=" $v:$s"
        for f in $(long_flags "$(sw "$v" "$s" --help)"); do
            mentions_flag "$page" "$f" || missing_flags+=" $v $s:$f"
        done
    done
done
assert_eq "every verb has a man page" "" "$missing_pages"
assert_eq "sandweave(1) refers to every verb's page" "" "$unlisted"
assert_eq "each page names its verb's subverbs" "" "$missing_subs"
assert_eq "each page names every long flag of its verb's --help" "" "$missing_flags"
missing_global=""
for f in $(long_flags "$TOP"); do mentions_flag "$MAN/sandweave.1" "$f" || missing_global+=" $f"; done
assert_eq "sandweave(1) names every global flag" "" "$missing_global"

warnings=""
for p in "$MAN"/*.1; do
    w="$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null)"
    [[ -z "$w" ]] || warnings+="$(basename "$p"): $w"$'\n'
done
assert_eq "every page renders without a warning" "" "$warnings"
finish
