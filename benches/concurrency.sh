#!/usr/bin/env bash
# The same traffic with more or fewer sessions open at once. `gen-capture --sessions N` writes
# a mix's traffic with N sessions interleaved (the same bytes, about the same frames and
# events): what changes is how many connections' and streams' state a run touches in turn.
# Prints a Markdown table: per N, the capture's frames, -j1 and -j2 wall and CPU (medians),
# -j2 GB/s, and each -j2 time against the fewest sessions'.
#
#     benches/concurrency.sh
#
# Environment: OUT (scratch dir, default benches/out, git-ignored), MIX (default tiny), SIZE
# (default 256MiB), OPEN (sessions open at once, default "16 64 256 1024"), RUNS (runs per
# measurement, default 5; -j1 and -j2 alternated).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$(dirname "$0")/.."

OUT=${OUT:-benches/out}
MIX=${MIX:-tiny}
SIZE=${SIZE:-256MiB}
OPEN=${OPEN:-"16 64 256 1024"}
RUNS=${RUNS:-5}
mkdir -p "$OUT"

cargo build --release --quiet --bin mcp-resume-audit --example gen-capture
BIN=target/release/mcp-resume-audit
GEN=target/release/examples/gen-capture
# shellcheck source=benches/timing.sh
source "$HERE/timing.sh"

echo "| sessions open | frames | -j1 wall s | -j1 CPU s | -j2 wall s | -j2 CPU s | -j2 GB/s | -j2 / fewest |"
echo "|---|---|---|---|---|---|---|---|"
first=""
for n in $OPEN; do
    cap="$OUT/concurrency-$MIX-$SIZE-$n.pcap"
    # Deterministic: written again each time, for its frame count.
    "$GEN" --size "$SIZE" --seed 1 --mix "$MIX" --sessions "$n" --out "$cap" >"$TMP/gen" 2>&1
    frames=$(grep -o '[0-9]* frames' "$TMP/gen" | cut -d' ' -f1)
    bytes=$(stat -c %s "$cap")
    cat "$cap" >/dev/null
    : >"$TMP/1" && : >"$TMP/2"
    for ((i = 0; i < RUNS; i++)); do
        for j in 1 2; do
            set +e
            { time "$BIN" -q -j"$j" -o /dev/null "$cap" 2>"$TMP/err"; } 2>>"$TMP/$j"
            rc=$?
            set -e
            # Exit status 1 is a finding, which the generated traffic holds on purpose.
            if [[ $rc -gt 1 ]]; then
                cat "$TMP/err" >&2
                exit 1
            fi
        done
    done
    w1=$(awk '{print $1}' "$TMP/1" | median)
    c1=$(awk '{print $2 + $3}' "$TMP/1" | median)
    w2=$(awk '{print $1}' "$TMP/2" | median)
    c2=$(awk '{print $2 + $3}' "$TMP/2" | median)
    first=${first:-$w2}
    gbs=$(awk -v b="$bytes" -v s="$w2" 'BEGIN {printf "%.2f", b / s / 1e9}')
    ratio=$(awk -v a="$w2" -v f="$first" 'BEGIN {printf "%.2f", a / f}')
    echo "| $n | $frames | $w1 | $c1 | $w2 | $c2 | $gbs | $ratio |"
done
