#!/usr/bin/env bash
# Two builds of the analyzer on the same captures, runs alternated (A, B, A, B, ...) so that a
# shared machine's load falls on both alike. Prints a Markdown table per capture and thread
# count: median wall time and user+system CPU of each build, the ratios B / A, and the largest
# peak RSS. Times are read to the millisecond (bash's `time`): GNU time's hundredths were 3–5%
# of a 0.2–0.3 s run, as large as the changes being compared.
#
#     benches/ab.sh OLD_BINARY NEW_BINARY CAPTURE...
#
# A CAPTURE of several files joined by `+` (`a.pcap+b.pcap`) is one row whose files are given
# together, e.g. with ARGS="--fleet" for a fleet of capture points.
#
# Environment: RUNS (runs of each build per row, default 5), JOBS (default "1 2"), ARGS (more
# arguments for both builds, e.g. "--tls-keylog FILE"). Needs /usr/bin/time (package `time`).
# Both builds must write the same report: the script compares their outputs once per row and
# says so when they differ.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ $# -lt 3 ]]; then
    echo "usage: $0 OLD_BINARY NEW_BINARY CAPTURE..." >&2
    exit 2
fi
A=$1 B=$2
shift 2
RUNS=${RUNS:-5}
JOBS=${JOBS:-"1 2"}
read -r -a EXTRA <<<"${ARGS:-}"
# shellcheck source=benches/timing.sh
source "$HERE/timing.sh"

echo "| capture | threads | A wall s | B wall s | B / A | A CPU s | B CPU s | B / A | A RSS MiB | B RSS MiB | same report |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for cap in "$@"; do
    IFS=+ read -r -a files <<<"$cap"
    name=$(for f in "${files[@]}"; do basename "$f"; done | paste -sd+)
    for j in $JOBS; do
        : >"$TMP/a" && : >"$TMP/b"
        for ((i = 0; i < RUNS; i++)); do
            for side in a b; do
                bin=$A
                [[ $side == b ]] && bin=$B
                # Read again just before the run: a kernel that reclaims cold pages (DAMON)
                # drops much of a large capture from the page cache within seconds.
                cat -- "${files[@]}" >/dev/null
                # Exit status 1 (findings) and 3 (traffic not read) are reports too.
                # GNU time gives the peak RSS; the shell's `time` around it, the clocks.
                status=0
                {
                    time /usr/bin/time -f "%M" -o "$TMP/t" "$bin" -q "-j$j" "${EXTRA[@]}" \
                        "${files[@]}" >"$TMP/$side.out" 2>"$TMP/$side.err"
                } 2>"$TMP/clock" || status=$?
                if [[ $status != 0 && $status != 1 && $status != 3 ]]; then
                    echo "$bin failed on $cap (exit status $status)" >&2
                    cat "$TMP/$side.err" >&2
                    exit 1
                fi
                m=$(grep -v '^Command exited' "$TMP/t" | tail -1)
                read -r w u s <"$TMP/clock"
                echo "$w $(awk -v u="$u" -v s="$s" 'BEGIN {print u + s}') $m" >>"$TMP/$side"
            done
        done
        same=yes
        cmp -s "$TMP/a.out" "$TMP/b.out" || same=NO
        wa=$(cut -d' ' -f1 "$TMP/a" | median)
        wb=$(cut -d' ' -f1 "$TMP/b" | median)
        ca=$(cut -d' ' -f2 "$TMP/a" | median)
        cb=$(cut -d' ' -f2 "$TMP/b" | median)
        ra=$(cut -d' ' -f3 "$TMP/a" | sort -n | tail -1)
        rb=$(cut -d' ' -f3 "$TMP/b" | sort -n | tail -1)
        wratio=$(awk -v a="$wa" -v b="$wb" 'BEGIN {printf "%.3f", b / a}')
        cratio=$(awk -v a="$ca" -v b="$cb" 'BEGIN {printf "%.3f", b / a}')
        echo "| $name | -j$j | $wa | $wb | $wratio | $ca | $cb | $cratio | $((ra / 1024)) | $((rb / 1024)) | $same |"
    done
done
