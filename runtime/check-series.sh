#!/usr/bin/env bash
# Checks that runtime/ is one patch series: `series` lists every *.patch here
# exactly once, each patch opens with a DEP-3 header (Description, Author,
# Forwarded, Last-Update), and README.md's table and its per-patch sections
# name the series' patches in series order. Exits non-zero naming what drifted.
set -euo pipefail
dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fail=0
bad() { printf 'check-series: %s\n' "$*" >&2; fail=1; }

mapfile -t series < <("$dir/build-runsc.sh" --list)
want="$(printf '%s\n' "${series[@]}")"

[[ "$(sort <<<"$want" | uniq -d)" == "" ]] || bad "series lists a patch twice: $(sort <<<"$want" | uniq -d | tr '\n' ' ')"
for f in "$dir"/*.patch; do
  grep -qxF "$(basename "$f")" <<<"$want" || bad "$(basename "$f") is not in series"
done

for p in "${series[@]}"; do
  # The header: everything before the first diff line.
  header="$(sed -n '/^\(diff \|--- \)/q;p' "$dir/$p")"
  for field in Description Author Forwarded Last-Update; do
    grep -q "^$field: ." <<<"$header" || bad "$p: no DEP-3 $field: field in its header"
  done
  forwarded="$(sed -n 's/^Forwarded: *//p' <<<"$header")"
  [[ -z "$forwarded" || "$forwarded" =~ ^(no|not-needed|https?://.+)$ ]] ||
    bad "$p: Forwarded: is '$forwarded', not no, not-needed or a URL"
done

# README's table: its rows naming a *.patch, in order.
table="$(sed -n 's/^| `\([a-z0-9._-]*\.patch\)` |.*/\1/p' "$dir/README.md")"
[[ "$table" == "$want" ]] ||
  bad "README.md's table lists $(echo $table) instead of the series: $(echo $want)"
sections="$(sed -n 's/^## \([a-z0-9._-]*\.patch\)$/\1/p' "$dir/README.md")"
[[ "$sections" == "$want" ]] ||
  bad "README.md's sections are $(echo $sections) instead of the series: $(echo $want)"

if ((fail)); then exit 1; fi
echo "check-series: ${#series[@]} patches, headers, README table and sections agree"
