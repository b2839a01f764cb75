#!/usr/bin/env bash
# Ingest benchmark: drives POST /risc/events on loopback with pre-signed SETs (each jti used once), then
# measures PostgreSQL's raw single-row insert ceiling with pgbench in the same run, and reports the ratio.
#   scripts/bench-ingest.sh [CONNECTIONS] [SECONDS] [RATE_FOR_LATENCY_RUN]
set -euo pipefail
cd "$(dirname "$0")/.."

connections=${1:-64}
seconds=${2:-10}
latency_rate=${3:-5000}
threads=2
# Enough unique SETs for a throughput run at up to 16,000/s and a paced run (the run reports any reuse).
max_tokens=${RISC_BENCH_TOKENS_MAX:-$(( (16000 + latency_rate * 3 / 2) * seconds ))}

. scripts/bench-lib.sh
# The receiver alone: the worker, which would act on the 100,000 queued events meanwhile, has its own
# benchmark (scripts/bench-accounts.sh).
start_serve --no-worker

echo "Signing $max_tokens SETs..." >&2
curl -fs -X POST "http://127.0.0.1:$tx_port/dev/sign-batch" -H 'Content-Type: application/json' \
  -d "{\"type\":\"sessions-revoked\",\"count\":$max_tokens}" >"$work/all-tokens"
latency_count=$((latency_rate * seconds * 3 / 2))
head -n "$latency_count" "$work/all-tokens" >"$work/latency-tokens"
tail -n +"$((latency_count + 1))" "$work/all-tokens" >"$work/throughput-tokens"
# Warm up keys and connections with a few SETs that are not counted.
curl -fs -X POST "http://127.0.0.1:$tx_port/dev/send" -H 'Content-Type: application/json' \
  -d "{\"type\":\"sessions-revoked\",\"sub\":\"warmup\",\"target\":\"http://127.0.0.1:$rx_port/risc/events\"}" >/dev/null

run_wrk() { # tokens-file rate
  RISC_BENCH_TOKENS=$1 RISC_BENCH_RATE=$2 RISC_BENCH_THREADS=$threads RISC_BENCH_CONNECTIONS=$connections \
    wrk -t"$threads" -c"$connections" -d"${seconds}s" --timeout 10s -s benchmarks/post-sets.lua \
    "http://127.0.0.1:$rx_port" | grep '^RESULT'
}

before=$(psql -c 'SELECT count(*) FROM risc_events')
# RISC_BENCH_PERF=FILE records a system-wide CPU profile during the throughput run.
[ -n "${RISC_BENCH_PERF:-}" ] && { perf record -e cpu-clock -F 499 -g -a -o "$RISC_BENCH_PERF" -- sleep "$seconds" 2>/dev/null & }
throughput=$(run_wrk "$work/throughput-tokens" 0)
after=$(psql -c 'SELECT count(*) FROM risc_events')
# Each run starts from a vacuumed, checkpointed table, so one run's after-effects are not billed to the next.
settle() { psql -c 'VACUUM ANALYZE risc_events' -c 'CHECKPOINT' >/dev/null; }
settle
latency=$(run_wrk "$work/latency-tokens" "$latency_rate")

psql -c 'CREATE TABLE bench_raw (id bigserial PRIMARY KEY, jti text NOT NULL UNIQUE, claims text NOT NULL)'
pgbench_tps=$("$(pg_bin)/pgbench" -h 127.0.0.1 -p "$pg_port" -U postgres -n -c "$connections" -j "$threads" \
  -T "$seconds" -f benchmarks/pgbench-insert.sql risc_bench 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')

sets_per_s=$(field rate "$throughput")
cat <<TXT
Ingest benchmark ($(nproc) cores, $connections connections, ${seconds}s per run, fsync on)
  throughput run:  $(field rate "$throughput") SETs/s verified and committed; p50 $(field p50_ms "$throughput") ms, p99 $(field p99_ms "$throughput") ms;
                   non-202: $(field not_202 "$throughput"), socket errors: $(field socket_errors "$throughput"), token reuse: $(field token_reuse "$throughput"); rows stored: $((after - before)) for $(field requests "$throughput") requests
  latency run:     offered ${latency_rate}/s (open loop), achieved $(field rate "$latency")/s; p50 $(field p50_ms "$latency") ms, p99 $(field p99_ms "$latency") ms, max $(field max_ms "$latency") ms; non-202: $(field not_202 "$latency")
  pgbench ceiling: $pgbench_tps single-row insert transactions/s ($connections clients)
  ratio:           $(python3 -c "print(f'{$sets_per_s / $pgbench_tps:.2f}')") x the raw single-row insert ceiling
TXT
