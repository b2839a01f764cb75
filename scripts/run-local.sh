#!/usr/bin/env bash
# Runs risc-receiver locally with everything it needs: a private PostgreSQL cluster under .local/,
# the development transmitter standing in for Google, and the server configured against both.
# Ctrl-C stops all of it; the database is kept for the next run.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/pg.sh

RISC_PORT=${RISC_PORT:-8080}
TRANSMITTER_PORT=${TRANSMITTER_PORT:-8765}
PG_PORT=${PG_PORT:-54329}
CLIENT_ID=${CLIENT_ID:-dev-client.apps.googleusercontent.com}
# RISC_LOCAL_DIR: where the database and local secrets live (scripts/check-run-local.sh uses a scratch one).
state=${RISC_LOCAL_DIR:-$PWD/.local}
mkdir -p "$state"
chmod 755 "$state"

pg_ensure_installed
# As root the cluster belongs to `postgres`, which must be able to reach its directory; a checkout under
# a private home directory is not reachable, so the cluster then lives under /var/tmp instead.
pg_dir=$state/postgres
if [ "$(id -u)" -eq 0 ] && ! runuser -u postgres -- test -x "$state"; then
  pg_dir=/var/tmp/risc-receiver-local/postgres
  [ "$state" = "$PWD/.local" ] || pg_dir=/var/tmp/risc-receiver-local/$(printf %s "$state" | md5sum | cut -c1-8)/postgres
  mkdir -p "$(dirname "$pg_dir")"
  chmod 755 "$(dirname "$pg_dir")"
fi
# A second run while the first is still up: say so at once, not after a rebuild and a failing pg_ctl.
if [ -f "$pg_dir/data/postmaster.pid" ] && kill -0 "$(head -1 "$pg_dir/data/postmaster.pid")" 2>/dev/null; then
  echo "run-local.sh: risc-receiver is already running locally (its PostgreSQL, pid $(head -1 "$pg_dir/data/postmaster.pid"), serves $pg_dir); use that one (Ctrl-C in its terminal stops it), or, if that run is gone, stop its database: runuser -u postgres -- pg_ctl -D $pg_dir/data stop (without runuser when not root)" >&2
  exit 1
fi
for named in "RISC_PORT=$RISC_PORT" "TRANSMITTER_PORT=$TRANSMITTER_PORT" "PG_PORT=$PG_PORT"; do
  if (exec 3<>"/dev/tcp/127.0.0.1/${named#*=}") 2>/dev/null; then
    echo "run-local.sh: port ${named#*=} (${named%%=*}) is already in use on 127.0.0.1; set ${named%%=*} to a free port" >&2
    exit 1
  fi
done
echo "Building risc-receiver (the first build takes 5-10 minutes)..."
swift build --product risc-receiver
bin=$(swift build --show-bin-path)/risc-receiver

pg_start "$pg_dir" "$PG_PORT"
serve_pid="" transmitter_pid=""
# Whatever ends this script (Ctrl-C, SIGTERM, a closed terminal's SIGHUP, or the server exiting), everything it
# started stops, the server first: a server left running would hold its port and retry the stopped database
# every second. The server and transmitter run in the background so that the script is free to act on a
# signal at once (bash runs a trap only after a foreground child has exited).
stop() {
  local pid=$1
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  trap '' INT TERM HUP
  stop "$serve_pid"
  stop "$transmitter_pid"
  pg_stop "$pg_dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
pg_createdb "$PG_PORT" risc

export DATABASE_URL="postgres://postgres@127.0.0.1:$PG_PORT/risc?sslmode=disable"
export RISC_CLIENT_IDS="$CLIENT_ID"
export RISC_CONFIGURATION_URL="http://127.0.0.1:$TRANSMITTER_PORT/.well-known/risc-configuration"
export GOOGLE_OPENID_CONFIGURATION_URL="http://127.0.0.1:$TRANSMITTER_PORT/.well-known/openid-configuration"
export RISC_HOST=127.0.0.1 RISC_PORT
# Local secrets, made once and kept private under .local/.
umask 077
[ -s "$state/service-token" ] || head -c 32 /dev/urandom | base64 | tr -d '/+=\n' >"$state/service-token"
[ -s "$state/vault-key" ] || head -c 32 /dev/urandom | base64 >"$state/vault-key"
[ -s "$state/admin-token" ] || head -c 32 /dev/urandom | base64 | tr -d '/+=\n' >"$state/admin-token"
RISC_SERVICE_TOKEN=$(cat "$state/service-token")
RISC_VAULT_KEY=$(cat "$state/vault-key")
RISC_ADMIN_TOKEN=$(cat "$state/admin-token")
export RISC_SERVICE_TOKEN RISC_VAULT_KEY RISC_ADMIN_TOKEN
export GOOGLE_CLIENT_SECRET_FILES="$state/client_secret.json"
export GOOGLE_SERVICE_ACCOUNT_FILE="$state/service-account.json"
export RISC_MANAGEMENT_URL="http://127.0.0.1:$TRANSMITTER_PORT/v1beta"
# The delivery probe: every 30 s, a verification SET through the transmitter's fake management API.
export RISC_VERIFY_INTERVAL=30 RISC_DELIVERY_URL="http://127.0.0.1:$RISC_PORT/risc/events"
# Shared Signals transmitters push to RISC_PUBLIC_URL/ssf/NAME/events.
export RISC_PUBLIC_URL="http://127.0.0.1:$RISC_PORT"
# Everything the server reads, for the other commands in another terminal (admin, stream, config check,
# vault rotate): set -a; . .local/env; set +a
cat >"$state/env" <<ENV
DATABASE_URL=$DATABASE_URL
RISC_CLIENT_IDS=$RISC_CLIENT_IDS
RISC_CONFIGURATION_URL=$RISC_CONFIGURATION_URL
GOOGLE_OPENID_CONFIGURATION_URL=$GOOGLE_OPENID_CONFIGURATION_URL
RISC_HOST=$RISC_HOST
RISC_PORT=$RISC_PORT
RISC_ADMIN_TOKEN=$RISC_ADMIN_TOKEN
RISC_SERVICE_TOKEN=$RISC_SERVICE_TOKEN
RISC_VAULT_KEY=$RISC_VAULT_KEY
GOOGLE_CLIENT_SECRET_FILES=$GOOGLE_CLIENT_SECRET_FILES
GOOGLE_SERVICE_ACCOUNT_FILE=$GOOGLE_SERVICE_ACCOUNT_FILE
RISC_MANAGEMENT_URL=$RISC_MANAGEMENT_URL
RISC_VERIFY_INTERVAL=$RISC_VERIFY_INTERVAL
RISC_DELIVERY_URL=$RISC_DELIVERY_URL
RISC_PUBLIC_URL=$RISC_PUBLIC_URL
ENV
umask 022

"$bin" migrate
rm -f "$GOOGLE_CLIENT_SECRET_FILES"
"$bin" dev transmitter --port "$TRANSMITTER_PORT" --audience "$CLIENT_ID" \
  --receiver "http://127.0.0.1:$RISC_PORT/risc/events" --write-client-secret "$GOOGLE_CLIENT_SECRET_FILES" \
  --write-service-account "$GOOGLE_SERVICE_ACCOUNT_FILE" \
  2>"$state/transmitter.log" &
transmitter_pid=$!
# The server reads the client-secret file at start-up: wait for the transmitter to write it.
for _ in $(seq 100); do [ -s "$GOOGLE_CLIENT_SECRET_FILES" ] && break; sleep 0.1; done
[ -s "$GOOGLE_CLIENT_SECRET_FILES" ] || { echo "the development transmitter did not start; see .local/transmitter.log" >&2; exit 1; }

# The walkthrough names the state directory as the user would type it: .local when it is the default.
shown=${state#"$PWD"/}
sink_port=${SINK_PORT:-8766}
# The dev commands talk to the transmitter on 127.0.0.1:8765 unless told otherwise.
dev_flags=""
[ "$TRANSMITTER_PORT" = 8765 ] || dev_flags=" --transmitter http://127.0.0.1:$TRANSMITTER_PORT"
# Pasted as a whole, or line by line, each "# →" is what that line prints (scripts/check-run-local.sh runs it
# as printed and checks every one).
cat <<TXT

risc-receiver is starting on http://127.0.0.1:$RISC_PORT (database: $DATABASE_URL)
Development transmitter: http://127.0.0.1:$TRANSMITTER_PORT (log: $shown/transmitter.log)

From another terminal, in this directory (the worker runs inside the server):
  set -a; . $shown/env; set +a       # what the server reads, for the admin and stream commands
  # sign a user in with a Google-style ID token, and check the session
  session=\$(curl -s -d idtoken=\$($bin dev idtoken$dev_flags --sub 42 --email user@example.com) http://127.0.0.1:$RISC_PORT/tokensignin | sed -E 's/.*"session_token":"([^"]+)".*/\\1/')
  curl -s -H "Authorization: Bearer \$session" http://127.0.0.1:$RISC_PORT/v1/session; echo   # → "sub":"42"
  # store a refresh token in the vault (the app's backend does this, with the service token)
  curl -s -H "Authorization: Bearer \$RISC_SERVICE_TOKEN" -H 'Content-Type: application/json' \\
    -d '{"sub":"42","refresh_token":"1//0gLocalRefreshToken123","client_id":"$CLIENT_ID"}' http://127.0.0.1:$RISC_PORT/v1/grants; echo   # → "grant_id"
  # send events as Google would, and watch them act
  $bin dev send sessions-revoked$dev_flags --sub 42    # → HTTP 202
  curl -s -H "Authorization: Bearer \$session" http://127.0.0.1:$RISC_PORT/v1/session; echo   # → {"error":"session_revoked"}
  $bin dev send token-revoked$dev_flags --token 1//0gLocalRefreshToken123 --alg hash   # → HTTP 202
  $bin dev send account-disabled$dev_flags --sub 42    # → HTTP 202
  curl -s -d idtoken=\$($bin dev idtoken$dev_flags --sub 42 --email user@example.com) http://127.0.0.1:$RISC_PORT/tokensignin; echo   # → {"error":"account_disabled"}
  $bin dev send account-enabled$dev_flags --sub 42     # → HTTP 202
  sleep 1   # an ID token must be issued after the revocation, and Google's iat counts whole seconds
  curl -s -d idtoken=\$($bin dev idtoken$dev_flags --sub 42 --email user@example.com) http://127.0.0.1:$RISC_PORT/tokensignin; echo   # → "session_token"
  # see what was stored and done
  $bin users show 42          # → 1 active, 1 revoked
  $bin events list --sub 42   # → account-enabled
  $bin stats                  # → queue depth
  curl -s -H "Authorization: Bearer \$RISC_ADMIN_TOKEN" http://127.0.0.1:$RISC_PORT/admin/v1/users/42; echo   # → "sign_in_disabled":false
  # register the webhook with the transmitter's fake management API, and prove the round trip
  $bin stream update --url http://127.0.0.1:$RISC_PORT/risc/events   # → Stream updated
  $bin stream verify --wait --timeout 10   # → Verification SET received and stored
  sleep 3; $bin stream health   # → healthy
  # a prober checks delivery every 30 s, and within seconds of a change made here
  $bin stream disable           # → Stream disabled.
  sleep 3; $bin stream health   # → problem: the stream is disabled
  $bin stream enable            # → Stream enabled.
  # tell the app's services of each action: a subscriber that checks signatures and prints deliveries
  secret=\$($bin subscribers add --url http://127.0.0.1:$sink_port/ --json | sed -E 's/.*"secret":"([^"]+)".*/\\1/')
  $bin dev webhook-sink --port $sink_port --secret "\$secret" &
  sleep 1; $bin dev send account-disabled$dev_flags --sub 42 --reason hijacking   # → revoke_sessions
  sleep 2; $bin notifications list   # → delivered
  # a second transmitter: the development Shared Signals transmitter (under /ssf), on a stream the service creates
  printf 'ssf-dev-client-secret\\n' | $bin transmitters add dev-ssf --issuer http://127.0.0.1:$TRANSMITTER_PORT/ssf --client-id ssf-dev-client --client-secret -   # → dev-ssf
  $bin streams create dev-ssf   # → created
  $bin streams verify dev-ssf --wait --timeout 10   # → arrived and stored
  # its CAEP session-revoked names a user by email: the sessions of whoever signed in with it end
  ann=\$(curl -s -d idtoken=\$($bin dev idtoken$dev_flags --sub 43 --email ann@example.com) http://127.0.0.1:$RISC_PORT/tokensignin | sed -E 's/.*"session_token":"([^"]+)".*/\\1/')
  curl -s -d '{"type":"session-revoked","sub_id":{"format":"email","email":"ann@example.com"}}' http://127.0.0.1:$TRANSMITTER_PORT/dev/ssf/send; echo   # → "status":202
  curl -s -H "Authorization: Bearer \$ann" http://127.0.0.1:$RISC_PORT/v1/session; echo   # → {"error":"session_revoked"}
  sleep 2; $bin notifications list --json   # → "transmitter":"dev-ssf"

TXT
"$bin" serve &
serve_pid=$!
wait "$serve_pid"
