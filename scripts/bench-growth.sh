#!/usr/bin/env bash
# Growth benchmark: the default `serve`'s ingest rate on an empty table (the baseline), then with STORED events
# already stored, then the same while retention deletes the older half of them (RISC_EVENT_RETENTION_DAYS
# default, 400). After the deletion: a redelivered SET is still a duplicate, and the admin views still work.
#   scripts/bench-growth.sh [STORED=10000000] [CONNECTIONS=64] [SECONDS=10]
# The stored events are generated in SQL: the same columns and indexes as real ones, with small JSON bodies
# (the table's indexes are what grows with it; each row is about 300 bytes instead of 1.5 KB).
set -euo pipefail
cd "$(dirname "$0")/.."
stored_events=${1:-10000000}
connections=${2:-64}
seconds=${3:-10}
tokens_per_run=${RISC_BENCH_TOKENS_PER_RUN:-150000}

. scripts/lib/bench.sh
fresh_database risc_growth

# run LABEL FIRST_USER: one saturation run with fresh SETs; sets rate_LABEL and checks stored rows against 202s.
run() {
  local label=$1 result last_id accepted0 rows accepted
  sign "$tokens_per_run" "$2" "$work/tokens-$label"
  warm_up
  # Counted by id: retention may delete older rows meanwhile.
  last_id=$(psql -c 'SELECT coalesce(max(id), 0) FROM risc_events'); accepted0=$(accepted_by_server)
  result=$(run_wrk "$work/tokens-$label" 0)
  rows=$(psql -c "SELECT count(*) FROM risc_events WHERE id > $last_id"); accepted=$(( $(accepted_by_server) - accepted0 ))
  [ "$rows" = "$accepted" ] || rows_mismatch=1
  printf -v "rate_$label" '%s' "$(field rate "$result")"
  printf -v "line_$label" '%s' "$(field rate "$result") SETs/s, p99 $(field p99_ms "$result") ms, non-202: $(field not_202 "$result"), token reuse: $(field token_reuse "$result"); rows stored $rows, server-counted 202s $accepted ($(check_rows "$rows" "$accepted"))"
}

RISC_EVENT_RETENTION_DAYS=0 start_serve
run empty 0
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

echo "Storing $stored_events events (about a minute per million)..." >&2
start=$(date +%s)
# Received over the last 800 days, oldest first: the older half is past the default retention.
psql -c "
INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at, received_at, status, attempts, completed_at)
SELECT 'https://accounts.google.com/', 'growth-' || md5(i::text), ARRAY['https://schemas.openid.net/secevent/risc/event-type/sessions-revoked'],
       'growth-user-' || (i % 1000000),
       '[{\"type\":\"https://schemas.openid.net/secevent/risc/event-type/sessions-revoked\"}]',
       '{\"iss\":\"https://accounts.google.com/\"}',
       t, t, 'done', 1, t
FROM generate_series(1, $stored_events) AS i,
     LATERAL (SELECT now() - make_interval(secs => 800 * 86400.0 * ($stored_events - i) / $stored_events) AS t) AS r" \
  -c "INSERT INTO risc_event_actions (event_id, kind, sub, rows_affected, applied_at)
      SELECT id, 'revoke_sessions', subject_sub, 0, received_at FROM risc_events WHERE jti LIKE 'growth-%'" \
  -c 'VACUUM ANALYZE' -c 'CHECKPOINT' >/dev/null
load_s=$(( $(date +%s) - start ))
old=$(psql -c "SELECT count(*) FROM risc_events WHERE received_at < now() - interval '400 days'")

RISC_EVENT_RETENTION_DAYS=0 start_serve
run full 1000000
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

# The same with the default retention: it starts deleting at once, in batches of 1,000.
start_serve
serve_started=$SECONDS
sleep 1
run deleting 2000000
events_deleted() { curl -fs "http://127.0.0.1:$rx_port/metrics" | sed -n 's/^risc_events_deleted_total \([0-9.e+]*\)$/\1/p'; }
deleted_during_run=$(events_deleted)
# Retention goes on (a batch of 1,000, then a 100 ms pause) until every old event is gone, or for a minute more;
# then check what must still work.
waited_until=$((SECONDS + 60))
while deleted=$(events_deleted); [ "$(printf '%.0f' "${deleted:-0}")" -lt "$old" ] && [ $SECONDS -lt $waited_until ]; do
  sleep 0.5
done
deleting_seconds=$((SECONDS - serve_started))
left_actions=$(psql -c "SELECT count(*) FROM risc_event_actions a WHERE NOT EXISTS (SELECT 1 FROM risc_events e WHERE e.id = a.event_id)")
# A SET from well inside the first run (in one run, the first line of the file had not been sent): the 1000th,
# or a third of the way in when a run has fewer tokens (RISC_BENCH_TOKENS_PER_RUN; the smoke run in test.sh).
redelivered=$(sed -n "$((tokens_per_run < 3000 ? tokens_per_run / 3 : 1000))p" "$work/tokens-empty")
claim() { python3 -c "import base64, json, sys; p = sys.argv[1].split('.')[1]; c = json.loads(base64.urlsafe_b64decode(p + '=' * (-len(p) % 4))); print($1)" "$redelivered"; }
redelivered_jti=$(claim "c['jti']")
redelivered_sub=$(claim "next(iter(c['events'].values()))['subject']['sub']")
copies() { psql -c "SELECT count(*) || ' rows, ' || (SELECT count(*) FROM risc_event_actions a JOIN risc_events e ON e.id = a.event_id WHERE e.jti = '$redelivered_jti') || ' actions' FROM risc_events WHERE jti = '$redelivered_jti'"; }
before=$(copies)
status=$(curl -s -o /dev/null -w '%{http_code}' -X POST --data-binary "$redelivered" "http://127.0.0.1:$rx_port/risc/events")
duplicate=$([ "$status" = 202 ] && [ "$(copies)" = "$before" ] && [ "$before" = "1 rows, 1 actions" ] && echo "202, still $before" || echo "FAILED (answer $status; $before before, $(copies) after)")
views=ok
for command in "users show $redelivered_sub" "events list --sub $redelivered_sub" "stats"; do
  # shellcheck disable=SC2086
  "$bin" $command >/dev/null 2>&1 || views="FAILED: $command"
done

cat <<TXT
Growth benchmark ($(nproc) cores; default serve; wrk $threads threads, $connections connections, ${seconds}s per run; fsync on)
  empty table:            $line_empty
  $stored_events stored:     $line_full
                          ratio $(ratio "$rate_full" "$rate_empty") x the empty-table rate (stored in ${load_s}s)
  same, retention on:     $line_deleting
                          ratio $(ratio "$rate_deleting" "$rate_empty") x the empty-table rate; ${deleted_during_run:-0} events deleted during the run
  retention:              $old events past 400 days; ${deleted:-0} deleted with their actions in the $deleting_seconds s after serve started (a batch of 1,000, then 100 ms); actions left without their event: $left_actions
  afterwards:             a redelivered SET from the first run: $duplicate; users show, events list, stats: $views
TXT
[ "$rows_mismatch" = 0 ] && [ "$left_actions" = 0 ] && [ "$views" = ok ] && [[ "$duplicate" == 202* ]]
