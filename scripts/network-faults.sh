#!/usr/bin/env bash
# Network faults between the service and PostgreSQL: a loopback TCP proxy (scripts/lib/fault_proxy.py) sits between
# the default `serve` (worker in-process, RISC_DATABASE_TIMEOUT 5 s) and a primary with a synchronous standby.
# Under a steady load of SETs, sign-ins, session checks and admin reads (scripts/lib/network_faults.py), it injects
# in turn:
#   blackhole  20 s: no byte forwarded, no connection closed;
#   reset      10 s: every connection reset, new ones reset at once;
#   vanish     20 s: as blackhole, but the connections open then stay silent for good, as if the host had died
#                    (no byte, no FIN, no RST); new connections go through after it;
#   failover:        the primary stopped with `pg_ctl -m immediate`, the synchronous standby promoted, the proxy
#                    repointed at it.
# It checks that every acknowledged SET is stored once and applied once, that every answer came within its bound
# (RISC_DATABASE_TIMEOUT plus a second), that /readyz said 503 during each outage, and that the service served
# again within 30 s of each heal; it prints, per fault, the recovery time and the longest answers. Exit 1 on any
# violation.
#
#   RISC_BIN=/path/to/risc-receiver scripts/network-faults.sh
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/pg.sh

bin=${RISC_BIN:-$(swift build --show-bin-path)/risc-receiver}
[ -x "$bin" ] || { echo "network-faults: no executable at $bin (set RISC_BIN)" >&2; exit 2; }
pg_ensure_installed
work=$(mktemp -d /tmp/risc-netfault.XXXXXX)
chmod 755 "$work"
primary_port=$(pg_free_port); standby_port=$(pg_free_port); tx_port=$(pg_free_port); rx_port=$(pg_free_port)
proxy_pid="" tx_pid="" serve_pid="" status=1
cleanup() {
  local pid
  for pid in "$serve_pid" "$tx_pid" "$proxy_pid"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  done
  pg_stop "$work/standby"
  pg_stop "$work/primary"
  if [ "$status" = 0 ]; then rm -rf "$work"; else echo "network-faults: logs kept in $work" >&2; fi
}
trap cleanup EXIT

# The primary, and a synchronous standby of it: a commit returns only once the standby has it, so a failover
# loses nothing that was acknowledged.
pg_start "$work/primary" "$primary_port"
pg_createdb "$primary_port" risc_netfault
DATABASE_URL="postgres://postgres@127.0.0.1:$primary_port/risc_netfault?sslmode=disable" "$bin" migrate >/dev/null 2>&1
mkdir -p "$work/standby"
[ "$(id -u)" -eq 0 ] && chown postgres:postgres "$work/standby"
chmod 700 "$work/standby"
pg_as_owner "$(pg_bin)/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres -D "$work/standby/data" -R -X stream -c fast \
  -d "application_name=standby1" >/dev/null
pg_as_owner sed -i "s#^unix_socket_directories.*#unix_socket_directories = '$work/standby'#" "$work/standby/data/postgresql.conf"
pg_as_owner "$(pg_bin)/pg_ctl" -D "$work/standby/data" -o "-p $standby_port" -l "$work/standby/server.log" -w -t 60 start >/dev/null
"$(pg_bin)/psql" -h 127.0.0.1 -p "$primary_port" -U postgres -d postgres -qtAc \
  "ALTER SYSTEM SET synchronous_standby_names = 'standby1'" -c 'SELECT pg_reload_conf()' >/dev/null
for _ in $(seq 100); do
  [ "$("$(pg_bin)/psql" -h 127.0.0.1 -p "$primary_port" -U postgres -d postgres -qtAc \
    "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby1' AND sync_state = 'sync'")" = 1 ] && break
  sleep 0.1
done

python3 scripts/lib/fault_proxy.py --listen 0 --target "$primary_port" --control 0 >"$work/proxy.out" 2>"$work/proxy.log" &
proxy_pid=$!
for _ in $(seq 100); do grep -q control= "$work/proxy.out" 2>/dev/null && break; sleep 0.1; done
proxy_port=$(sed -n 's/.*listen=\([0-9]*\).*/\1/p' "$work/proxy.out")
control_port=$(sed -n 's/.*control=\([0-9]*\).*/\1/p' "$work/proxy.out")

export DATABASE_URL="postgres://postgres@127.0.0.1:$proxy_port/risc_netfault?sslmode=disable"
export RISC_CLIENT_IDS=netfault-client RISC_HOST=127.0.0.1 RISC_PORT=$rx_port LOG_LEVEL=${LOG_LEVEL:-warning}
export RISC_CONFIGURATION_URL="http://127.0.0.1:$tx_port/.well-known/risc-configuration"
export GOOGLE_OPENID_CONFIGURATION_URL="http://127.0.0.1:$tx_port/.well-known/openid-configuration"
export RISC_ADMIN_TOKEN=netfault-admin-token
"$bin" dev transmitter --port "$tx_port" --audience netfault-client 2>"$work/transmitter.log" &
tx_pid=$!
"$bin" serve 2>"$work/serve.log" &
serve_pid=$!
for _ in $(seq 200); do
  curl -fs "http://127.0.0.1:$rx_port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done

set +e
python3 scripts/lib/network_faults.py --receiver "http://127.0.0.1:$rx_port" --transmitter "http://127.0.0.1:$tx_port" \
  --control-port "$control_port" --admin-token "$RISC_ADMIN_TOKEN" --database-timeout 5 \
  --psql "$(pg_bin)/psql -h 127.0.0.1 -U postgres -d risc_netfault -qtA" --primary-port "$primary_port" \
  --standby-port "$standby_port" \
  --stop-primary "$(declare -f pg_bin pg_as_owner); pg_as_owner \"\$(pg_bin)/pg_ctl\" -D '$work/primary/data' -m immediate -w stop" \
  --promote-standby "$(declare -f pg_bin pg_as_owner); pg_as_owner \"\$(pg_bin)/pg_ctl\" -D '$work/standby/data' -w promote"
status=$?
set -e
kill -0 "$serve_pid" 2>/dev/null || { echo "network-faults: serve exited during the run" >&2; status=1; }
exit "$status"
