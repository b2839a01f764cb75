#!/usr/bin/env bash
# Account benchmarks: session-check throughput, time-to-revoke, and worker drain.
# Each figure comes with a baseline measured in the same run, and the ratio between them.
#   scripts/bench-accounts.sh [USERS=1000] [DRAIN_EVENTS=100000] [SECONDS=10]
set -euo pipefail
cd "$(dirname "$0")/.."
users=${1:-1000}
drain_events=${2:-100000}
seconds=${3:-10}
connections=64
threads=2

. scripts/lib/bench.sh
now() { python3 -c 'import time; print(time.perf_counter())'; }
start_serve

# Users load-user-0..N-1, each with one session whose token is bench-session-(K+1); only hashes are stored.
psql -c "INSERT INTO risc_users (sub, email) SELECT 'load-user-' || k, 'u' || k || '@example.com' FROM generate_series(0, $users - 1) AS k" \
     -c "INSERT INTO risc_sessions (token_hash, sub, expires_at)
         SELECT sha256(('bench-session-' || (k + 1))::bytea), 'load-user-' || k, now() + interval '1 day'
         FROM generate_series(0, $users - 1) AS k" -c 'VACUUM ANALYZE'

# 1. Session checks: GET /v1/session against GET /healthz (the server's ceiling with no database work).
run_wrk() { # path
  RISC_BENCH_SESSIONS=$users RISC_BENCH_PATH=$1 wrk -t"$threads" -c"$connections" -d"${seconds}s" --timeout 10s \
    -s benchmarks/get-session.lua "http://127.0.0.1:$rx_port" | grep '^RESULT'
}
healthz=$(run_wrk /healthz)
# RISC_BENCH_PERF=FILE records a system-wide CPU profile of the session-check run.
[ -n "${RISC_BENCH_PERF:-}" ] && { perf record -e cpu-clock -F 499 -g -a -o "$RISC_BENCH_PERF" -- sleep "$seconds" 2>/dev/null & }
session=$(run_wrk /v1/session)

# 2. Time to revoke, one user after another.
curl -fs -X POST "http://127.0.0.1:$tx_port/dev/sign-batch" -H 'Content-Type: application/json' \
  -d "{\"type\":\"sessions-revoked\",\"count\":$users}" >"$work/revoke-tokens"
rows_before=$(psql -c 'SELECT count(*) FROM risc_events')
revoke=$(python3 benchmarks/time_to_revoke.py "http://127.0.0.1:$rx_port" "$work/revoke-tokens" | grep '^RESULT')
# Each of those SETs got a 202 (the script stops otherwise): each must be a stored row.
revoke_rows=$(( $(psql -c 'SELECT count(*) FROM risc_events') - rows_before ))
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

# The same session checks with the in-memory cache off: every check reads PostgreSQL.
psql -c "UPDATE risc_sessions SET revoked_at = NULL" -c 'VACUUM ANALYZE' >/dev/null
RISC_SESSION_CACHE=off start_serve
uncached=$(run_wrk /v1/session)
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

# 3. Worker drain: events queued with no worker running, then a worker started cold. Twice: one user per event,
#    and every fifth event's user again (DRAIN_EVENTS / 5 users), each on a database of its own.
# drain_run DATABASE USERS: sets drain, drain_pg_us, drain_worker_us, drain_check.
drain_run() {
  local database=$1 drain_users=$2 start pg0 worker_pid
  pg_createdb "$pg_port" "$database"
  export DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/$database?sslmode=disable" PGDATABASE=$database
  "$bin" migrate >/dev/null 2>&1
  psql -f benchmarks/seed-drain.sql -v events="$drain_events" -v users="$drain_users" >/dev/null
  start=$(now)
  pg0=$(cpu "+$postmaster")
  "$bin" worker 2>"$work/worker.log" &
  worker_pid=$!
  pids+=($worker_pid)
  while [ "$(psql -c "SELECT count(*) FROM risc_events WHERE status IN ('pending', 'retry')")" != 0 ]; do
    kill -0 "$worker_pid" 2>/dev/null || { cat "$work/worker.log" >&2; exit 1; }
    sleep 0.05
  done
  drain=$(python3 -c "print(f'{$(now) - $start:.2f}')")
  drain_pg_us=$(python3 -c "print(round(($(cpu "+$postmaster") - $pg0) * 1e6 / $drain_events))")
  drain_worker_us=$(python3 -c "print(round($(cpu "$worker_pid") * 1e6 / $drain_events))")
  kill "$worker_pid"; wait "$worker_pid" 2>/dev/null || true
  drain_check=$(psql -c "SELECT count(*) FILTER (WHERE status = 'done') || ' done, ' ||
    (SELECT count(*) FROM risc_event_actions) || ' actions, ' ||
    (SELECT count(*) FROM risc_sessions WHERE revoked_at IS NOT NULL) || ' sessions revoked, ' ||
    (SELECT count(*) FROM risc_grants WHERE revoked_at IS NOT NULL) || ' grants deleted' FROM risc_events")
}
drain_run risc_drain "$drain_events"
# Baseline: the same queue drained by PostgreSQL alone, claiming 500 at a time and marking them done
# (no actions, no client round trips), on a copy of the queue as it was seeded.
psql -c "CREATE TABLE bench_queue AS SELECT id, 'pending'::text AS status, run_after FROM risc_events" \
  -c "CREATE INDEX ON bench_queue (run_after, id) WHERE status = 'pending'" -c 'VACUUM ANALYZE' -c 'CHECKPOINT' >/dev/null
start=$(now)
psql -c "
DO \$\$ DECLARE n integer; BEGIN
  LOOP
    UPDATE bench_queue SET status = 'done' WHERE id IN (
      SELECT id FROM bench_queue WHERE status = 'pending' ORDER BY run_after, id LIMIT 500 FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS n = ROW_COUNT;
    EXIT WHEN n = 0;
    COMMIT;
  END LOOP;
END \$\$"
baseline_drain=$(python3 -c "print(f'{$(now) - $start:.2f}')")
one_each=("$drain" "$drain_pg_us" "$drain_worker_us" "$drain_check")
drain_users=$(( drain_events / 5 > 0 ? drain_events / 5 : 1 ))
drain_run risc_drain_shared "$drain_users"

cat <<TXT
Account benchmarks ($(nproc) cores; $users users; wrk $connections connections, ${seconds}s)
  session check:   GET /v1/session $(field rate "$session") req/s, p50 $(field p50_ms "$session") ms, p99 $(field p99_ms "$session") ms, non-200: $(field not_200 "$session")
                   baseline GET /healthz $(field rate "$healthz") req/s, p99 $(field p99_ms "$healthz") ms; ratio $(ratio "$(field rate "$session")" "$(field rate "$healthz")")
                   cache off (RISC_SESSION_CACHE=off): $(field rate "$uncached") req/s, p99 $(field p99_ms "$uncached") ms, non-200: $(field not_200 "$uncached"); ratio to /healthz $(ratio "$(field rate "$uncached")" "$(field rate "$healthz")")
  time to revoke:  202 -> first 401 over $(field users "$revoke") users: p50 $(field p50_ms "$revoke") ms, p99 $(field p99_ms "$revoke") ms, max $(field max_ms "$revoke") ms; rows stored $revoke_rows for $(field users "$revoke") 202s
                   baseline one session check: p50 $(field check_p50_ms "$revoke") ms, p99 $(field check_p99_ms "$revoke") ms ($(field polls_per_user "$revoke") checks per user)
  worker drain:    $drain_events mixed events, one user each, worker started cold: ${one_each[0]} s ($(python3 -c "print(round($drain_events / ${one_each[0]}))") events/s); ${one_each[3]}
                   CPU per event: PostgreSQL ${one_each[1]} us, worker ${one_each[2]} us
                   baseline PostgreSQL-only claim-and-mark loop: ${baseline_drain} s; ratio $(ratio "$baseline_drain" "${one_each[0]}")
                   over $drain_users users: ${drain} s ($(python3 -c "print(round($drain_events / $drain))") events/s), CPU per event: PostgreSQL $drain_pg_us us, worker $drain_worker_us us; ${drain_check}
TXT
[ "$revoke_rows" = "$(field users "$revoke")" ]
