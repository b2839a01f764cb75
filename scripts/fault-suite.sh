#!/usr/bin/env bash
# Fault-injection suite: a throwaway PostgreSQL cluster, the development transmitter, `serve --no-worker` and two
# `worker` processes; a few hundred users with sessions and vault grants; then a transmitter simulator
# (scripts/lib/fault_sim.py) delivers >= 10,000 SETs of every event type, with duplicates and out-of-order iat,
# retrying like Google, while this script kills the server (-9), kills a worker (-9), restarts PostgreSQL
# (immediate), takes the transmitter's discovery/JWKS down during a key rotation, and stops the server with
# SIGTERM. At the end it checks the database against what was acknowledged and prints a summary; it exits 1 on
# any violation.
#
#   RISC_BIN=/path/to/risc-receiver scripts/fault-suite.sh
#
# RISC_BIN       the binary (default: $(swift build --show-bin-path)/risc-receiver, what scripts/test.sh builds)
# FAULT_USERS    users (300)            FAULT_SETS      SETs to deliver (10100, of which 30 unknown/malformed)
# FAULT_DURATION pacing of the sends in seconds (90)   FAULT_THREADS   simulator connections (8)
# FAULT_SEED     plan seed (1)          FAULT_KEEP=1    keep the work directory (logs, results); it is also kept
#                                                       when the suite fails
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
. scripts/lib/pg.sh

run_started=$EPOCHREALTIME
bin=${RISC_BIN:-$(swift build --show-bin-path)/risc-receiver}
[ -x "$bin" ] || { echo "fault-suite: no executable at $bin (set RISC_BIN)" >&2; exit 2; }
users=${FAULT_USERS:-300}
sets=${FAULT_SETS:-10100}
duration=${FAULT_DURATION:-90}
threads=${FAULT_THREADS:-8}
seed=${FAULT_SEED:-1}
audience=fault-client.apps.googleusercontent.com

pg_ensure_installed
work=$(mktemp -d /tmp/risc-fault.XXXXXX)
chmod 755 "$work"
pg_port=$(pg_free_port); tx_port=$(pg_free_port); rx_port=$(pg_free_port)
rx=http://127.0.0.1:$rx_port
tx=http://127.0.0.1:$tx_port
tx_pid="" serve_pid="" worker1_pid="" worker2_pid="" sim_pid=""
suite_status=1

log() { awk -v now="$EPOCHREALTIME" -v t0="$run_started" -v msg="$*" 'BEGIN { printf "[fault-suite +%5.1fs] %s\n", now - t0, msg }' >&2; }
mark() { echo "$EPOCHREALTIME $*" >>"$work/timeline"; log "$*"; }
# The exit status each process ended with, and the one it should have (checked by fault_sim.py check).
record_exit() { echo "$1 $2 $3" >>"$work/exits"; }

# stop_pid PID: TERM, then KILL after 10 s; returns nothing (cleanup only).
stop_pid() {
  local pid=$1
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

cleanup() {
  local status=$?
  trap - EXIT INT TERM
  stop_pid "$sim_pid"
  stop_pid "$serve_pid"
  stop_pid "$worker1_pid"
  stop_pid "$worker2_pid"
  stop_pid "$tx_pid"
  pg_stop "$work/pg"
  if [ "${FAULT_KEEP:-0}" = 1 ] || [ "$suite_status" != 0 ]; then
    echo "fault-suite: logs, results and the (stopped) cluster kept in $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

pg_start "$work/pg" "$pg_port"
pg_createdb "$pg_port" risc_fault
psql_bin="$(pg_bin)/psql"
export DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/risc_fault?sslmode=disable"
export RISC_CLIENT_IDS=$audience RISC_HOST=127.0.0.1 RISC_PORT=$rx_port LOG_LEVEL=${LOG_LEVEL:-warning}
export RISC_CONFIGURATION_URL="$tx/.well-known/risc-configuration"
export GOOGLE_OPENID_CONFIGURATION_URL="$tx/.well-known/openid-configuration"
export RISC_MIGRATIONS_DIR="$repo/migrations"
RISC_SERVICE_TOKEN=$(head -c 24 /dev/urandom | base64 | tr -d '/+=\n')
RISC_VAULT_KEY=$(head -c 32 /dev/urandom | base64)
export RISC_SERVICE_TOKEN RISC_VAULT_KEY
unset RISC_ADMIN_TOKEN GOOGLE_CLIENT_SECRET_FILES RISC_VERIFY_INTERVAL 2>/dev/null || true

"$bin" migrate >"$work/migrate.log" 2>&1 || { cat "$work/migrate.log" >&2; exit 1; }

"$bin" dev transmitter --port "$tx_port" --audience "$audience" --receiver "$rx/risc/events" \
  >"$work/transmitter.log" 2>&1 &
tx_pid=$!
for _ in $(seq 200); do curl -fs "$tx/jwks" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fs "$tx/jwks" >/dev/null || { echo "the transmitter did not start" >&2; cat "$work/transmitter.log" >&2; exit 1; }

serve_ready_at=0
# start_serve: starts `serve --no-worker` and waits until /readyz says ready (database, migrations, both issuers' keys).
start_serve() {
  echo "--- serve started $(date +%T.%N)" >>"$work/serve.log"
  "$bin" serve --no-worker >>"$work/serve.log" 2>&1 &
  serve_pid=$!
  for _ in $(seq 600); do
    curl -fs "$rx/readyz" >/dev/null 2>&1 && { serve_ready_at=$(date +%s); return 0; }
    kill -0 "$serve_pid" 2>/dev/null || break
    sleep 0.1
  done
  echo "serve did not become ready" >&2
  tail -n 20 "$work/serve.log" >&2
  exit 1
}
# start_worker N: starts worker N (1 or 2) and sets workerN_pid.
start_worker() {
  echo "--- worker $1 started $(date +%T.%N)" >>"$work/worker$1.log"
  "$bin" worker >>"$work/worker$1.log" 2>&1 &
  printf -v "worker$1_pid" '%s' $!
}
# alive LABEL PID: records a process that died on its own (with its status) as a violation.
alive() {
  kill -0 "$2" 2>/dev/null && return 0
  local code=0
  { wait "$2"; } 2>/dev/null || code=$?
  record_exit "$1-died-unexpectedly" "$code" 0
  return 1
}

start_serve
start_worker 1
start_worker 2
log "cluster :$pg_port, transmitter :$tx_port, serve :$rx_port (pid $serve_pid), workers $worker1_pid $worker2_pid"

python3 scripts/lib/fault_sim.py setup --rx "$rx" --tx "$tx" --service-token "$RISC_SERVICE_TOKEN" --audience "$audience" \
  --users "$users" --seed "$seed" --out "$work/state.json"
log "users set up"

marker="$work/faults-done"
python3 scripts/lib/fault_sim.py send --rx "$rx" --tx "$tx" --state "$work/state.json" --results "$work/results.jsonl" \
  --count "$sets" --duration "$duration" --threads "$threads" --seed "$seed" --marker "$marker" &
sim_pid=$!
send_started=$(date +%s)
# at SECONDS: sleeps until SECONDS after the simulator started (no-op when already past).
at() {
  local wait=$(( send_started + $1 - $(date +%s) ))
  [ "$wait" -gt 0 ] && sleep "$wait"
  return 0
}
check_all() {
  alive serve "$serve_pid" || start_serve
  alive worker1 "$worker1_pid" || start_worker 1
  alive worker2 "$worker2_pid" || start_worker 2
  alive transmitter "$tx_pid" || exit 1
  [ -z "$sim_pid" ] || alive simulator "$sim_pid" || exit 1
}

# 1. kill -9 of the server, then a restart.
at 8; check_all
mark "kill -9 serve"
kill -KILL "$serve_pid"; code=0; { wait "$serve_pid"; } 2>/dev/null || code=$?; record_exit "serve-kill-9" "$code" 137
sleep 1
start_serve
mark "serve restarted (after kill -9)"

# 2. kill -9 of one worker, then a restart. It waits (at most 8 s) for a moment when worker 1 holds an open
# transaction, so that the kill lands in the middle of a batch.
worker_in_transaction() { # PID
  local ports
  ports=$(ss -tnpH "( dport = :$pg_port )" 2>/dev/null | grep "pid=$1," | awk '{ sub(/.*:/, "", $4); print $4 }' | paste -sd, -)
  [ -n "$ports" ] || return 1
  [ "$("$psql_bin" -h 127.0.0.1 -p "$pg_port" -U postgres -d risc_fault -XqtAc "SELECT count(*) FROM pg_stat_activity
     WHERE client_port IN ($ports) AND xact_start IS NOT NULL AND state IN ('active', 'idle in transaction')")" != 0 ]
}
at 20; check_all
mid=no
deadline=$(( $(date +%s) + 8 ))
while [ "$(date +%s)" -lt "$deadline" ]; do
  worker_in_transaction "$worker1_pid" && { mid=yes; break; }
done
kill -KILL "$worker1_pid"
code=0; { wait "$worker1_pid"; } 2>/dev/null || code=$?; record_exit "worker1-kill-9" "$code" 137
mark "kill -9 worker 1 (caught in a transaction: $mid)"
sleep 1
start_worker 1
mark "worker 1 restarted"

# 3. An immediate PostgreSQL restart (no checkpoint; crash recovery on start).
at 32; check_all
mark "postgres restart -m immediate"
pg_as_owner "$(pg_bin)/pg_ctl" -D "$work/pg/data" -m immediate -w -t 60 -l "$work/pg/server.log" restart >/dev/null
mark "postgres back"

# 4. A JWKS outage: discovery and JWKS answer 503 while the transmitter rotates its key, so new SETs carry a kid
# the receiver has never seen. It refetches at most once per 30 s, so the outage starts at least 32 s after the
# server loaded its keys (else the refetch would be cooling down, not failing; see the report).
at 48
while [ $(( $(date +%s) - serve_ready_at )) -lt 32 ]; do sleep 1; done
check_all
mark "JWKS outage + key rotation"
curl -fs -X POST "$tx/dev/outage?on=true" >/dev/null
curl -fs -X POST "$tx/dev/rotate" >/dev/null
sleep 4
curl -fs -X POST "$tx/dev/outage?on=false" >/dev/null
mark "JWKS outage over"

# 5. SIGTERM of the server: graceful, must exit 0; then a restart.
at 75; check_all
mark "SIGTERM serve"
kill -TERM "$serve_pid"
code=0
for _ in $(seq 300); do kill -0 "$serve_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$serve_pid" 2>/dev/null && { kill -KILL "$serve_pid"; record_exit "serve-sigterm-timeout-30s" 1 0; }
{ wait "$serve_pid"; } 2>/dev/null || code=$?
record_exit "serve-sigterm" "$code" 0
mark "serve stopped (exit $code)"
sleep 1
start_serve
mark "serve restarted (after SIGTERM)"
check_all
touch "$marker"

code=0
wait "$sim_pid" || code=$?
sim_pid=""
[ "$code" = 0 ] || { echo "the simulator failed (exit $code)" >&2; exit 1; }
mark "simulator done"

python3 scripts/lib/fault_sim.py drain --psql "$psql_bin" --database-url "$DATABASE_URL" --timeout 90
check_all
# The workers drained: stop them and the server gracefully, all at once; each must exit 0 (a worker that needs
# longer than RISC_SHUTDOWN_TIMEOUT plus ServiceLifecycle's 5 s of cancellation traps, exit 132).
kill -TERM "$worker1_pid" "$worker2_pid" "$serve_pid"
for name in worker1 worker2 serve; do
  var=${name}_pid
  pid=${!var}
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; record_exit "$name-sigterm-timeout-30s" 1 0; }
  code=0; { wait "$pid"; } 2>/dev/null || code=$?
  record_exit "$name-final-sigterm" "$code" 0
  printf -v "$var" '%s' ""
done

status=0
python3 scripts/lib/fault_sim.py check --psql "$psql_bin" --database-url "$DATABASE_URL" --state "$work/state.json" \
  --results "$work/results.jsonl" --timeline "$work/timeline" --exits "$work/exits" --run-started "$run_started" ||
  status=$?
suite_status=$status
exit "$status"
