#!/usr/bin/env bash
# Two builds of the analyzer on the same captures, counted rather than timed: the instructions
# each thread executes, under callgrind. The counts do not depend on what else the machine is
# doing, so a change of a few percent shows where wall times on a shared machine scatter by
# more than that. Prints a Markdown table per capture and thread count: each thread's
# instructions for both builds and the ratio B / A, then the whole run's.
#
#     benches/instructions.sh OLD_BINARY NEW_BINARY CAPTURE...
#
# Environment: JOBS (default "2"), ARGS (more arguments for both builds). Needs valgrind.
# Callgrind runs a program some 50 times slower: captures of 16 to 64 MiB are the right size
# (`gen-capture --size 32MiB`). Threads are named by the order the analyzer starts them: with
# `-j1` one thread does everything; with `-jN` the reader (the main thread), then the session
# stage, then the N workers; the thread that answers signals starts second, and idles. Both
# builds must write the same report: the script says when they differ.
#
# Same build against itself: the reader's and the workers' counts agree within 0.1%; the session
# stage's within about 1.5%, as how the workers' events are handed over in time varies.
# Instructions are not time: a change that saves instructions and adds cache misses can still
# be slower. Confirm with `benches/ab.sh` where the machine allows.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ $# -lt 3 ]]; then
    echo "usage: $0 OLD_BINARY NEW_BINARY CAPTURE..." >&2
    exit 2
fi
command -v valgrind >/dev/null || {
    echo "$0: needs valgrind (Debian package valgrind)" >&2
    exit 2
}
A=$1 B=$2
shift 2
JOBS=${JOBS:-"2"}
read -r -a EXTRA <<<"${ARGS:-}"
# shellcheck source=benches/timing.sh
source "$HERE/timing.sh"

# Instructions of each thread of one run, one line each, in the order the threads started.
count() {
    local bin=$1 cap=$2 j=$3 side=$4 status=0
    valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$TMP/$side.cg" \
        "$bin" -q "-j$j" "${EXTRA[@]}" "$cap" >"$TMP/$side.out" 2>"$TMP/$side.err" || status=$?
    # Exit status 1 (findings) and 3 (traffic not read) are reports too.
    if [[ $status != 0 && $status != 1 && $status != 3 ]]; then
        echo "$bin failed on $cap (exit status $status)" >&2
        cat "$TMP/$side.err" >&2
        exit 1
    fi
    for f in "$TMP/$side.cg"-*; do
        grep -m1 '^summary:' "$f" | cut -d' ' -f2
    done
    rm -f "$TMP/$side.cg"*
}

# The main thread first, then the one that answers signals (started before anything is read),
# then, with -j2 and more, the session stage and the workers.
name() {
    local i=$1 j=$2
    if [[ $i == 0 ]]; then
        [[ $j == 1 ]] && echo "all" || echo "reader"
    elif [[ $i == 1 ]]; then
        echo "signals"
    elif [[ $i == 2 ]]; then
        echo "sessions"
    else
        echo "worker $((i - 3))"
    fi
}

echo "| capture | threads | thread | A instructions | B instructions | B / A |"
echo "|---|---|---|---|---|---|"
for cap in "$@"; do
    for j in $JOBS; do
        mapfile -t a < <(count "$A" "$cap" "$j" a)
        mapfile -t b < <(count "$B" "$cap" "$j" b)
        same=""
        cmp -s "$TMP/a.out" "$TMP/b.out" || same=" (reports differ)"
        ta=0 tb=0
        for i in "${!a[@]}"; do
            ia=${a[$i]} ib=${b[$i]:-0}
            ta=$((ta + ia)) tb=$((tb + ib))
            echo "| $(basename "$cap") | -j$j | $(name "$i" "$j") | $ia | $ib | $(awk -v a="$ia" -v b="$ib" 'BEGIN {printf "%.3f", b / a}') |"
        done
        echo "| $(basename "$cap") | -j$j | **run**$same | $ta | $tb | $(awk -v a="$ta" -v b="$tb" 'BEGIN {printf "%.3f", b / a}') |"
    done
done
