#!/usr/bin/env bash
# Checks the README's run command where a user's first hour goes wrong:
# - started a second time, or with a port in use, scripts/run-local.sh must say so at once (within 5 s, before
#   any build) and exit non-zero;
# - the walkthrough it prints, pasted as printed, shows what each of its comments says (check_walkthrough.py);
# - ended by SIGTERM or SIGHUP (a closed terminal) rather than Ctrl-C, it stops everything it started.
# Runs on free ports with a scratch state directory, so a developer's own .local is untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/pg.sh

scratch=$(mktemp -d /tmp/risc-run-local.XXXXXX)
chmod 755 "$scratch"
export RISC_LOCAL_DIR=$scratch/state RISC_PORT=$(pg_free_port) TRANSMITTER_PORT=$(pg_free_port) PG_PORT=$(pg_free_port)
first=""
cleanup() {
  # The whole process group (setsid): the server and transmitter stop, then run-local.sh stops PostgreSQL.
  [ -n "$first" ] && kill -INT -- "-$first" 2>/dev/null && wait "$first" 2>/dev/null
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "check-run-local: $*" >&2; exit 1; }

# start_first LOG: run-local.sh in a session of its own (setsid), until it serves /healthz. With SIGHUP's default
# action restored: under nohup (or a CI runner that ignores it) bash would inherit SIGHUP ignored, and a signal
# ignored on entry cannot be trapped, so the SIGHUP check below would test the runner, not the script.
start_first() {
  setsid env --default-signal=HUP scripts/run-local.sh >"$1" 2>&1 &
  first=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$RISC_PORT/healthz" >/dev/null 2>&1 && break
    kill -0 "$first" 2>/dev/null || { cat "$1" >&2; fail "run-local.sh ended early"; }
    sleep 0.5
  done
  curl -sf "http://127.0.0.1:$RISC_PORT/healthz" >/dev/null || fail "run-local.sh did not serve /healthz"
}
start_first "$scratch/first.log"

# expect_refusal NAME PATTERN: a second run-local.sh (with the environment as set) fails fast, saying PATTERN.
expect_refusal() {
  local name=$1 pattern=$2 started status=0
  started=$(date +%s%N)
  timeout 30 scripts/run-local.sh >"$scratch/$name.log" 2>&1 || status=$?
  local elapsed_ms=$((($(date +%s%N) - started) / 1000000))
  [ "$status" -ne 0 ] || fail "$name: exit 0"
  [ "$elapsed_ms" -lt 5000 ] || fail "$name: took $elapsed_ms ms"
  grep -q "$pattern" "$scratch/$name.log" || { cat "$scratch/$name.log" >&2; fail "$name: no line saying '$pattern'"; }
  echo "check-run-local: $name: exit $status after $elapsed_ms ms: $(grep "$pattern" "$scratch/$name.log")"
}
# .local/env holds what the other commands need, in another terminal.
(
  set -a; . "$RISC_LOCAL_DIR/env"; set +a
  "$(swift build --show-bin-path)/risc-receiver" config check >/dev/null || fail "config check with .local/env"
  "$(swift build --show-bin-path)/risc-receiver" stats >/dev/null || fail "stats with .local/env"
)
echo "check-run-local: config check and stats work with .local/env"
expect_refusal second-run "already running locally"
RISC_LOCAL_DIR=$scratch/other PG_PORT=$(pg_free_port) expect_refusal busy-port "port $RISC_PORT (RISC_PORT) is already in use"

export SINK_PORT=$(pg_free_port)
python3 scripts/lib/check_walkthrough.py "$scratch/first.log" || fail "the walkthrough does not show what it says"

# expect_stopped_by SIGNAL LOG: that signal, sent to run-local.sh alone (as a service manager or a closing terminal
# would), stops the server, the transmitter and PostgreSQL, and frees their ports, within 30 s. On failure, what
# is still running and the end of the script's output say where it stopped.
expect_stopped_by() {
  local signal=$1 log=$2 started
  started=$(date +%s%N)
  kill "-$signal" "$first"
  for _ in $(seq 300); do kill -0 "$first" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$first" 2>/dev/null; then
    pgrep -a -s "$first" >&2 || true
    tail -n 20 "$log" >&2
    fail "SIG$signal: run-local.sh still running after 30 s"
  fi
  for _ in $(seq 100); do pgrep -s "$first" >/dev/null || break; sleep 0.1; done
  local left
  left=$(pgrep -a -s "$first" || true)
  [ -z "$left" ] || fail "SIG$signal: run-local.sh left these running: $left"
  for port in "$RISC_PORT" "$TRANSMITTER_PORT" "$PG_PORT"; do
    ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || fail "SIG$signal: port $port still in use"
  done
  echo "check-run-local: SIG$signal stopped everything in $((($(date +%s%N) - started) / 1000000)) ms"
  first=""
}
expect_stopped_by TERM "$scratch/first.log"
start_first "$scratch/again.log"
expect_stopped_by HUP "$scratch/again.log"
echo "check-run-local: ok"
