# shellcheck shell=bash
# Sourced by the bench scripts: a scratch directory removed on exit, medians, and bash's
# `time` set to print wall, user and system seconds to the millisecond.
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# The median of the numbers on standard input, one a line.
median() { sort -g | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# Wall, user and system seconds of a timed command, to the millisecond.
TIMEFORMAT='%3R %3U %3S'
