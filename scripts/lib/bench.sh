# Shared set-up of the benchmarks (sourced): a release build, a throwaway cluster with fsync on, the
# development transmitter, and helpers. Sets bin, work, pg_port, tx_port, rx_port, pids, and exports the
# receiver's configuration; everything else (LOG_LEVEL included) is the service's default, as users run it.
# Everything started is stopped on exit.
. scripts/lib/pg.sh

pg_ensure_installed
command -v wrk >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
# The release build, as it ships (scripts/release.sh builds the same).
. scripts/lib/release-build.sh
release_build
bin=$release_bin

work=$(mktemp -d /tmp/risc-bench.XXXXXX)
chmod 755 "$work"
pg_port=$(pg_free_port); tx_port=$(pg_free_port); rx_port=$(pg_free_port)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pg_stop "$work/pg"
  rm -rf "$work"
}
trap cleanup EXIT

pg_start "$work/pg" "$pg_port"
pg_createdb "$pg_port" risc_bench
export DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/risc_bench?sslmode=disable"
export RISC_CLIENT_IDS=bench-client RISC_HOST=127.0.0.1 RISC_PORT=$rx_port
export RISC_CONFIGURATION_URL="http://127.0.0.1:$tx_port/.well-known/risc-configuration"
export GOOGLE_OPENID_CONFIGURATION_URL="http://127.0.0.1:$tx_port/.well-known/openid-configuration"
psql() { "$(pg_bin)/psql" -h 127.0.0.1 -p "$pg_port" -U postgres -d "${PGDATABASE:-risc_bench}" -qtA "$@"; }
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }

"$bin" migrate >/dev/null 2>&1
"$bin" dev transmitter --port "$tx_port" --audience bench-client 2>"$work/transmitter.log" &
pids+=($!)

# start_serve [ARGS...]: starts `serve` and waits until it and the transmitter answer; sets serve_pid.
start_serve() {
  "$bin" serve "$@" 2>>"$work/serve.log" &
  serve_pid=$!
  pids+=($serve_pid)
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$rx_port/healthz" >/dev/null && curl -fs "http://127.0.0.1:$tx_port/jwks" >/dev/null && return
    sleep 0.1
  done
}

# Helpers of the ingest benchmarks.
threads=${threads:-2}
ratio() { python3 -c "print(f'{$1 / $2:.2f}')"; }
cpu() { python3 benchmarks/cpu_seconds.py "$@"; }
postmaster=$(head -n 1 "$work/pg/data/postmaster.pid")
waiting() { psql -c "SELECT count(*) FROM risc_events WHERE status IN ('pending', 'retry')"; }
stored() { psql -c 'SELECT count(*) FROM risc_events'; }
# The server's own count of 202s for new SETs (duplicates are counted apart).
accepted_by_server() {
  curl -fs "http://127.0.0.1:$rx_port/metrics" |
    sed -n 's/^risc_sets_received_total{.*outcome="accepted".*} \([0-9.e+]*\)$/\1/p' |
    python3 -c 'import sys; print(int(sum(float(x) for x in sys.stdin)))'
}
# sign COUNT FIRST_USER FILE: COUNT sessions-revoked SETs for load-user-FIRST.., one per line.
sign() {
  curl -fs -X POST "http://127.0.0.1:$tx_port/dev/sign-batch" -H 'Content-Type: application/json' \
    -d "{\"type\":\"sessions-revoked\",\"count\":$1,\"first\":$2}" >"$3"
}
# warm_up: keys fetched and connections open before anything is counted.
warm_up() {
  curl -fs -X POST "http://127.0.0.1:$tx_port/dev/send" -H 'Content-Type: application/json' \
    -d "{\"type\":\"sessions-revoked\",\"sub\":\"warmup\",\"target\":\"http://127.0.0.1:$rx_port/risc/events\"}" >/dev/null
}
# run_wrk TOKENS RATE [SECONDS]: POSTs each SET once; RATE 0 is as fast as possible, else an open loop.
run_wrk() {
  RISC_BENCH_TOKENS=$1 RISC_BENCH_RATE=$2 RISC_BENCH_THREADS=$threads RISC_BENCH_CONNECTIONS=$connections \
    wrk -t"$threads" -c"$connections" -d"${3:-$seconds}s" --timeout 10s -s benchmarks/post-sets.lua \
    "http://127.0.0.1:$rx_port" | grep '^RESULT'
}
# fresh_database NAME: a new, migrated database, which the server and psql then use.
fresh_database() {
  pg_createdb "$pg_port" "$1"
  export DATABASE_URL="postgres://postgres@127.0.0.1:$pg_port/$1?sslmode=disable" PGDATABASE=$1
  "$bin" migrate >/dev/null 2>&1
  psql -c 'CHECKPOINT' >/dev/null
}
# check_rows STORED ACCEPTED: "equal" or "MISMATCH", for the report; callers set rows_mismatch=1 on a mismatch.
rows_mismatch=0
check_rows() { if [ "$1" = "$2" ]; then echo equal; else echo MISMATCH; fi; }
