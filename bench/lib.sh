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
