#!/usr/bin/env bash
# The whole Sagaline local stack (PostgreSQL + Kafka + Kafka Connect) in one command.
#
# Usage: deploy/local/stack.sh up|down|status|reset
#   up      start PostgreSQL, then Kafka, then Kafka Connect with the Debezium connector
#           on the legacy database (installing/fetching on first use); idempotent:
#           already-running services are only health-checked
#   down    stop Kafka Connect, Kafka, then PostgreSQL (each attempted even if one fails)
#   status  exit 0 only if all three are running
#   reset   down + delete Kafka's and PostgreSQL's data (jars and packages are kept)
#
# Same environment variables as kafka.sh and postgres.sh
# (SAGALINE_KAFKA_PORT, SAGALINE_KAFKA_CONTROLLER_PORT, SAGALINE_KAFKA_SASL_PORT,
# SAGALINE_KAFKA_SCRAM_USER, SAGALINE_KAFKA_SCRAM_PASSWORD, SAGALINE_PG_PORT,
# SAGALINE_PG_FAST). The broker has a SASL/SCRAM listener (127.0.0.1:9094 by default):
# the test suite runs a worker, the API and the rebuild through it.
set -euo pipefail

SAGALINE_SCRIPT="stack"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

HERE="${SAGALINE_ROOT}/deploy/local"
KAFKA="${HERE}/kafka.sh"
POSTGRES="${HERE}/postgres.sh"
CONNECT="${HERE}/connect.sh"

cmd_up() {
  local t0=$SECONDS
  # Postgres first: it is the quicker one and, on a fresh machine, the apt
  # install is the step most likely to fail — fail before fetching jars.
  "$POSTGRES" start
  "$KAFKA" start
  # Debezium needs both: the legacy database (wal_level = logical) and the broker.
  "$CONNECT" start
  log "stack up in $((SECONDS - t0)) s"
  log "  Kafka bootstrap: $("$KAFKA" bootstrap)"
  log "  Kafka SASL/SCRAM: $("$KAFKA" sasl-bootstrap || echo off)"
  # Masked: the password is in .local/pg/pgpass (`postgres.sh url` prints it whole).
  log "  Database URL:    $("$POSTGRES" url | sed 's/:[^:@]*@/:***@/') (password: $("$POSTGRES" passfile))"
  log "  Kafka Connect:   $("$CONNECT" url) (connector legacy-school, topics legacy.*)"
}

# Run every stop even if an earlier one fails, then report overall failure.
cmd_down() {
  local rc=0
  "$CONNECT" stop || rc=$?
  "$KAFKA" stop || rc=$?
  "$POSTGRES" stop || rc=$?
  return "$rc"
}

cmd_status() {
  local rc=0
  "$CONNECT" status || rc=3
  "$KAFKA" status || rc=3
  "$POSTGRES" status || rc=3
  return "$rc"
}

cmd_reset() {
  local rc=0
  "$CONNECT" stop || rc=$?
  "$KAFKA" reset || rc=$?
  "$POSTGRES" reset || rc=$?
  return "$rc"
}

case "${1:-}" in
  up)     cmd_up ;;
  down)   cmd_down ;;
  status) cmd_status ;;
  reset)  cmd_reset ;;
  *)
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
    exit 2 ;;
esac
