#!/usr/bin/env bash
# Ingest benchmark as users run it. Each configuration gets a fresh database and unique pre-signed
# sessions-revoked SETs (each jti used once), driven by wrk at POST /risc/events on loopback:
#   1. PostgreSQL's single-row insert ceiling (pgbench, CONNECTIONS clients): the baseline for every ratio,
#      with PostgreSQL's CPU per insert and commit;
#   2. the default `serve` (worker in-process, default log level):
#      - the floor: GET /healthz as fast as wrk can, and the server's CPU per request (no database work);
#      - saturation: wrk as fast as it can; CPU per SET of the server and of PostgreSQL (from the first SET
#        until the worker has acted on the last), peak RSS, the largest backlog, and stored rows against 202s;
#      - latency: offered half the saturation rate (open loop);
#      - time to revoke under a burst: wrk at full speed again while BURST_USERS signed-in users get a
#        sessions-revoked SET each, spread over the run; from each 202 to the user's first 401;
#   3. the default `serve` with one subscriber: each SET's action also writes a notification, which
#      the dispatcher delivers to a local `dev webhook-sink`; saturation, and how long until all are delivered;
#      then all of them due again at once (a backlog, as after an outage), and how fast a fresh `serve` delivers it;
#      then latency: offered half the rate reached with the subscriber (open loop), and how soon all are delivered;
#   4. the default `serve` with tracing on (OTEL_EXPORTER_OTLP_ENDPOINT), exporting to a local collector stand-in
#      (scripts/otlp-receiver.py, with opentelemetry-proto from .build-venv): saturation and CPU per SET against the
#      default run above, where tracing is off;
#   5. ingest only: `serve --no-worker` alone, saturation, and PostgreSQL's CPU per SET against the default's (what
#      applying the actions adds); then one `worker` process drains what it stored.
#   scripts/bench-ingest.sh [CONNECTIONS=64] [SECONDS=10] [BURST_USERS=200]
# RISC_BENCH_PERF=FILE records a system-wide CPU profile of the default saturation run, or of the one named by
# RISC_BENCH_PERF_RUN (default, notify, traced or ingest).
set -euo pipefail
cd "$(dirname "$0")/.."

connections=${1:-64}
seconds=${2:-10}
burst_users=${3:-200}
threads=2
# Enough unique SETs for a run at up to this rate; a run that needs more reports token reuse.
max_rate=${RISC_BENCH_MAX_RATE:-16000}

. scripts/lib/bench.sh
# Samples the backlog every 0.5 s into FILE until stopped (each sample is a psql backend of its own).
sample_backlog() { while true; do waiting >>"$1" 2>/dev/null || true; sleep 0.5; done; }
# The CPU seconds of this shell's children that have exited and been waited for: wrk, once run_wrk has returned.
exited_children_cpu() {
  python3 -c "import os; f = open('/proc/$$/stat').read().rsplit(')', 1)[1].split(); print((int(f[13]) + int(f[14])) / os.sysconf('SC_CLK_TCK'))"
}
# saturate LABEL TOKENS PIDS...: one saturation run; sets result, stored_rows, server_cpu_us, pg_cpu_us,
# max_backlog, drain_s, accepted_202s, and cores_in_use (server, PostgreSQL and wrk, while wrk ran).
# With NO_DRAIN=1 (nothing works on the events), it does not wait for the backlog.
saturate() {
  local label=$1 tokens=$2; shift 2
  local rows0 accepted0 server0 pg0 sampler start wrk0 wall0 wall
  rows0=$(stored); accepted0=$(accepted_by_server); server0=$(cpu "$@"); pg0=$(cpu "+$postmaster")
  : >"$work/backlog-$label"
  sample_backlog "$work/backlog-$label" & sampler=$!
  if [ -n "${RISC_BENCH_PERF:-}" ] && [ "$label" = "${RISC_BENCH_PERF_RUN:-default}" ]; then
    perf record -e cpu-clock -F 499 -g -a -o "$RISC_BENCH_PERF" -- sleep "$seconds" 2>/dev/null &
  fi
  wrk0=$(exited_children_cpu); wall0=$(date +%s.%N)
  result=$(run_wrk "$tokens" 0)
  wall=$(python3 -c "print($(date +%s.%N) - $wall0)")
  cores_server=$(python3 -c "print(f'{($(cpu "$@") - $server0) / $wall:.2f}')")
  cores_pg=$(python3 -c "print(f'{($(cpu "+$postmaster") - $pg0) / $wall:.2f}')")
  cores_wrk=$(python3 -c "print(f'{($(exited_children_cpu) - $wrk0) / $wall:.2f}')")
  cores_in_use=$(python3 -c "print(f'{$cores_server + $cores_pg + $cores_wrk:.2f}')")
  start=$(date +%s.%N)
  [ "${NO_DRAIN:-0}" = 1 ] || while [ "$(waiting)" != 0 ]; do sleep 0.05; done
  drain_s=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
  kill "$sampler"; wait "$sampler" 2>/dev/null || true
  stored_rows=$(( $(stored) - rows0 ))
  server_cpu_us=$(python3 -c "print(round(($(cpu "$@") - $server0) * 1e6 / $stored_rows))")
  pg_cpu_us=$(python3 -c "print(round(($(cpu "+$postmaster") - $pg0) * 1e6 / $stored_rows))")
  max_backlog=$(sort -n "$work/backlog-$label" | tail -n 1)
  accepted_202s=$(( $(accepted_by_server) - accepted0 ))
}

# 1. The ceiling, and PostgreSQL's CPU per single-row INSERT and commit.
fresh_database risc_ceiling
psql -c 'CREATE TABLE bench_raw (id bigserial PRIMARY KEY, jti text NOT NULL UNIQUE, claims text NOT NULL)'
pg0=$(cpu "+$postmaster")
pgbench_tps=$("$(pg_bin)/pgbench" -h 127.0.0.1 -p "$pg_port" -U postgres -n -c "$connections" -j "$threads" \
  -T "$seconds" -f benchmarks/pgbench-insert.sql risc_ceiling 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
pgbench_pg_us=$(python3 -c "print(round(($(cpu "+$postmaster") - $pg0) * 1e6 / $(psql -c 'SELECT count(*) FROM bench_raw')))")

# 2. The default `serve`.
fresh_database risc_default
start_serve
# Each configuration has a database of its own, so one set of unique SETs serves all three saturation runs.
echo "Signing $((max_rate * seconds)) SETs..." >&2
sign $((max_rate * seconds)) 0 "$work/saturation-tokens"
warm_up
# The floor: GET /healthz in the same process, as fast as wrk can, and the server's CPU per request.
healthz0=$(cpu "$serve_pid")
healthz=$(RISC_BENCH_PATH=/healthz RISC_BENCH_SESSIONS=1 wrk -t"$threads" -c"$connections" -d"${seconds}s" --timeout 10s \
  -s benchmarks/get-session.lua "http://127.0.0.1:$rx_port" | grep '^RESULT')
healthz_us=$(python3 -c "print(round(($(cpu "$serve_pid") - $healthz0) * 1e6 / $(field requests "$healthz")))")
saturate default "$work/saturation-tokens" "$serve_pid"
default_result=$result default_rows=$stored_rows default_server_us=$server_cpu_us default_pg_us=$pg_cpu_us
default_backlog=$max_backlog default_drain=$drain_s default_202s=$accepted_202s
default_cores="$cores_in_use of $(nproc) cores: server $cores_server, PostgreSQL $cores_pg, wrk $cores_wrk"
default_rss_mib=$(awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$serve_pid/status")
sat_rate=$(field rate "$default_result")

half_rate=$(python3 -c "print(int($sat_rate / 2))")
sign $((half_rate * seconds * 3 / 2)) 1000000 "$work/latency-tokens"
psql -c 'VACUUM ANALYZE risc_events' -c 'CHECKPOINT' >/dev/null
latency=$(run_wrk "$work/latency-tokens" "$half_rate")

# Time to revoke under a burst: users load-user-20000000.. with one session each (token bench-session-(K+1)).
first=20000000
psql -c "INSERT INTO risc_users (sub) SELECT 'load-user-' || k FROM generate_series($first, $first + $burst_users - 1) AS k" \
     -c "INSERT INTO risc_sessions (token_hash, sub, expires_at)
         SELECT sha256(('bench-session-' || (k + 1))::bytea), 'load-user-' || k, now() + interval '1 day'
         FROM generate_series($first, $first + $burst_users - 1) AS k" -c 'VACUUM ANALYZE' -c 'CHECKPOINT' >/dev/null
sign "$burst_users" "$first" "$work/revoke-tokens"
# The saturation rate, with room to spare (a run that runs out reports token reuse).
sign "$(python3 -c "print(min($max_rate, int($sat_rate * 1.5)) * ($seconds + 2))")" 2000000 "$work/burst-tokens"
run_wrk "$work/burst-tokens" 0 $((seconds + 2)) >"$work/burst-wrk" &
wrk_pid=$!
sleep 1
revoke=$(python3 benchmarks/time_to_revoke.py "http://127.0.0.1:$rx_port" "$work/revoke-tokens" \
  "$(python3 -c "print($seconds / $burst_users)")" | grep '^RESULT')
wait "$wrk_pid"
burst=$(cat "$work/burst-wrk")
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

# delivery_lag AFTER_ID: of the notifications with a greater id, the seconds from the last one's writing (the start
# of its SET's transaction, a few milliseconds before the commit the 202 follows) to the last recorded delivery, by
# PostgreSQL's clock: not the script's bookkeeping. "none" when there are no such notifications.
delivery_lag() {
  psql -c "SELECT coalesce(to_char(extract(epoch FROM max(delivered_at) - max(created_at)), 'FM9990.00'), 'none') FROM risc_notifications WHERE id > $1"
}

# 3. The default `serve` with one subscriber: a notification per SET, delivered to a local sink (verifies each
#    signature, answers 204).
fresh_database risc_notify
sink_port=$(pg_free_port)
sink_secret=whsec_$(head -c 32 /dev/urandom | base64)
"$bin" dev webhook-sink --port "$sink_port" --secret "$sink_secret" >/dev/null 2>>"$work/sink.log" &
sink_pid=$!
pids+=($sink_pid)
psql -c "INSERT INTO risc_subscribers (url, secret) VALUES ('http://127.0.0.1:$sink_port/', '$sink_secret')" >/dev/null
start_serve
warm_up
saturate notify "$work/saturation-tokens" "$serve_pid"
notify_result=$result notify_rows=$stored_rows notify_server_us=$server_cpu_us notify_pg_us=$pg_cpu_us notify_202s=$accepted_202s
while [ "$(psql -c "SELECT count(*) FROM risc_notifications WHERE status = 'pending'")" != 0 ]; do sleep 0.1; done
notify_drain=$(delivery_lag 0)
notified=$(psql -c "SELECT count(*) FILTER (WHERE status = 'delivered') || ' delivered, ' || count(*) FILTER (WHERE status = 'dead') || ' dead, of ' || count(*) FROM risc_notifications")
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
#    Then a backlog: every notification of the run due again at once (as `notifications replay` leaves each), after
#    ANALYZE, as a backlog meets the dispatcher after an outage; a fresh `serve` delivers them with nothing else to do.
psql -c "UPDATE risc_notifications SET status = 'pending', attempts = 0, next_attempt_at = now(), delivered_at = NULL" \
     -c 'VACUUM ANALYZE risc_notifications' -c 'CHECKPOINT' >/dev/null
backlog_size=$(psql -c 'SELECT count(*) FROM risc_notifications')
sink0=$(cpu "$sink_pid"); pg0=$(cpu "+$postmaster"); start=$(date +%s.%N)
start_serve
while [ "$(psql -c "SELECT count(*) FROM risc_notifications WHERE status = 'pending'")" != 0 ]; do sleep 0.05; done
backlog_s=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")
backlog_cpu="server $(python3 -c "print(round($(cpu "$serve_pid") * 1e6 / $backlog_size))") us, PostgreSQL $(python3 -c "print(round(($(cpu "+$postmaster") - $pg0) * 1e6 / $backlog_size))") us, the sink $(python3 -c "print(round(($(cpu "$sink_pid") - $sink0) * 1e6 / $backlog_size))") us"
#    Then latency below saturation: offered half the rate reached with the subscriber (open loop), where a batch's
#    commit waits on the disk more than on the CPU; and how soon after the last was written the last is delivered.
notify_half_rate=$(python3 -c "print(max(1, int($(field rate "$notify_result") / 2)))")
notify_half_after=$(psql -c 'SELECT coalesce(max(id), 0) FROM risc_notifications')
sign $((notify_half_rate * seconds * 3 / 2)) 4000000 "$work/notify-latency-tokens"
warm_up
psql -c 'CHECKPOINT' >/dev/null
notify_latency=$(run_wrk "$work/notify-latency-tokens" "$notify_half_rate")
while [ "$(psql -c "SELECT count(*) FROM risc_notifications WHERE status = 'pending'")" != 0 ]; do sleep 0.05; done
notify_half_drain=$(delivery_lag "$notify_half_after")
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

# 4. Tracing on: every span made and exported (swift-otel's defaults, which drop what its queue cannot hold).
collector_python=${RISC_BENCH_PYTHON:-.build-venv/bin/python3}
traced=""
if "$collector_python" -c 'import opentelemetry.proto' 2>/dev/null; then
  fresh_database risc_traced
  otlp_port=$(pg_free_port)
  "$collector_python" scripts/otlp-receiver.py "$otlp_port" "$work/spans.jsonl" >/dev/null 2>>"$work/otlp.log" &
  pids+=($!)
  export OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$otlp_port
  start_serve
  unset OTEL_EXPORTER_OTLP_ENDPOINT
  warm_up
  saturate traced "$work/saturation-tokens" "$serve_pid"
  traced_rate=$(field rate "$result")
  traced="$traced_rate SETs/s, ratio $(ratio "$traced_rate" "$sat_rate") x the default serve with tracing off (above); p50 $(field p50_ms "$result") ms, p99 $(field p99_ms "$result") ms; non-202: $(field not_202 "$result")
                    CPU per SET: server $server_cpu_us us (off: $default_server_us us), PostgreSQL $pg_cpu_us us (off: $default_pg_us us); spans exported: $(wc -l <"$work/spans.jsonl")"
  kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true
else
  traced="skipped: $collector_python cannot import opentelemetry.proto (scripts/test.sh installs it in .build-venv)"
fi

# 5. Ingest only: `serve --no-worker`, with no worker until the run is over; then one worker drains the backlog.
fresh_database risc_ingest_only
start_serve --no-worker
warm_up
NO_DRAIN=1 saturate ingest "$work/saturation-tokens" "$serve_pid"
ingest_result=$result ingest_rows=$stored_rows ingest_server_us=$server_cpu_us ingest_pg_us=$pg_cpu_us ingest_202s=$accepted_202s
ingest_cores="$cores_in_use of $(nproc) cores: server $cores_server, PostgreSQL $cores_pg, wrk $cores_wrk"
backlog=$(waiting)
start=$(date +%s.%N)
"$bin" worker 2>>"$work/worker.log" &
worker_pid=$!
pids+=($worker_pid)
while [ "$(waiting)" != 0 ]; do sleep 0.1; done
worker_drain=$(python3 -c "print(f'{$(date +%s.%N) - $start:.2f}')")

[ "$default_rows" = "$default_202s" ] && [ "$notify_rows" = "$notify_202s" ] && [ "$ingest_rows" = "$ingest_202s" ] || rows_mismatch=1
cat <<TXT
Ingest benchmark ($(nproc) cores; wrk $threads threads, $connections connections, ${seconds}s per run; fsync on)
  ceiling:          pgbench $pgbench_tps single-row insert transactions/s ($connections clients); PostgreSQL CPU $pgbench_pg_us us per insert and commit
  default serve (worker in-process, LOG_LEVEL unset = info):
    saturation:     $sat_rate SETs/s, ratio $(ratio "$sat_rate" "$pgbench_tps") x the ceiling; p50 $(field p50_ms "$default_result") ms, p99 $(field p99_ms "$default_result") ms; non-202: $(field not_202 "$default_result"), socket errors: $(field socket_errors "$default_result"), token reuse: $(field token_reuse "$default_result")
                    rows stored $default_rows, server-counted 202s $default_202s ($(check_rows "$default_rows" "$default_202s")); wrk saw $(field requests "$default_result") answers
                    CPU per SET: server $default_server_us us (receiver and worker), PostgreSQL $default_pg_us us (ingest and actions); ratio $(ratio "$default_pg_us" "$pgbench_pg_us") x pgbench's per insert
                    floor: GET /healthz $(field rate "$healthz") req/s, server CPU $healthz_us us per request; a SET costs the server $(ratio "$default_server_us" "$healthz_us") x that
                    CPU in use while wrk ran: $default_cores
                    largest backlog ${default_backlog:-0} events; drained ${default_drain} s after the run; peak RSS ${default_rss_mib} MiB
    half rate:      offered $half_rate/s (open loop), achieved $(field rate "$latency")/s; p50 $(field p50_ms "$latency") ms, p99 $(field p99_ms "$latency") ms, max $(field max_ms "$latency") ms; non-202: $(field not_202 "$latency")
    burst revoke:   202 -> first 401 over $(field users "$revoke") users at $(python3 -c "print(round($burst_users / $seconds))")/s, beside wrk at $(field rate "$burst") SETs/s (non-202: $(field not_202 "$burst")):
                    p50 $(field p50_ms "$revoke") ms, p99 $(field p99_ms "$revoke") ms, max $(field max_ms "$revoke") ms ($(field polls_per_user "$revoke") checks per user: 1.0 means the first check after the 202 was already refused)
  default serve with one subscriber (a notification per SET, to a local dev webhook-sink):
    saturation:     $(field rate "$notify_result") SETs/s, ratio $(ratio "$(field rate "$notify_result")" "$sat_rate") x the default serve without a subscriber; p50 $(field p50_ms "$notify_result") ms, p99 $(field p99_ms "$notify_result") ms; non-202: $(field not_202 "$notify_result")
                    rows stored $notify_rows, server-counted 202s $notify_202s ($(check_rows "$notify_rows" "$notify_202s"))
                    CPU per SET: server $notify_server_us us (receiver, worker and dispatcher), PostgreSQL $notify_pg_us us
                    notifications: $notified; the last delivered ${notify_drain} s after the last was written (its SET's transaction)
    backlog:        the $backlog_size due again at once: delivered in ${backlog_s} s from the start of \`serve\` ($(python3 -c "print(round($backlog_size / $backlog_s))")/s); CPU per delivery: $backlog_cpu
    half rate:      offered $notify_half_rate/s (open loop), achieved $(field rate "$notify_latency")/s; p50 $(field p50_ms "$notify_latency") ms, p99 $(field p99_ms "$notify_latency") ms, max $(field max_ms "$notify_latency") ms; non-202: $(field not_202 "$notify_latency"); the last delivered ${notify_half_drain} s after the last was written
  default serve with tracing on (OTEL_EXPORTER_OTLP_ENDPOINT to a local collector stand-in; the other OTEL_* variables at their defaults):
    saturation:     $traced
  ingest only (serve --no-worker, no worker running):
    saturation:     $(field rate "$ingest_result") SETs/s, ratio $(ratio "$(field rate "$ingest_result")" "$pgbench_tps") x the ceiling; p50 $(field p50_ms "$ingest_result") ms, p99 $(field p99_ms "$ingest_result") ms; non-202: $(field not_202 "$ingest_result"), token reuse: $(field token_reuse "$ingest_result")
                    rows stored $ingest_rows, server-counted 202s $ingest_202s ($(check_rows "$ingest_rows" "$ingest_202s")); CPU in use $ingest_cores
                    CPU per SET: server $ingest_server_us us, PostgreSQL $ingest_pg_us us; applying the actions (the default serve) adds $(python3 -c "print(round(($default_pg_us / $ingest_pg_us - 1) * 100))")% to PostgreSQL's CPU per SET
    then a worker:  drained the $backlog events stored in ${worker_drain} s ($(python3 -c "print(round($backlog / max($worker_drain, 0.01)))") events/s)
TXT
[ "$rows_mismatch" = 0 ]
