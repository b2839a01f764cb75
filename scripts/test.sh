#!/usr/bin/env bash
# Runs the whole test suite against throwaway PostgreSQL clusters that this script starts and removes.
#   scripts/test.sh               everything, as CI runs it
#   scripts/test.sh --quick       the build and `swift test` only (what a change needs most times)
#   scripts/test.sh ARGS...       `swift test ARGS...` alone, e.g. --filter NotificationTests
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/pg.sh

quick=false
if [ "${1:-}" = "--quick" ]; then
  quick=true
  shift
  [ $# -eq 0 ] || { echo "usage: scripts/test.sh [--quick | SWIFT_TEST_ARGUMENTS...]" >&2; exit 2; }
fi
started=$SECONDS
# Each stage says how long it took, so a slow run shows where its time went.
stage_started=$SECONDS
stage_name=
stage() {
  if [ -n "$stage_name" ]; then echo "    ($stage_name: $((SECONDS - stage_started)) s)"; fi
  stage_name=$1
  stage_started=$SECONDS
  echo "==> $1"
}

stage "PostgreSQL 15 (apt: postgresql), unless installed"
pg_ensure_installed
# SwiftPM orders a package's trait flags as a Set iterates, which differs from one process to the next unless
# hashing is deterministic: swift-protobuf (two default traits, through swift-otel) was then recompiled by
# every other build plan. Set for SwiftPM here, so that its plans agree and the check below holds.
export SWIFT_DETERMINISTIC_HASHING=1
work=$(mktemp -d /tmp/risc-test.XXXXXX)
chmod 755 "$work"
main_port=$(pg_free_port)
outage_port=$(pg_free_port)
cleanup() {
  pg_stop "$work/main"
  pg_stop "$work/outage"
  rm -rf "$work"
}
trap cleanup EXIT
# A signal ends the run through the EXIT trap too, so nothing it started is left running.
trap 'exit 130' INT
trap 'exit 143' TERM
# Validators from PyPI: kubernetes-validate (it ships the schemas) for deploy/, openapi-spec-validator and
# jsonschema for the admin API's OpenAPI document and live responses, standardwebhooks to check a notification's
# signature as an app would, opentelemetry-proto to decode the spans the service exports (scripts/otlp-receiver.py).
# In a virtualenv of our own: Debian's
# python3 refuses a system-wide pip install (externally-managed-environment). Its bin/ goes first on PATH, so
# the tests' `python3` is the one with the validators.
venv=$PWD/.build-venv
if ! "$venv/bin/python3" -c 'import kubernetes_validate, yaml, openapi_spec_validator, jsonschema, standardwebhooks, opentelemetry.proto' 2>/dev/null; then
  stage "Python validators in $venv (pip: kubernetes-validate pyyaml openapi-spec-validator jsonschema standardwebhooks opentelemetry-proto)"
  python3 -c 'import venv, ensurepip' 2>/dev/null || tools_ensure_installed_package python3-venv
  [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check \
    kubernetes-validate pyyaml openapi-spec-validator jsonschema standardwebhooks opentelemetry-proto
fi
export PATH="$venv/bin:$PATH"

pg_start "$work/main" "$main_port"
pg_start "$work/outage" "$outage_port"
pg_createdb "$main_port" risc_test
pg_createdb "$outage_port" risc_test

# The main cluster is shared by all tests; the outage cluster is the one tests may stop and start.
# Both go when the run ends, so a test leaves the databases it made: PostgreSQL 15's DROP DATABASE waits for an
# immediate checkpoint of the whole cluster, and at the suite's peak every other test's commits waited on it.
export RISC_TEST_CLUSTER_DISPOSABLE=1
# Swift Testing starts every test at once unless told otherwise, and most of them run a transmitter, a receiver and
# their pools in this one process. On 2 cores the stalls at that peak ran past the tests' deadlines (a sign-in's
# 15 s, a request's 30 s). At most this many run at a time (a variable the caller may set).
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-32}
export RISC_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:$main_port/risc_test?sslmode=disable"
export RISC_TEST_OUTAGE_DATABASE_URL="postgres://postgres@127.0.0.1:$outage_port/risc_test?sslmode=disable"
export RISC_TEST_OUTAGE_STOP="$(declare -f pg_bin pg_as_owner pg_stop); pg_stop '$work/outage'"
# The schema baseline test compares pg_dump's output.
export RISC_TEST_PG_BIN="$(pg_bin)"
export RISC_TEST_OUTAGE_START="$(declare -f pg_bin pg_as_owner pg_start); pg_start '$work/outage' $outage_port"

stage "swift build --build-tests (a first build takes 5-10 minutes: NIO, PostgreSQL, BoringSSL; then seconds)"
swift build --build-tests
# Suites that load the machine themselves run after the rest, on their own: a flood of idle connections, 1,500
# requests into a stalled log pipe, database counts that need a quiet database, some forty CLI processes against
# a Shared Signals transmitter; and last, alone, a million rows inserted for `stats`, whose writes stalled the
# database for the others. Beside the whole parallel suite they made other tests' time bounds fail, and their own.
heavy='ConnectionLimitTests|DatabaseCostTests|stalledLogPipe|TransmitterTests|PollCrashTests'
largest='statsOfALargeTable'
if [ $# -eq 0 ]; then
  stage "swift test, all but the suites that load the machine themselves"
  swift test --skip-build --skip "$heavy|$largest"
  stage "swift test, those suites on their own: $heavy"
  swift test --skip-build --filter "$heavy"
  stage "swift test, the million-row test alone: $largest"
  # Alone, its database can be dropped at no one's cost: a million rows need not wait for the cluster's removal.
  RISC_TEST_CLUSTER_DISPOSABLE=0 swift test --skip-build --filter "$largest"
else
  stage "swift test $*"
  swift test --skip-build "$@"
fi
# swift test makes a new build plan; building again must compile nothing (package traits once reordered their
# flags from one plan to the next and recompiled Configuration and Hummingbird each time).
if $quick; then
  stage "done"
  echo "scripts/test.sh --quick: passed in $((SECONDS - started)) s"
  exit 0
fi
stage "a second build compiles nothing"
second_build=$(swift build --build-tests 2>&1)
if grep -E "Compiling " <<<"$second_build" | grep -v "Compiling plugin"; then
  echo "scripts/test.sh: a build with nothing changed recompiled the modules above" >&2
  exit 1
fi

# The whole suite (no arguments) also runs the fault-injection suite against the binary just built: kill -9,
# an immediate PostgreSQL restart, a JWKS outage and SIGTERM while 10,000 SETs arrive (about 2 minutes); the
# network faults through a loopback proxy (about 3 minutes); then the run command's checks, and a short run of
# every other script the README names.
if [ $# -eq 0 ]; then
  # The house style, written down in .swift-format (after Hummingbird's); `swift format format --in-place
  # --recursive Sources Tests Plugins benchmarks/parse Package.swift` applies it.
  stage "swift format lint --strict: the code is formatted as .swift-format says"
  swift format lint --strict --recursive --parallel Sources Tests Plugins benchmarks/parse Package.swift
  tools_ensure_installed curl:curl ss:iproute2 pgrep:procps
  stage "fault-injection suite (about 2 minutes)"
  RISC_BIN="$(swift build --show-bin-path)/risc-receiver" scripts/fault-suite.sh
  stage "network faults between the service and PostgreSQL: blackhole, reset, vanished host, failover (about 3 minutes)"
  RISC_BIN="$(swift build --show-bin-path)/risc-receiver" scripts/network-faults.sh
  stage "scripts/run-local.sh: started twice, with a busy port, its walkthrough as printed, stopped by signals"
  scripts/check-run-local.sh
  # Every other script the README tells users to run gets a short run, so none stops working unnoticed: the
  # fuzzer for a fixed time (it exits non-zero on any crash), the benchmarks with tiny sizes (those that send SETs
  # exit non-zero when a 202 was not stored), and the release tarball. These share one release build (.build-release,
  # Swift's runtime linked in, as it ships).
  stage "fuzz/make-corpus.py writes the committed seed corpus again, byte for byte"
  python3 fuzz/make-corpus.py >/dev/null
  if [ -n "$(git status --porcelain -- fuzz/corpus 2>/dev/null)" ]; then
    git status --short -- fuzz/corpus >&2
    echo "scripts/test.sh: fuzz/make-corpus.py no longer writes the committed fuzz/corpus" >&2
    exit 1
  fi
  # One release build for all four, made here, after the tests: built beside them (in the background, at the idle
  # scheduling class) it slowed the debug build by a quarter and made the tests' time bounds fail on 2 cores.
  stage "the release build, Swift's runtime linked in (a first build takes 10-15 minutes), and the fuzzer"
  . scripts/lib/release-build.sh
  release_build
  # Built: the stages below use it as it is, without asking SwiftPM to plan the build again each time.
  RISC_RELEASE_BUILT=$(dirname "$release_bin")
  export RISC_RELEASE_BUILT
  scripts/fuzz.sh --build-only
  stage "scripts/fuzz.sh 30"
  scripts/fuzz.sh 30
  stage "benchmark smoke runs, tiny sizes"
  RISC_BENCH_MAX_RATE=200 scripts/bench-ingest.sh 4 1 10
  scripts/bench-accounts.sh 20 300 1
  RISC_BENCH_TOKENS_PER_RUN=300 scripts/bench-growth.sh 2000 4 1
  scripts/bench-poll.sh 500 4 1 3
  scripts/bench-parse.sh 1000
  stage "scripts/release.sh, checked: the tarball's binary runs alone, with no Swift installed, and names its commit"
  scripts/check-release.sh
fi
stage "done"
echo "scripts/test.sh: passed in $((SECONDS - started)) s"
