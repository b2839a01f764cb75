#!/usr/bin/env bash
# Coverage-guided fuzzing (libFuzzer) of the RISC core's parsing path: SETs, Google ID tokens, JSON, base64.
#
#   scripts/fuzz.sh SECONDS
#   scripts/fuzz.sh --build-only
#
# Builds fuzz/FuzzParsing.swift with the sources of Sources/RISC (swiftc, -O, -sanitize=fuzzer,address;
# fuzzer only if ASan does not build here) against swift-crypto's Crypto, built by SwiftPM in release mode in
# .build-release (shared with the release build that the benchmarks and the tarball use; the fuzzer itself goes
# to .build-release/fuzz, and is built again only when a source is newer). Fuzzes a temporary copy of fuzz/corpus for SECONDS,
# prints exec/s, coverage and the number of crashes, and exits non-zero on any crash; the crash artifacts
# stay in the temporary directory it prints.
#
# Environment:
#   FUZZ_KEEP_GOING=1   keep fuzzing after a crash (fork mode, -ignore_crashes=1) and count every crash
#   FUZZ_WORKDIR=DIR    where to put the working corpus and artifacts (default: a new mktemp -d)
#   FUZZ_ARGS="..."     extra libFuzzer flags
set -euo pipefail

if [[ $# -ne 1 ]] || [[ $1 != --build-only && ( ! $1 =~ ^[0-9]+$ || $1 -lt 1 ) ]]; then
    echo "usage: $0 SECONDS | --build-only" >&2
    exit 2
fi
duration=$1
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/lib/release-build.sh
scratch=$release_scratch
out=$scratch/fuzz
mkdir -p "$out"

# scripts/test.sh has built the release configuration already (RISC_RELEASE_BUILT names its bin directory).
if [[ -n ${RISC_RELEASE_BUILT:-} ]]; then
    release=$RISC_RELEASE_BUILT
else
    echo "==> building swift-crypto's Crypto (swift build --scratch-path $scratch -c release --static-swift-stdlib --target Crypto)"
    swift build --scratch-path "$scratch" -c release --static-swift-stdlib --target Crypto >"$out/crypto-build.log" 2>&1 || {
        tail -40 "$out/crypto-build.log" >&2
        echo "error: building Crypto failed (log: $out/crypto-build.log)" >&2
        exit 1
    }
    release=$(swift build --scratch-path "$scratch" -c release --static-swift-stdlib --show-bin-path)
fi

# Crypto and the targets it links on Linux (those that exist in this swift-crypto version).
crypto_objects=()
for target in Crypto CryptoBoringWrapper CCryptoBoringSSL CCryptoBoringSSLShims CXKCP CXKCPShims; do
    if [[ -d $release/$target.build ]]; then
        while IFS= read -r -d '' object; do crypto_objects+=("$object"); done \
            < <(find "$release/$target.build" -name '*.o' -print0)
    fi
done
[[ ${#crypto_objects[@]} -gt 0 ]] || { echo "error: no Crypto objects under $release" >&2; exit 1; }

risc_sources=(Sources/RISC/*.swift)
# The fuzzer's own RISC module is searched first: the release build's (for the benchmarks) may be older.
build() {  # build SANITIZERS: the RISC module, then the fuzzer binary
    local sanitizers=$1
    swiftc -parse-as-library -swift-version 6 -module-name RISC -O -g -wmo -static-stdlib -sanitize="$sanitizers" \
        -I "$release/Modules" -emit-module -emit-module-path "$out/RISC.swiftmodule" \
        -emit-object -o "$out/RISC.o" "${risc_sources[@]}" &&
        swiftc -parse-as-library -swift-version 6 -O -g -static-stdlib -sanitize="$sanitizers" -use-ld=lld \
            -I "$out" -I "$release/Modules" fuzz/FuzzParsing.swift "$out/RISC.o" "${crypto_objects[@]}" \
            -lstdc++ -o "$out/fuzz-parsing"
}
binary=$out/fuzz-parsing
# swiftc alone does not know what changed: the fuzzer is built again when any of its inputs is newer than it.
newer_inputs=$( [[ -x $binary && -s $out/sanitizers ]] &&
    find "${risc_sources[@]}" fuzz/FuzzParsing.swift scripts/fuzz.sh "${crypto_objects[@]}" -newer "$binary" | head -1 ||
    echo "no fuzzer yet")
if [[ -z $newer_inputs ]]; then
    sanitizers=$(cat "$out/sanitizers")
    echo "==> the fuzzer is up to date ($binary, -sanitize=$sanitizers)"
else
    echo "==> building the fuzzer (swiftc -O -sanitize=fuzzer,address, ${#risc_sources[@]} RISC sources)"
    rm -f "$out/sanitizers"
    sanitizers=fuzzer,address
    if ! build "$sanitizers" >"$out/fuzzer-build.log" 2>&1; then
        echo "    ASan build failed (log: $out/fuzzer-build.log); retrying with -sanitize=fuzzer only"
        sanitizers=fuzzer
        build "$sanitizers" >"$out/fuzzer-build.log" 2>&1 || {
            tail -40 "$out/fuzzer-build.log" >&2
            echo "error: building the fuzzer failed (log: $out/fuzzer-build.log)" >&2
            exit 1
        }
    fi
    echo "$sanitizers" >"$out/sanitizers"
fi
[[ $duration != --build-only ]] || exit 0

work=${FUZZ_WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/risc-fuzz.XXXXXX")}
mkdir -p "$work/corpus" "$work/artifacts"
cp fuzz/corpus/* "$work/corpus/"
seeds=$(find fuzz/corpus -type f | wc -l)
echo "==> fuzzing for ${duration}s with -sanitize=$sanitizers: $seeds seeds copied to $work/corpus"

flags=(
    -max_total_time="$duration" -timeout=10 -rss_limit_mb=4096 -max_len=8192 -print_final_stats=1
    -dict=fuzz/risc.dict -artifact_prefix="$work/artifacts/"
)
if [[ ${FUZZ_KEEP_GOING:-0} == 1 ]]; then
    flags+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
fi
# shellcheck disable=SC2206
[[ -n ${FUZZ_ARGS:-} ]] && flags+=($FUZZ_ARGS)

# With the runtime linked in statically (as the release build that Crypto's objects come from), LeakSanitizer also
# sees the runtime's own caches; fuzz/lsan.supp names them, and every other leak still fails the run.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/fuzz/lsan.supp}
# Crash reports from libFuzzer/ASan, symbolized (the Swift runtime's own backtracer trips over ASan's shadow).
export SWIFT_BACKTRACE=${SWIFT_BACKTRACE:-enable=no}
if [[ -z ${ASAN_SYMBOLIZER_PATH:-} ]]; then
    symbolizer=$(dirname "$(command -v swiftc)")/llvm-symbolizer  # the toolchain's own
    [[ -x $symbolizer ]] || symbolizer=$(command -v llvm-symbolizer || true)
    [[ -n $symbolizer ]] && export ASAN_SYMBOLIZER_PATH=$symbolizer
fi

set +e
"$binary" "${flags[@]}" "$work/corpus" >"$work/fuzz.log" 2>&1
status=$?
set -e

# Figures from libFuzzer's own output: its last status line and its final stats.
last_line=$(grep -E 'cov: [0-9]+ ft: [0-9]+' "$work/fuzz.log" | tail -1 || true)
cov=$(grep -oE 'cov: [0-9]+' <<<"$last_line" | grep -oE '[0-9]+' || echo "?")
ft=$(grep -oE 'ft: [0-9]+' <<<"$last_line" | grep -oE '[0-9]+' || echo "?")
runs=$(grep -oE '^#[0-9]+' <<<"$last_line" | tr -d '#' || true)
execs=$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$work/fuzz.log" | grep -oE '[0-9]+$' | tail -1 || true)
if [[ -z $execs ]]; then  # fork mode prints no final stats: take the last status line's exec/s
    execs=$(grep -oE 'exec/s: [0-9]+' <<<"$last_line" | grep -oE '[0-9]+' || echo "?")
fi
corpus_files=$(find "$work/corpus" -type f | wc -l)
corpus_bytes=$(du -sb "$work/corpus" | cut -f1)
crashes=$(find "$work/artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) |
    wc -l)

echo "==> results"
echo "    sanitizers:  $sanitizers"
echo "    duration:    ${duration}s, ${runs:-?} runs"
echo "    exec/s:      $execs"
echo "    cov:         $cov"
echo "    ft:          $ft"
echo "    corpus:      $corpus_files files, $corpus_bytes bytes ($work/corpus)"
echo "    crashes:     $crashes"
echo "    log:         $work/fuzz.log"

if [[ $crashes -gt 0 ]]; then
    echo "==> crash artifacts in $work/artifacts:"
    for artifact in "$work"/artifacts/*; do
        echo "    $(basename "$artifact")  base64: $(base64 -w0 "$artifact" | head -c 400)"
    done
    grep -m5 -E 'fuzz property failed|Fatal error|ERROR: AddressSanitizer|ERROR: LeakSanitizer|ERROR: libFuzzer' \
        "$work/fuzz.log" | sed 's/^/    /' || true
    echo "    first stack:"
    grep -m1 -A16 -E 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)' "$work/fuzz.log" | grep -E '^ +#' |
        sed 's/^ */      /' || true
    echo "    reproduce:  $binary ARTIFACT"
    echo "    minimize:   $binary -minimize_crash=1 -runs=100000 -artifact_prefix=$work/artifacts/min- ARTIFACT"
    exit 1
fi
if [[ $status -ne 0 ]]; then
    tail -20 "$work/fuzz.log" >&2
    echo "error: libFuzzer exited with status $status without a crash artifact" >&2
    exit "$status"
fi
