#!/usr/bin/env bash
# End-to-end comparison on synthetic captures: the analyzer (-j1, -j2), `cat FILE >/dev/null`
# (the page-cache floor) and tshark, on captures of 256 MiB, 1 GiB and 2 GiB of the
# gen-capture workload, plus many small files. Prints a Markdown report with medians, GB/s,
# ratios, peak RSS and PASS/FAIL per target (benches/RESULTS.md keeps each run's figures,
# round by round):
#
#     benches/compare.sh | tee /tmp/matrix.md
#
# Then the same traffic on other wires (TLS 1.3, TLS 1.2, HTTP/2 in cleartext and under TLS),
# one capture of WIRE_SIZE each, read with its key log (`--tls-keylog`), against tshark on the
# same capture with the same keys; the workload
# matrix: one capture of MIX_SIZE per traffic mix of gen-capture (`--mix`: tiny events, large
# events, thousands of sessions, reconnect storms, keep-alive reuse, long-lived streams, a
# loaded server's 3,000 sessions open through the whole capture), each
# with -j1, -j2, cat and tshark in the same run; and HAR exports of large and small entries
# (`fixtures/har/gen_big_har.py`, with python3) and of a browser's entries
# (`fixtures/har/gen_browser_har.py`), with -j1, -j2 and cat (tshark reads no HAR).
#
# Environment: OUT (scratch dir, default benches/out, git-ignored), RUNS (runs per
# measurement, default 3), SIZES (default "256MiB 1GiB 2GiB"), FORMAT (pcap or pcapng),
# WIRES (default "plain tls1.3 tls1.2 h2c tls1.3+h2"; empty skips the section), WIRE_SIZE
# (default the first of SIZES), MIXES (default "default tiny large sessions storm keep-alive
# long loaded sessions+tls1.3 large@65000"; a mix with `+WIRE` is that mix on a wire of WIRES, read
# with its key log; with `@N`, in packets of up to N bytes of TCP payload, as a loopback capture
# or a host that coalesces received segments has them; empty skips the section), MIX_SIZE
# (default the first of SIZES),
# HARS (event-stream body KiB per entry of the HAR rows, or `browser` for entries as Chromium
# exports them, mostly headers and timings around small bodies
# (`fixtures/har/gen_browser_har.py`); default "1024 4 browser"; empty skips the section),
# HAR_MIB (size of each HAR, default 256),
# SMALL_FILES / SMALL_SIZE (default 200 files of 5MB; 0 skips them), BOUNDED_SESSION_MIB (the
# --session-memory of the bounded-memory runs, default 4), TSHARK=0 to skip tshark,
# PRIORITY=0 to measure at normal priority, BIN (the analyzer's binary, default the release
# build; e.g. the profile-guided build of benches/pgo.sh). Needs /usr/bin/time (package
# `time`) and tshark (package `tshark`).
#
# On a machine shared with other work, wall times measure the other work as much as this
# one; so by default (as root) every measured command runs in a session of its own whose
# scheduling group gets nice -20 for the few seconds it runs (`/proc/self/autogroup`), which
# gives it the CPUs as if the machine were idle. The CPU-time columns need no such help.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-benches/out}
RUNS=${RUNS:-3}
SIZES=${SIZES:-"256MiB 1GiB 2GiB"}
FORMAT=${FORMAT:-pcap}
SMALL_FILES=${SMALL_FILES:-200}
SMALL_SIZE=${SMALL_SIZE:-5MB}
TSHARK=${TSHARK:-1}
PRIORITY=${PRIORITY:-$([[ $(id -u) == 0 ]] && echo 1 || echo 0)}
SEED=1
WIRES=${WIRES-"plain tls1.3 tls1.2 h2c tls1.3+h2"}
read -r FIRST_SIZE _ <<<"$SIZES"
WIRE_SIZE=${WIRE_SIZE:-$FIRST_SIZE}
MIXES=${MIXES-"default tiny large sessions storm keep-alive long loaded sessions+tls1.3 large@65000"}
MIX_SIZE=${MIX_SIZE:-$FIRST_SIZE}
HARS=${HARS-"1024 4 browser"}
HAR_MIB=${HAR_MIB:-256}
# tshark's display filter for resume requests: header names are case-insensitive, and the
# generator writes some in lower case.
TSHARK_FILTER='http.request.line matches "(?i)^last-event-id:"'
# The same for HTTP/2 (HPACK gives header names in lower case), and the server port of
# gen-capture, where tshark is told to read h2c (prior knowledge has no port of its own).
TSHARK_H2_FILTER='http2.header.name == "last-event-id"'
GEN_PORT=8000
# --session-memory (MiB) of the bounded-memory runs.
BOUNDED_SESSION_MIB=${BOUNDED_SESSION_MIB:-4}
mkdir -p "$OUT"

cargo build --release --quiet --bin mcp-resume-audit --example gen-capture
BIN=${BIN:-target/release/mcp-resume-audit}
GEN=target/release/examples/gen-capture
TIMEFILE=$(mktemp)
WALLFILE=$(mktemp)
trap 'rm -f "$TIMEFILE" "$WALLFILE"' EXIT

# A capture is made again only when it is missing or the generator's source has changed since.
GEN_STAMP=$(cat examples/gen-capture/*.rs synth/src/*.rs | sha256sum | cut -c1-16)
capture() { # size seed path [more gen-capture arguments]
    local size=$1 seed=$2 path=$3
    shift 3
    local stamp="$GEN_STAMP $*"
    if [[ ! -s $path || $(cat "$path.stamp" 2>/dev/null) != "$stamp" ]]; then
        "$GEN" --size "$size" --seed "$seed" --format "$FORMAT" --out "$path" "$@" 2>/dev/null
        echo "$stamp" >"$path.stamp"
    fi
}

# gen-capture's arguments for a wire of WIRES.
wire_args() {
    case $1 in
    plain) ;;
    tls1.3) echo "--tls 1.3" ;;
    tls1.2) echo "--tls 1.2" ;;
    h2c) echo "--http2" ;;
    tls1.3+h2) echo "--tls 1.3 --http2" ;;
    tls1.2+h2) echo "--tls 1.2 --http2" ;;
    *)
        echo "unknown wire $1" >&2
        exit 1
        ;;
    esac
}

# Sets TSHARK_WIRE_OPTS and TSHARK_WIRE_FILTER for a wire of WIRES and its key log.
tshark_for_wire() { # wire keylog
    TSHARK_WIRE_OPTS=()
    [[ $1 == tls* ]] && TSHARK_WIRE_OPTS+=(-o "tls.keylog_file:$2")
    [[ $1 == h2c ]] && TSHARK_WIRE_OPTS+=(-d "tcp.port==$GEN_PORT,http2")
    TSHARK_WIRE_FILTER=$TSHARK_FILTER
    [[ $1 == *h2* ]] && TSHARK_WIRE_FILTER=$TSHARK_H2_FILTER
    return 0
}

# Runs a command, writing its wall time in nanoseconds to WALLFILE; with PRIORITY=1 in a
# session (and so a scheduling group) of its own at the highest priority.
timed() {
    local body='w=$1; shift; t0=$(date +%s%N); "$@"; rc=$?; t1=$(date +%s%N); echo $((t1 - t0)) >"$w"; exit $rc'
    if [[ $PRIORITY == 1 ]]; then
        setsid -w bash -c "echo -20 >/proc/self/autogroup 2>/dev/null; renice -n -20 \$\$ >/dev/null; $body" timed "$WALLFILE" "$@"
    else
        bash -c "$body" timed "$WALLFILE" "$@"
    fi
}

# Runs a command once: prints "wall_seconds peak_rss_kib cpu_seconds". Exit status 1 of the
# analyzer (findings) is success here; anything else is not.
measure() {
    local rc=0 ns rss user sys a
    # The files of the command, read once more just before it: a kernel that reclaims cold
    # pages proactively (DAMON) drops a good part of a 256 MiB capture from the page cache
    # within seconds, and the run would then read it from the disk.
    for a in "$@"; do if [[ -f $a ]]; then cat -- "$a" >/dev/null; fi; done
    timed /usr/bin/time -f "%M %U %S" -o "$TIMEFILE" "$@" >/dev/null 2>&1 || rc=$?
    if [[ $rc -ne 0 && $rc -ne 1 ]]; then
        echo "command failed ($rc): $*" >&2
        exit 1
    fi
    read -r ns <"$WALLFILE"
    # The last line: GNU time writes "Command exited with non-zero status" before it.
    read -r rss user sys < <(tail -n 1 "$TIMEFILE")
    awk -v n="$ns" -v r="$rss" -v u="$user" -v s="$sys" \
        'BEGIN { printf "%.4f %d %.2f\n", n / 1e9, r, u + s }'
}

# Median of RUNS runs of a command: prints "median_wall max_rss median_cpu".
median_of() {
    local i walls=() rsss=() cpus=()
    for ((i = 0; i < RUNS; i++)); do
        read -r w r c < <(measure "$@")
        walls+=("$w")
        rsss+=("$r")
        cpus+=("$c")
    done
    local mw mc mr
    mw=$(printf '%s\n' "${walls[@]}" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    mc=$(printf '%s\n' "${cpus[@]}" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
    mr=$(printf '%s\n' "${rsss[@]}" | sort -g | tail -1)
    echo "$mw $mr $mc"
}

calc() { awk "BEGIN { printf \"%.2f\", $1 }"; }
verdict() { if awk "BEGIN { exit !($1) }"; then echo PASS; else echo FAIL; fi; }
bytes_of() { stat -c %s "$1"; }
# Seconds (MB/s) as shown in the table.
gbps() { calc "$1 / $2 / 1e9"; }

model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "# End-to-end benchmark"
echo
echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "- machine: $(nproc) CPUs, ${model}, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM, kernel $(uname -r)"
echo "- load average at start: $(cut -d' ' -f1-3 /proc/loadavg) (a shared machine: wall times include waiting for a CPU; the CPU column does not)"
echo "- analyzer: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (modified)'), \`$BIN\`; workload: \`gen-capture --format $FORMAT --seed $SEED\`"
echo "- each figure: median of $RUNS runs (peak RSS: the largest), page-cached (its files read just before each run); priority boost: $([[ $PRIORITY == 1 ]] && echo 'on (autogroup nice -20)' || echo off)"
echo

sizes=()
files=()
for s in $SIZES; do
    f="$OUT/bench-$s.$FORMAT"
    capture "$s" "$SEED" "$f"
    cat "$f" >/dev/null
    sizes+=("$s")
    files+=("$f")
done

declare -A W1 W2 R1 R2 C1 C2 WC BYTES RB
for i in "${!files[@]}"; do
    f=${files[$i]}
    BYTES[$i]=$(bytes_of "$f")
    read -r WC[$i] _ _ < <(median_of cat "$f")
    read -r W1[$i] R1[$i] C1[$i] < <(median_of "$BIN" -q -j1 "$f")
    read -r W2[$i] R2[$i] C2[$i] < <(median_of "$BIN" -q -j2 "$f")
    # Peak memory with a small session-stage budget: what is left grows with nothing but
    # what is open at once.
    read -r _ RB[$i] _ < <(measure "$BIN" -q -j2 --session-memory "$BOUNDED_SESSION_MIB" "$f")
done

# tshark runs once, on the smallest capture; its time is scaled by size for the others.
tshark_per_byte=""
tshark_note="not run"
if [[ $TSHARK == 1 ]] && command -v tshark >/dev/null; then
    read -r tw tr _ < <(measure tshark -r "${files[0]}" -Y "$TSHARK_FILTER" -T fields -e frame.number)
    tshark_per_byte=$(awk -v t="$tw" -v b="${BYTES[0]}" 'BEGIN { printf "%.6e", t / b }')
    tshark_note="run once on ${sizes[0]}: $(calc "$tw") s, peak RSS $((tr / 1024)) MiB, $(calc "${BYTES[0]} / $tw / 1e6") MB/s; larger sizes extrapolated linearly"
fi

echo "## Single captures"
echo
echo "| capture | bytes | cat s | cat GB/s | -j1 s | -j1 GB/s | -j1 CPU s | -j1 RSS MiB | -j2 s | -j2 GB/s | -j2 CPU s | -j2 RSS MiB | -j2 / cat | tshark s | tshark / -j2 | -j1 / -j2 |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for i in "${!files[@]}"; do
    b=${BYTES[$i]}
    if [[ -n $tshark_per_byte ]]; then
        ts=$(calc "$tshark_per_byte * $b")
        tsr=$(calc "$ts / ${W2[$i]}")
        [[ $i -gt 0 ]] && ts="~$ts"
    else
        ts="-"
        tsr="-"
    fi
    echo "| ${sizes[$i]} | $b | ${WC[$i]} | $(gbps "$b" "${WC[$i]}") | ${W1[$i]} | $(gbps "$b" "${W1[$i]}") | ${C1[$i]} | $((R1[$i] / 1024)) | ${W2[$i]} | $(gbps "$b" "${W2[$i]}") | ${C2[$i]} | $((R2[$i] / 1024)) | $(calc "${W2[$i]} / ${WC[$i]}") | $ts | $tsr | $(calc "${W1[$i]} / ${W2[$i]}") |"
done
echo
echo "tshark: \`tshark -r FILE -Y '$TSHARK_FILTER' -T fields -e frame.number\`, $tshark_note."
echo

# Many small files: one process over all of them, -j1 against -j2 (none: the section and its
# target are skipped).
if ((SMALL_FILES > 0)); then
    small_dir="$OUT/small-$SMALL_SIZE"
    mkdir -p "$small_dir"
    small=()
    for ((k = 1; k <= SMALL_FILES; k++)); do
        f="$small_dir/s$k.$FORMAT"
        capture "$SMALL_SIZE" "$((1000 + k))" "$f"
        small+=("$f")
    done
    cat "${small[@]}" >/dev/null
    small_bytes=$(cat "${small[@]}" | wc -c)
    read -r sw1 sr1 sc1 < <(median_of "$BIN" -q -j1 "${small[@]}")
    read -r sw2 sr2 sc2 < <(median_of "$BIN" -q -j2 "${small[@]}")
    echo "## Many small files ($SMALL_FILES files of $SMALL_SIZE, $small_bytes bytes, one process)"
    echo
    echo "| threads | s | GB/s | CPU s | RSS MiB |"
    echo "|---|---|---|---|---|"
    echo "| -j1 | $sw1 | $(gbps "$small_bytes" "$sw1") | $sc1 | $((sr1 / 1024)) |"
    echo "| -j2 | $sw2 | $(gbps "$small_bytes" "$sw2") | $sc2 | $((sr2 / 1024)) |"
    echo
    echo "Speed-up -j1 → -j2: $(calc "$sw1 / $sw2")×"
    echo
fi

# Targets.
mid=$((${#files[@]} / 2))
last=$((${#files[@]} - 1))
echo "## Targets"
echo
echo "| target | measured | result |"
echo "|---|---|---|"
bmid=${BYTES[$mid]}
echo "| ≥ 1 GB/s end to end (-j2, ${sizes[$mid]}) | $(gbps "$bmid" "${W2[$mid]}") GB/s | $(verdict "$bmid / ${W2[$mid]} >= 1e9") |"
echo "| within 3× of cat (-j2, ${sizes[$mid]}) | $(calc "${W2[$mid]} / ${WC[$mid]}")× | $(verdict "${W2[$mid]} <= 3 * ${WC[$mid]}") |"
if [[ -n $tshark_per_byte ]]; then
    ratio=$(calc "$tshark_per_byte * $bmid / ${W2[$mid]}")
    echo "| ≥ 50× faster than tshark (${sizes[$mid]}, tshark extrapolated) | ${ratio}× | $(verdict "$ratio >= 50") |"
else
    echo "| ≥ 50× faster than tshark | not measured | - |"
fi
maxrss=0
minrss=999999999
rss_list=""
for i in "${!files[@]}"; do
    for r in ${R1[$i]} ${R2[$i]}; do
        ((r > maxrss)) && maxrss=$r
    done
    ((R2[$i] < minrss)) && minrss=${R2[$i]}
    rss_list+="${sizes[$i]}: $((R1[$i] / 1024))/$((R2[$i] / 1024)) MiB; "
done
echo "| peak RSS ≤ 128 MiB (-j1/-j2) | ${rss_list% } | $(verdict "$maxrss <= 131072") |"
echo "| RSS independent of size (-j2, largest ≤ smallest + 16 MiB) | $((R2[0] / 1024)) → $((R2[$last] / 1024)) MiB | $(verdict "${R2[$last]} <= ${R2[0]} + 16384") |"
bounded_list=""
for i in "${!files[@]}"; do bounded_list+="${sizes[$i]}: $((RB[$i] / 1024)) MiB; "; done
echo "| the same with \`--session-memory $BOUNDED_SESSION_MIB\` (-j2, largest ≤ smallest + 16 MiB) | ${bounded_list% } | $(verdict "${RB[$last]} <= ${RB[0]} + 16384") |"
# Linear: seconds per byte of -j1 (one thread, so the least disturbed by other work) for the
# largest capture within 20% of the smallest's.
per0=$(awk -v t="${W1[0]}" -v b="${BYTES[0]}" 'BEGIN { print t / b }')
perN=$(awk -v t="${W1[$last]}" -v b="${BYTES[$last]}" 'BEGIN { print t / b }')
walls=""
for i in "${!files[@]}"; do walls+="${sizes[$i]}: $(calc "${W1[$i]} / ${BYTES[$i]} * 1e9") ns/B; "; done
echo "| time linear in size (-j1 wall per byte, largest within 20% of smallest) | ${walls% } | $(verdict "$perN <= 1.2 * $per0") |"
echo "| close to 2× from -j1 to -j2 (${sizes[$mid]}, ≥ 1.8×) | $(calc "${W1[$mid]} / ${W2[$mid]}")× | $(verdict "${W1[$mid]} >= 1.8 * ${W2[$mid]}") |"
if ((SMALL_FILES > 0)); then
    echo "| close to 2× from -j1 to -j2 ($SMALL_FILES small files, ≥ 1.8×) | $(calc "$sw1 / $sw2")× | $(verdict "$sw1 >= 1.8 * $sw2") |"
fi

# The same traffic on other wires.
if [[ -n $WIRES ]]; then
    echo
    echo "## Wires ($WIRE_SIZE of the same sessions, each read with its key log)"
    echo
    echo "| wire | bytes | -j1 s | -j1 GB/s | -j1 CPU s | -j2 s | -j2 GB/s | -j2 CPU s | -j2 RSS MiB | -j2 / plain | CPU / plain (-j1) | tshark s | tshark / -j2 | resumes (tshark) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    plain_w2=""
    plain_c1=""
    for wire in $WIRES; do
        f="$OUT/bench-$WIRE_SIZE-$wire.$FORMAT"
        # shellcheck disable=SC2046 # wire_args gives separate words on purpose
        capture "$WIRE_SIZE" "$SEED" "$f" --keylog "$f.keys" $(wire_args "$wire")
        cat "$f" >/dev/null
        b=$(bytes_of "$f")
        tshark_for_wire "$wire" "$f.keys"
        read -r ww1 _ wc1 < <(median_of "$BIN" -q -j1 --tls-keylog "$f.keys" "$f")
        read -r ww2 wr2 wc2 < <(median_of "$BIN" -q -j2 --tls-keylog "$f.keys" "$f")
        [[ $wire == plain ]] && plain_w2=$ww2 && plain_c1=$wc1
        ratio=$([[ -n $plain_w2 ]] && calc "$ww2 / $plain_w2" || echo -)
        cratio=$(awk -v a="$wc1" -v b="${plain_c1:-0}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
        # The baseline: tshark on the same capture with the same keys, one run, its display
        # filter finding every resume request of the wire.
        wts="-"
        wtr="-"
        wtn="-"
        if [[ $TSHARK == 1 ]] && command -v tshark >/dev/null; then
            # Its output kept, to count what it found.
            read -r wt _ _ < <(measure bash -c 'out=$1; shift; exec tshark "$@" >"$out"' tshark "$f.tshark" \
                "${TSHARK_WIRE_OPTS[@]}" -r "$f" -Y "$TSHARK_WIRE_FILTER" -T fields -e frame.number)
            wts=$(calc "$wt")
            wtr=$(calc "$wt / $ww2")
            wtn=$(wc -l <"$f.tshark")
        fi
        echo "| $wire | $b | $ww1 | $(gbps "$b" "$ww1") | $wc1 | $ww2 | $(gbps "$b" "$ww2") | $wc2 | $((wr2 / 1024)) | $ratio | $cratio | $wts | $wtr | $wtn |"
    done
    echo
    echo "tshark: one run per wire on the same capture, TLS read with the same key log (\`-o tls.keylog_file:FILE\`);"
    echo "HTTP/1.1 wires filtered with \`$TSHARK_FILTER\`, HTTP/2 wires with \`$TSHARK_H2_FILTER\` (h2c decoded as"
    echo "HTTP/2 on the generator's port: \`-d tcp.port==$GEN_PORT,http2\`). The resumes column counts the frames it found."
fi

# The workload matrix: one capture per traffic mix.
if [[ -n $MIXES ]]; then
    echo
    echo "## Workloads ($MIX_SIZE per mix, \`gen-capture --mix M\`)"
    echo
    echo "| mix | bytes | packets | resumes | cat s | -j1 s | -j1 GB/s | -j1 CPU s/GiB | -j2 s | -j2 GB/s | -j2 CPU s/GiB | -j2 RSS MiB | -j1 / -j2 | -j2 / cat | tshark s | tshark / -j2 | ≥ 1 GB/s (-j2) |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for mix in $MIXES; do
        f="$OUT/bench-$MIX_SIZE-mix-$mix.$FORMAT"
        on_wire=${mix%@*}
        base=${on_wire%%+*}
        wire=plain
        [[ $on_wire == *+* ]] && wire=${on_wire#*+}
        mss=()
        [[ $mix == *@* ]] && mss=(--mss "${mix##*@}")
        # shellcheck disable=SC2046 # wire_args gives separate words on purpose
        capture "$MIX_SIZE" "$SEED" "$f" --mix "$base" --expect "$f.expect" --keylog "$f.keys" \
            "${mss[@]}" $(wire_args "$wire")
        tshark_for_wire "$wire" "$f.keys"
        cat "$f" >/dev/null
        b=$(bytes_of "$f")
        # capinfos comes with tshark; without it the column says "-".
        packets=$({ capinfos -c -M "$f" 2>/dev/null || true; } | awk -F: '/Number of packets/ { gsub(/ /, "", $2); print $2 }')
        resumes=$(wc -l <"$f.expect")
        read -r mc _ _ < <(median_of cat "$f")
        read -r mw1 _ mc1 < <(median_of "$BIN" -q -j1 --tls-keylog "$f.keys" "$f")
        read -r mw2 mr2 mc2 < <(median_of "$BIN" -q -j2 --tls-keylog "$f.keys" "$f")
        gib=$(awk -v b="$b" 'BEGIN { print b / 1073741824 }')
        if [[ $TSHARK == 1 ]] && command -v tshark >/dev/null; then
            read -r mt _ _ < <(measure tshark "${TSHARK_WIRE_OPTS[@]}" -r "$f" -Y "$TSHARK_WIRE_FILTER" \
                -T fields -e frame.number)
            mts=$(calc "$mt")
            mtr=$(calc "$mt / $mw2")
        else
            mts="-"
            mtr="-"
        fi
        echo "| $mix | $b | ${packets:--} | $resumes | $mc | $mw1 | $(gbps "$b" "$mw1") | $(calc "$mc1 / $gib") | $mw2 | $(gbps "$b" "$mw2") | $(calc "$mc2 / $gib") | $((mr2 / 1024)) | $(calc "$mw1 / $mw2") | $(calc "$mw2 / $mc") | $mts | $mtr | $(verdict "$b / $mw2 >= 1e9") |"
    done
    echo
    echo "tshark runs once per mix (one pass, the same filter as above)."
fi

# HAR exports: one document per entry size, its entries analyzed on the -j threads.
if [[ -n $HARS ]]; then
    echo
    echo "## HAR exports (${HAR_MIB} MiB each, \`python3 fixtures/har/gen_big_har.py OUT $HAR_MIB KIB\`; \`browser\`: Chromium's entries, \`python3 fixtures/har/gen_browser_har.py OUT $HAR_MIB\`)"
    echo
    echo "| body KiB per entry | bytes | entries | cat s | -j1 s | -j1 GB/s | -j1 CPU s/GiB | -j1 RSS MiB | -j2 s | -j2 GB/s | -j2 CPU s/GiB | -j2 RSS MiB | -j1 / -j2 | -j2 / cat |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for kib in $HARS; do
        f="$OUT/bench-${HAR_MIB}MiB-har-$kib.har"
        if [[ $kib == browser ]]; then
            gen=(fixtures/har/gen_browser_har.py "$f" "$HAR_MIB")
            stamp="$(cat fixtures/har/gen_browser_har.py fixtures/har-real/chromium-embed.har |
                sha256sum | cut -c1-16) $HAR_MIB"
        else
            gen=(fixtures/har/gen_big_har.py "$f" "$HAR_MIB" "$kib")
            stamp="$(sha256sum fixtures/har/gen_big_har.py | cut -c1-16) $HAR_MIB $kib"
        fi
        if [[ ! -s $f || $(cat "$f.stamp" 2>/dev/null) != "$stamp" ]]; then
            python3 "${gen[@]}" >/dev/null
            echo "$stamp" >"$f.stamp"
        fi
        b=$(bytes_of "$f")
        entries=$(grep -o '"startedDateTime"' "$f" | wc -l)
        read -r hc _ _ < <(median_of cat "$f")
        read -r hw1 hr1 hc1 < <(median_of "$BIN" -q -j1 "$f")
        read -r hw2 hr2 hc2 < <(median_of "$BIN" -q -j2 "$f")
        gib=$(awk -v b="$b" 'BEGIN { print b / 1073741824 }')
        echo "| $kib | $b | $entries | $hc | $hw1 | $(gbps "$b" "$hw1") | $(calc "$hc1 / $gib") | $((hr1 / 1024)) | $hw2 | $(gbps "$b" "$hw2") | $(calc "$hc2 / $gib") | $((hr2 / 1024)) | $(calc "$hw1 / $hw2") | $(calc "$hw2 / $hc") |"
    done
fi
