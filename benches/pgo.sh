#!/usr/bin/env bash
# A profile-guided build of the analyzer: an instrumented build reads a training set (captures
# of every gen-capture mix and wire, three HARs, and the committed fixtures), LLVM merges the
# counts it wrote, and the release build is made again with them, so that the compiler lays
# out and inlines the code for the paths real work takes. The binary it prints takes 7–19%
# less CPU time per capture than the plain release build on all but one row of the benchmark
# matrix (benches/RESULTS.md, round (42)), and writes the same reports:
#
#     benches/pgo.sh                      # prints target/pgo/use/release/mcp-resume-audit
#     BIN=target/pgo/use/release/mcp-resume-audit benches/compare.sh
#
# Environment: OUT (scratch dir, default target/pgo), TRAIN_SIZE (size of each generated
# training capture, default 24MiB), REFERENCE (a binary of the same source, e.g.
# target/debug/mcp-resume-audit: every training input is read by both, and any difference in
# report, stderr or exit status fails the script). Needs llvm-profdata of rustc's own LLVM
# version (`rustup component add llvm-tools`, done here when rustup is there) and python3 for
# the HARs. The training captures use another seed than benches/compare.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-target/pgo}
TRAIN_SIZE=${TRAIN_SIZE:-24MiB}
SEED=7
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

sysroot=$(rustc --print sysroot)
host=$(rustc -vV | sed -n 's/^host: //p')
PROFDATA=$sysroot/lib/rustlib/$host/bin/llvm-profdata
if [[ ! -x $PROFDATA ]] && command -v rustup >/dev/null 2>&1; then
    # Older toolchains name it llvm-tools-preview.
    rustup component add llvm-tools >&2 || rustup component add llvm-tools-preview >&2 || true
fi
if [[ ! -x $PROFDATA ]]; then
    echo "pgo.sh: $PROFDATA not found: it comes with rustc (rustup component add llvm-tools)" >&2
    exit 2
fi

# The instrumented build, in a target directory of its own so that the plain release build
# stays as it is; its counts go to one file per process.
rm -rf "$OUT/profraw"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$OUT/profraw" \
    cargo build --release --quiet --bin mcp-resume-audit --target-dir "$OUT/gen"
cargo build --release --quiet --example gen-capture
GEN=${CARGO_TARGET_DIR:-target}/release/examples/gen-capture

# The training set: made again only when missing or made by another generator or size.
TRAIN=$OUT/train
stamp="$(cat examples/gen-capture/*.rs synth/src/*.rs fixtures/har/gen_*.py |
    sha256sum | cut -c1-16) $TRAIN_SIZE $SEED"
if [[ $(cat "$TRAIN/stamp" 2>/dev/null) != "$stamp" ]]; then
    rm -rf "$TRAIN"
    mkdir -p "$TRAIN"
    for mix in default tiny large sessions storm keep-alive long; do
        "$GEN" --size "$TRAIN_SIZE" --seed "$SEED" --mix "$mix" --out "$TRAIN/$mix.pcap" >/dev/null
    done
    # One capture per wire, each with its key log next to it (name.keys).
    "$GEN" --size "$TRAIN_SIZE" --seed "$SEED" --tls 1.3 --keylog "$TRAIN/tls13.keys" \
        --out "$TRAIN/tls13.pcap" >/dev/null
    "$GEN" --size "$TRAIN_SIZE" --seed "$SEED" --tls 1.2 --keylog "$TRAIN/tls12.keys" \
        --out "$TRAIN/tls12.pcap" >/dev/null
    "$GEN" --size "$TRAIN_SIZE" --seed "$SEED" --http2 --out "$TRAIN/h2c.pcap" >/dev/null
    "$GEN" --size "$TRAIN_SIZE" --seed "$SEED" --tls 1.3 --http2 \
        --keylog "$TRAIN/tls13-h2.keys" --out "$TRAIN/tls13-h2.pcap" >/dev/null
    "$GEN" --size "$TRAIN_SIZE" --seed "$SEED" --mix sessions --tls 1.3 \
        --keylog "$TRAIN/sessions-tls13.keys" --out "$TRAIN/sessions-tls13.pcap" >/dev/null
    "$GEN" --size "$TRAIN_SIZE" --seed "$SEED" --mix large --mss 65000 \
        --out "$TRAIN/large-64k.pcap" >/dev/null
    # HARs of large and of small event-stream bodies (MiB, then KiB per entry), and of a
    # browser's entries.
    python3 fixtures/har/gen_big_har.py "$TRAIN/large-entries.har" 16 1024 >/dev/null
    python3 fixtures/har/gen_big_har.py "$TRAIN/small-entries.har" 16 4 >/dev/null
    python3 fixtures/har/gen_browser_har.py "$TRAIN/browser-entries.har" 16 >/dev/null
    echo "$stamp" >"$TRAIN/stamp"
fi

# Every input, generated and committed, with its key log when it has one.
inputs=()
while IFS= read -r -d '' f; do
    inputs+=("$f")
done < <(find "$TRAIN" fixtures -type f \( -name '*.pcap' -o -name '*.pcapng' -o -name '*.har' \
    -o -name '*.zhar' \) -print0 | sort -z)

run() { # binary threads input out-prefix: writes the report, the messages and the exit status
    local bin=$1 jobs=$2 f=$3 out=$4 keys=()
    [[ -f ${f%.*}.keys ]] && keys=(--tls-keylog "${f%.*}.keys")
    local status=0
    "$bin" "-j$jobs" "${keys[@]}" "$f" >"$out.out" 2>"$out.err" || status=$?
    echo "$status" >"$out.status"
    # 0: no findings, 1: findings, 2: an input not read, 3: traffic not read. Anything else
    # (a signal) is a failure of the build.
    if ((status > 3)); then
        echo "pgo.sh: $bin -j$jobs $f: exit status $status" >&2
        return 1
    fi
}

for jobs in 1 2; do
    for f in "${inputs[@]}"; do
        run "$OUT/gen/release/mcp-resume-audit" "$jobs" "$f" "$OUT/scratch"
    done
done

rm -f "$OUT"/scratch.*

# Merged under a name that follows the counts, so that a new profile makes cargo build again.
rm -f "$OUT"/merged-*.profdata
"$PROFDATA" merge -o "$OUT/merged.profdata" "$OUT/profraw"
sum=$(sha256sum "$OUT/merged.profdata" | cut -c1-16)
mv "$OUT/merged.profdata" "$OUT/merged-$sum.profdata"
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$OUT/merged-$sum.profdata" \
    cargo build --release --quiet --bin mcp-resume-audit --target-dir "$OUT/use"
BUILT=$OUT/use/release/mcp-resume-audit

if [[ -n ${REFERENCE:-} ]]; then
    differ=0
    for f in "${inputs[@]}"; do
        run "$REFERENCE" 2 "$f" "$OUT/reference"
        run "$BUILT" 2 "$f" "$OUT/built"
        for part in out err status; do
            if ! cmp -s "$OUT/reference.$part" "$OUT/built.$part"; then
                echo "pgo.sh: $f: the profile-guided build's $part differs from $REFERENCE's" >&2
                differ=1
            fi
        done
    done
    rm -f "$OUT"/reference.* "$OUT"/built.*
    if ((differ)); then
        exit 1
    fi
    echo "pgo.sh: the same reports as $REFERENCE on ${#inputs[@]} inputs" >&2
fi
echo "$BUILT"
