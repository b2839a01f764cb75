#!/usr/bin/env bash
# What receiving a SET costs before its signature is checked, in the release build: the compact JWS split and
# decoded, the payload's JSON parsed (as jwt-kit writes it, every "/" escaped, and without escapes) and serialized
# again. Each figure beside Foundation doing the same work in the same run, and the ratio of the two.
#   scripts/bench-parse.sh [CALLS=50000]    (the best of 7 rounds of CALLS calls each)
set -euo pipefail
cd "$(dirname "$0")/.."
calls=${1:-50000}
if [[ ! $calls =~ ^[0-9]+$ ]] || [[ $calls -lt 1 ]]; then
  echo "usage: $0 [CALLS]" >&2
  exit 2
fi
. scripts/lib/release-build.sh
# The release build's scratch folder and flags: what the release build of risc-receiver compiled is reused.
build=(swift build --scratch-path "$release_scratch" -c release --static-swift-stdlib)
"${build[@]}" --product bench-parse >/dev/null 2>&1 || {
  "${build[@]}" --product bench-parse 2>&1 | tail -40 >&2
  echo "error: the release build of bench-parse failed" >&2
  exit 1
}
"$("${build[@]}" --show-bin-path)/bench-parse" "$calls"
