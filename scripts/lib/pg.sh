# Shell helpers for a private PostgreSQL cluster (sourced by the other scripts).
# PostgreSQL refuses to run as root, so as root the cluster belongs to the `postgres` user.

pg_bin() {
  local dir
  dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  [ -n "$dir" ] && echo "$dir"
}

# Installs PostgreSQL from Debian when it is missing.
pg_ensure_installed() {
  if [ -z "$(pg_bin)" ]; then
    echo "Installing PostgreSQL..." >&2
    if [ "$(id -u)" -eq 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    else
      sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
      sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
    fi
  fi
  [ -n "$(pg_bin)" ] || { echo "PostgreSQL could not be installed" >&2; return 1; }
}

# tools_ensure_installed COMMAND:PACKAGE...: installs each Debian package whose command is missing.
tools_ensure_installed() {
  local missing=() pair
  for pair in "$@"; do command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  tools_ensure_installed_package "${missing[@]}"
}

# tools_ensure_installed_package PACKAGE...: installs Debian packages that no command names.
tools_ensure_installed_package() {
  echo "Installing $*..." >&2
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# Runs a command as the cluster's owner.
pg_as_owner() {
  # From /, which the owner can always enter (the caller's directory may be private).
  if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

pg_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# pg_start DIR PORT: creates the cluster in DIR if needed and starts it on 127.0.0.1:PORT,
# with its socket in DIR. Durability settings stay at PostgreSQL's defaults (fsync on). The test suites run in
# parallel, each with a pool of its own: 200 connections were too few (refused connections became 503s).
pg_start() {
  local dir=$1 port=$2 bin
  bin=$(pg_bin)
  mkdir -p "$dir"
  if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$dir"; fi
  chmod 700 "$dir"
  if [ ! -f "$dir/data/PG_VERSION" ]; then
    pg_as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; return 1; }
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
max_connections = 1000
shared_buffers = 256MB
CONF
  fi
  pg_as_owner "$bin/pg_ctl" -D "$dir/data" -o "-p $port" -l "$dir/server.log" -w -t 60 start >/dev/null ||
    { tail -n 20 "$dir/server.log" >&2; return 1; }
}

pg_stop() {
  local dir=$1
  [ -f "$dir/data/postmaster.pid" ] || return 0
  pg_as_owner "$(pg_bin)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
}

# pg_createdb PORT NAME
pg_createdb() {
  "$(pg_bin)/psql" -h 127.0.0.1 -p "$1" -U postgres -d postgres -qtAc "SELECT 1 FROM pg_database WHERE datname = '$2'" |
    grep -q 1 || "$(pg_bin)/createdb" -h 127.0.0.1 -p "$1" -U postgres "$2"
}
