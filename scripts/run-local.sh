#!/usr/bin/env bash
# Runs risc-receiver locally with everything it needs: a private PostgreSQL cluster under .local/,
# the development transmitter standing in for Google, and the server configured against both.
# Ctrl-C stops all of it; the database is kept for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/pg.sh

RISC_PORT=${RISC_PORT:-8080}
TRANSMITTER_PORT=${TRANSMITTER_PORT:-8765}
PG_PORT=${PG_PORT:-54329}
CLIENT_ID=${CLIENT_ID:-dev-client.apps.googleusercontent.com}
state=$PWD/.local
mkdir -p "$state"
chmod 755 "$state"

pg_ensure_installed
# As root the cluster belongs to `postgres`, which must be able to reach its directory; a checkout under
# a private home directory is not reachable, so the cluster then lives under /var/tmp instead.
pg_dir=$state/postgres
if [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$state"; then
  pg_dir=/var/tmp/risc-receiver-local/postgres
  mkdir -p "$(dirname "$pg_dir")"
  chmod 755 "$(dirname "$pg_dir")"
fi
echo "Building risc-receiver..."
swift build --product risc-receiver
bin=$(swift build --show-bin-path)/risc-receiver

pg_start "$pg_dir" "$PG_PORT"
transmitter_pid=""
cleanup() {
  [ -n "$transmitter_pid" ] && kill "$transmitter_pid" 2>/dev/null && wait "$transmitter_pid" 2>/dev/null
  pg_stop "$pg_dir"
}
trap cleanup EXIT
pg_createdb "$PG_PORT" risc

export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/risc?sslmode=disable"
export RISC_CLIENT_IDS="$CLIENT_ID"
export RISC_CONFIGURATION_URL="http://127.0.0.1:$TRANSMITTER_PORT/.well-known/risc-configuration"
export RISC_HOST=127.0.0.1 RISC_PORT

"$bin" migrate
"$bin" dev transmitter --port "$TRANSMITTER_PORT" --audience "$CLIENT_ID" \
  --receiver "http://127.0.0.1:$RISC_PORT/risc/events" 2>"$state/transmitter.log" &
transmitter_pid=$!

cat <<TXT

risc-receiver is starting on http://127.0.0.1:$RISC_PORT (database: $DATABASE_URL)
Development transmitter: http://127.0.0.1:$TRANSMITTER_PORT (log: .local/transmitter.log)

Send an event from another terminal:
  $bin dev send sessions-revoked --sub 110169484474386276334
  $bin dev send account-disabled --sub 110169484474386276334 --reason hijacking
See what was stored:
  psql "$DATABASE_URL" -c 'SELECT id, jti, event_types, subject_sub, status FROM risc_events ORDER BY id DESC LIMIT 5'

TXT
"$bin" serve
