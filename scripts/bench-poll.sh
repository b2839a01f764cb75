#!/usr/bin/env bash
# Poll delivery benchmark, against push ingest measured in the same run, both with the default `serve`:
#   1. push: wrk POSTs COUNT pre-signed SETs to /risc/events as fast as it can (CONNECTIONS connections, SECONDS s):
#      the rate of 202s, the baseline;
#   2. drain: COUNT CAEP session-revoked SETs are queued at the development transmitter's poll stream while serve is
#      stopped; serve then polls them (1,000 per poll) and acts on each. The rate is COUNT over the time from the
#      first SET stored to the last acknowledgement the transmitter took;
#   3. idle latency: with nothing else queued, SAMPLES SETs one at a time (200 ms apart), each from the moment it is
#      queued to its action's commit (the transmitter checks its queue every 20 ms while it holds a poll open).
#   scripts/bench-poll.sh [COUNT=100000] [CONNECTIONS=64] [SECONDS=10] [SAMPLES=20]
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-100000}
connections=${2:-64}
seconds=${3:-10}
samples=${4:-20}

. scripts/lib/bench.sh
RISC_VAULT_KEY=$(head -c 32 /dev/urandom | base64)
export RISC_VAULT_KEY
fresh_database risc_poll
tx="http://127.0.0.1:$tx_port"
state() { curl -fs "$tx/dev/ssf/state" | python3 -c "import json, sys; print(json.load(sys.stdin)['$1'])"; }

# 1. Push ingest.
start_serve
sign "$count" 0 "$work/tokens"
warm_up
push=$(run_wrk "$work/tokens" 0)
rate_push=$(field rate "$push")
kill "$serve_pid"; wait "$serve_pid" 2>/dev/null || true

# 2. Drain: queued while no serve polls.
printf 'ssf-dev-client-secret\n' | "$bin" transmitters add dev-ssf --issuer "$tx/ssf" --client-id ssf-dev-client \
  --client-secret - --delivery poll >/dev/null
"$bin" streams create dev-ssf >/dev/null
curl -fs -X POST "$tx/dev/ssf/queue-batch?count=$count&first=1000000" >/dev/null
before=$(stored)
start_serve
started=$(date +%s.%N)
until [ "$(state queued_count)" = 0 ] && [ "$(state acknowledged_count)" -ge "$count" ]; do
  sleep 0.05
  python3 -c "import sys; sys.exit(0 if $(date +%s.%N) - $started < 600 else 1)" || { echo "bench-poll: not drained in 600 s" >&2; exit 1; }
done
acked_at=$(date +%s.%N)
drained=$(( $(stored) - before ))
first_stored=$(psql -c "SELECT extract(epoch FROM min(received_at)) FROM risc_events WHERE issuer = '$tx/ssf'")
drain_s=$(python3 -c "print(f'{$acked_at - $first_stored:.2f}')")
rate_poll=$(python3 -c "print(f'{$count / ($acked_at - $first_stored):.0f}')")
applied=$(psql -c "SELECT count(*) FROM risc_events WHERE issuer = '$tx/ssf' AND status = 'done'")

# 3. Idle latency: one SET at a time, queue to committed action.
: >"$work/latency"
for i in $(seq "$samples"); do
  queued=$(date +%s.%N)
  jti=$(curl -fs -X POST "$tx/dev/ssf/send" -H 'Content-Type: application/json' \
    -d "{\"type\":\"session-revoked\",\"wait\":false,\"sub_id\":{\"format\":\"iss_sub\",\"iss\":\"https://accounts.google.com\",\"sub\":\"idle-$i\"}}" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["jti"])')
  until applied_at=$(psql -c "SELECT extract(epoch FROM a.applied_at) FROM risc_event_actions a JOIN risc_events e ON e.id = a.event_id WHERE e.jti = '$jti'") && [ -n "$applied_at" ]; do
    sleep 0.01
  done
  python3 -c "print(($applied_at - $queued) * 1000)" >>"$work/latency"
  sleep 0.2
done
latency=$(python3 -c "
import statistics
v = sorted(float(x) for x in open('$work/latency'))
print(f'p50 {statistics.median(v):.0f} ms, max {v[-1]:.0f} ms over {len(v)} SETs')")

cat <<TXT
Poll benchmark ($(nproc) cores; default serve, LOG_LEVEL unset; fsync on)
  push ingest:   $rate_push SETs/s (wrk $threads threads, $connections connections, ${seconds}s, p99 $(field p99_ms "$push") ms): the baseline
  poll drain:    $count SETs queued, $drained stored, $applied acted on, in $drain_s s from the first stored to the last acknowledged:
                 $rate_poll SETs/s, ratio $(ratio "$rate_poll" "$rate_push") x push ingest (1,000 SETs per poll)
  idle latency:  queued at the transmitter to the action committed: $latency
TXT
[ "$drained" = "$count" ] && [ "$applied" = "$count" ]
