#!/usr/bin/env bash
# A PRIVATE PostgreSQL cluster for Sagaline development and CI, run from
# Debian's server binaries but completely separate from the system cluster
# (own data dir, own port, own socket dir; the system service is never touched).
#
# Usage: deploy/local/postgres.sh install|start|stop|status|url|psql|reset
#   install  apt-get install Debian's `postgresql` if no server binaries exist
#   start    install if needed, initdb once, start on 127.0.0.1:PORT, wait for
#            pg_isready, ensure role `sagaline` (password `sagaline`) and
#            database `sagaline` exist. Idempotent.
#   stop     clean ("fast") shutdown
#   status   exit 0 if running and accepting connections, 3 if not
#   url      print the SQLAlchemy URL the app uses
#   psql ... open psql as `sagaline` over TCP (extra args passed through)
#   reset    stop + delete the cluster's data (next start re-initialises)
#
# Environment:
#   SAGALINE_PG_PORT  TCP port on 127.0.0.1 (default 55432, not 5432, so it
#                     never collides with a system PostgreSQL)
#   SAGALINE_PG_FAST  =1: fsync/synchronous_commit/full_page_writes off.
#                     Faster tests, but a crash of the machine can corrupt
#                     the cluster — only for throwaway data.
#
# Where the data lives: <repo>/.local/pg/{data,run,log}. PostgreSQL refuses
# to run as root, so when we are root the cluster runs as the `postgres` OS
# user, which must be able to traverse every directory down to .local/pg.
# If it cannot (e.g. the clone lives under /root, mode 700), or the unix
# socket path would exceed the kernel's ~107-byte limit, the cluster goes to
# /tmp/sagaline-pg-<port> instead and .local/pg becomes a symlink to it, so
# every later call finds the same place. (Data under /tmp disappears on
# reboot; the next start simply re-initialises an empty cluster.)
set -euo pipefail

SAGALINE_SCRIPT="postgres"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PG_PORT="${SAGALINE_PG_PORT:-55432}"
PG_FAST="${SAGALINE_PG_FAST:-0}"
HOST="127.0.0.1"
DB_NAME="sagaline"
DB_USER="sagaline"
DB_PASSWORD="sagaline"
PG_OS_USER="postgres"
START_TIMEOUT_S=60

PG_LINK="${SAGALINE_LOCAL}/pg"
PG_FALLBACK="/tmp/sagaline-pg-${PG_PORT}"

# ---------------------------------------------------------------- helpers --

# Run a command as the OS user that owns the cluster: `postgres` when we are
# root (the server refuses root), ourselves otherwise. `cd /` first so tools
# do not complain that they cannot access the caller's cwd (e.g. /root).
as_pg() {
  if [[ $EUID -eq 0 ]]; then
    if command -v runuser >/dev/null 2>&1; then
      (cd / && runuser -u "$PG_OS_USER" -- "$@")
    else
      (cd / && su -s /bin/bash "$PG_OS_USER" -c "$(printf '%q ' "$@")")
    fi
  else
    "$@"
  fi
}

# Newest installed server binaries, e.g. /usr/lib/postgresql/15/bin.
newest_bindir() {
  local p
  p="$(printf '%s\n' /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n 1)"
  [[ -x "$p" ]] && dirname "$p"   # an unmatched glob stays literal: -x fails
}

# Binaries matching an existing cluster's major version (a data dir can only
# be run by the major version that created it), else the newest installed.
bindir() {
  local ver
  if [[ -n "${DATA:-}" && -f "${DATA}/PG_VERSION" ]]; then
    ver="$(cat "${DATA}/PG_VERSION")"
    [[ -x "/usr/lib/postgresql/${ver}/bin/postgres" ]] \
      || die "cluster in ${DATA} was created by PostgreSQL ${ver}, whose binaries are not installed (install postgresql-${ver}, or run: $0 reset)"
    echo "/usr/lib/postgresql/${ver}/bin"
    return 0
  fi
  newest_bindir || die "PostgreSQL server binaries not found (run: $0 install)"
}

# Sets BASE/DATA/RUN/LOGDIR from an existing layout. Returns 1 if the
# cluster was never created (nothing to stop / report).
locate() {
  if [[ -L "$PG_LINK" ]]; then
    BASE="$(readlink "$PG_LINK")"
  elif [[ -d "$PG_LINK" ]]; then
    BASE="$PG_LINK"
  else
    return 1
  fi
  DATA="${BASE}/data"; RUN="${BASE}/run"; LOGDIR="${BASE}/log"
}

# Like locate, but decides and creates the layout on first use.
locate_or_create() {
  if ! locate; then
    mkdir -p "$PG_LINK"
    chmod 755 "$PG_LINK"
    local sock="${PG_LINK}/run/.s.PGSQL.${PG_PORT}" why=""
    if [[ $EUID -eq 0 ]] && ! as_pg test -x "$PG_LINK"; then
      why="the '${PG_OS_USER}' user cannot traverse ${PG_LINK}"
    elif (( ${#sock} > 100 )); then
      why="socket path ${sock} is too long for a unix socket"
    fi
    if [[ -n "$why" ]]; then
      log "$why; using ${PG_FALLBACK} (symlinked from ${PG_LINK#"$SAGALINE_ROOT"/})"
      rmdir "$PG_LINK"
      ln -s "$PG_FALLBACK" "$PG_LINK"
    fi
    locate
  fi
  # The target of a symlink under /tmp vanishes on reboot: recreate it.
  mkdir -p "$BASE" "$DATA" "$RUN" "$LOGDIR"
  chmod 755 "$BASE"
  chmod 700 "$DATA"   # initdb/postgres insist on 0700 (or 0750)
  if [[ $EUID -eq 0 ]]; then
    chown "$PG_OS_USER:" "$DATA" "$RUN" "$LOGDIR"
  fi
}

pg_ctl_() { as_pg "$(bindir)/pg_ctl" -D "$DATA" "$@"; }

is_running() {
  locate || return 1
  [[ -f "${DATA}/PG_VERSION" ]] || return 1
  pg_ctl_ status >/dev/null 2>&1
}

is_ready() {
  "$(bindir)/pg_isready" -q -h "$HOST" -p "$PG_PORT" -d postgres -t 2 >/dev/null 2>&1
}

# psql as the superuser over the private unix socket (trust auth); SQL on stdin.
psql_super() {
  as_pg "$(bindir)/psql" -X -q -h "$RUN" -p "$PG_PORT" -U postgres -d postgres \
    -v ON_ERROR_STOP=1
}

# ------------------------------------------------------------- commands --

cmd_install() {
  if newest_bindir >/dev/null; then
    log "server binaries present: $(newest_bindir)"
    return 0
  fi
  [[ $EUID -eq 0 ]] || die "PostgreSQL is not installed and we are not root: run 'sudo apt-get install -y postgresql'"
  require_cmd apt-get "Only Debian/Ubuntu are supported; install PostgreSQL >= 14 by hand."
  export DEBIAN_FRONTEND=noninteractive
  local apt_opts=(-y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  log "installing Debian's postgresql package ..."
  # Try without `apt-get update` first: it is slow and often unnecessary;
  # fall back to it when the package lists are missing or stale.
  if ! apt-get install "${apt_opts[@]}" postgresql; then
    log "install failed, running apt-get update and retrying ..."
    apt-get update -q
    apt-get install "${apt_opts[@]}" postgresql
  fi
  newest_bindir >/dev/null || die "postgresql installed but no /usr/lib/postgresql/*/bin/postgres found"
  log "installed: $(newest_bindir)"
}

initdb_once() {
  [[ -f "${DATA}/PG_VERSION" ]] && return 0
  local bin
  bin="$(newest_bindir)"
  log "initialising cluster in ${DATA} ($(basename "$(dirname "$bin")"))"
  # trust auth for local socket and 127.0.0.1/::1 only (initdb's defaults for
  # those lines): it is a loopback-only throwaway dev database.
  # Locale C + UTF8: independent of whatever locales the machine has.
  as_pg "${bin}/initdb" -D "$DATA" -U postgres --auth=trust \
    --encoding=UTF8 --locale=C >"${LOGDIR}/initdb.log" 2>&1 \
    || { tail -n 20 "${LOGDIR}/initdb.log" >&2; die "initdb failed"; }
  # Our settings live in a separate file, rewritten on every start (so port
  # and SAGALINE_PG_FAST changes apply); postgresql.conf only includes it.
  echo "include_if_exists = 'sagaline.conf'" >>"${DATA}/postgresql.conf"
}

write_config() {
  local conf="${DATA}/sagaline.conf"
  {
    echo "# Generated by deploy/local/postgres.sh on every start — do not edit."
    echo "listen_addresses = '${HOST}'"
    echo "port = ${PG_PORT}"
    echo "unix_socket_directories = '${RUN}'"
    echo "max_connections = 200"
    echo "log_min_messages = warning"
    echo "log_line_prefix = '%m [%p] %q%u@%d '"
    # Logical decoding for the legacy school database's change data capture: the
    # Debezium connector (deploy/local/connect.sh) reads the WAL through a pgoutput
    # replication slot. Takes effect at server start only (see warn_wal_level).
    echo "wal_level = logical"
    if [[ "$PG_FAST" == "1" ]]; then
      echo "# SAGALINE_PG_FAST=1: durability off for speed (throwaway data only)"
      echo "fsync = off"
      echo "synchronous_commit = off"
      echo "full_page_writes = off"
    fi
  } >"$conf"
  [[ $EUID -eq 0 ]] && chown "$PG_OS_USER:" "$conf"
  chmod 600 "$conf"
}

ensure_db() {
  # \gexec runs the generated statement only when the SELECT returns a row,
  # which makes role/database creation idempotent (CREATE DATABASE cannot
  # run inside a DO block).
  psql_super <<SQL
SELECT format('CREATE ROLE %I LOGIN CREATEDB PASSWORD %L', '${DB_USER}', '${DB_PASSWORD}')
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${DB_USER}')\gexec
SELECT format('CREATE DATABASE %I OWNER %I', '${DB_NAME}', '${DB_USER}')
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = '${DB_NAME}')\gexec
SQL
}

wait_ready() {
  local deadline=$((SECONDS + START_TIMEOUT_S))
  until is_ready; do
    if (( SECONDS >= deadline )); then
      tail -n 30 "${LOGDIR}/postgres.log" >&2 || true
      die "PostgreSQL not ready on ${HOST}:${PG_PORT} after ${START_TIMEOUT_S} s"
    fi
    sleep 0.5
  done
}

# A cluster started before wal_level = logical was configured keeps `replica` until it
# is restarted; say so instead of letting the Debezium connector fail later.
warn_wal_level() {
  local level
  level="$(printf 'SHOW wal_level;\n' | as_pg "$(bindir)/psql" -X -q -At -h "$RUN" -p "$PG_PORT" -U postgres -d postgres 2>/dev/null || true)"
  if [[ "$level" != "logical" ]]; then
    log "WARNING: wal_level is '${level}', not 'logical': change data capture (Debezium) needs a restart of this cluster ($0 stop && $0 start)"
  fi
}

cmd_start() {
  cmd_install
  locate_or_create
  local t0=$SECONDS
  if is_running; then
    log "already running (data: ${DATA})"
    warn_wal_level
  else
    is_port_open "$HOST" "$PG_PORT" \
      && die "port ${HOST}:${PG_PORT} is already in use by another process (set SAGALINE_PG_PORT)"
    initdb_once
    write_config
    log "starting on ${HOST}:${PG_PORT} (data: ${DATA}, fast=${PG_FAST}) ..."
    # -w: pg_ctl waits until the server accepts connections (or gives up).
    # 9>&-: the server must not inherit our lock fd (see take_lock).
    pg_ctl_ -l "${LOGDIR}/postgres.log" -w -t "$START_TIMEOUT_S" start >/dev/null 9>&- \
      || { tail -n 30 "${LOGDIR}/postgres.log" >&2 || true; die "pg_ctl start failed"; }
  fi
  wait_ready
  ensure_db
  log "ready: $(cmd_url) ($((SECONDS - t0)) s)"
}

cmd_stop() {
  if ! is_running; then
    log "not running"
    return 0
  fi
  log "stopping ..."
  # fast = roll back open transactions, disconnect clients, clean checkpoint.
  if ! pg_ctl_ -m fast -w -t 60 stop >/dev/null; then
    log "fast shutdown timed out, using immediate shutdown"
    pg_ctl_ -m immediate -w -t 30 stop >/dev/null
  fi
  log "stopped"
}

cmd_status() {
  if is_running && is_ready; then
    log "running on ${HOST}:${PG_PORT} (data: ${DATA})"
    return 0
  elif is_running; then
    log "server process running (data: ${DATA}) but not accepting connections on ${HOST}:${PG_PORT}"
    return 3
  fi
  log "stopped"
  return 3
}

cmd_url() {
  echo "postgresql+psycopg://${DB_USER}:${DB_PASSWORD}@${HOST}:${PG_PORT}/${DB_NAME}"
}

cmd_psql() {
  locate || die "no cluster yet (run: $0 start)"
  PGPASSWORD="$DB_PASSWORD" "$(bindir)/psql" -h "$HOST" -p "$PG_PORT" -U "$DB_USER" -d "$DB_NAME" "$@"
}

cmd_reset() {
  cmd_stop
  if locate; then
    log "deleting cluster data in ${BASE}"
    rm -rf "$DATA" "$RUN" "$LOGDIR"
    if [[ -L "$PG_LINK" ]]; then
      rm -rf "$BASE"
      rm -f "$PG_LINK"
    fi
  fi
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    install) take_lock postgres; cmd_install ;;
    start)   take_lock postgres; cmd_start ;;
    stop)    take_lock postgres; cmd_stop ;;
    status)  cmd_status ;;
    url)     cmd_url ;;
    psql)    cmd_psql "$@" ;;
    reset)   take_lock postgres; cmd_reset ;;
    *)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
      exit 2 ;;
  esac
}

main "$@"
