# shellcheck shell=bash
# What the bench scripts share. Source it: source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# The median of the numbers on stdin, one or more to a line (0 when there are
# none); for an even count, the mean of the middle two.
median() {
  tr -s ' \t' '\n\n' | sed '/^$/d' | sort -g |
    awk '{a[NR] = $1} END {if (NR == 0) print 0; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}

# A / B to two decimals, "n/a" when B is not positive.
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "n/a"}'; }

# For a Weave bench's EXIT trap: removes every sandbox left on the
# one-machine cluster's workers under WORK (and in the state directories
# EXTRA names, space-separated), stops the cluster and its controller with
# the weave-controller.sh command line CTL..., and deletes WORK.
weave_bench_cleanup() {  # WORK SW EXTRA CTL...
  local work="$1" sw="$2" extra="$3" d
  shift 3
  # shellcheck disable=SC2086  # EXTRA: state directories, split on purpose
  for d in "$work"/cluster/workers/*/state $extra; do
    [[ -d "$d" ]] && env -u SANDWEAVE_HOST "$sw" --state-dir "$d" rm -f --all >/dev/null 2>&1 || true
  done
  env -u SANDWEAVE_HOST "$@" stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
