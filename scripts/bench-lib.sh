# Shared set-up of the benchmarks (sourced): a release build, a throwaway cluster with fsync on, the
# development transmitter, and helpers. Sets bin, work, pg_port, tx_port, rx_port, pids, and exports the
# receiver's configuration. Everything started is stopped on exit.
. scripts/pg.sh

pg_ensure_installed
command -v wrk >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
swift build -c release --product risc-receiver >/dev/null 2>&1
bin=$(swift build -c release --show-bin-path)/risc-receiver

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
export RISC_CLIENT_IDS=bench-client RISC_HOST=127.0.0.1 RISC_PORT=$rx_port LOG_LEVEL=warning
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
