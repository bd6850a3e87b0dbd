#!/usr/bin/env bash
# Jaeger v2 (one binary: an OpenTelemetry Collector with Jaeger's storage and query
# extensions) for local runs and the tests: the trace backend Sagaline's OTLP exporter sends
# to when tracing is on. Built ONCE from the Go module proxy (no Docker, no release tarball:
# only package registries are reachable here), in a scratch module:
#   go mod init scratch && go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@VERSION
#   go build -o BINARY github.com/jaegertracing/jaeger/cmd/jaeger
# about 6 minutes on 2 cores the first time; the binary is kept in .local/jaeger/bin and in a
# per-user cache outside the clone (SAGALINE_JAEGER_CACHE), so another clone on this machine
# (CI runs a fresh clone) copies it instead of building again.
#
# Usage: deploy/local/jaeger.sh build|fetch|start|stop|status|url|otlp|logs|version
#   build, fetch  build the binary (no-op when .local/jaeger/bin holds one of VERSION;
#              copied from the per-user cache when that holds one); `make install` runs it
#   start      build if needed, write the config, start Jaeger in the background with
#              in-memory storage, every listener on 127.0.0.1, and wait until the OTLP
#              receivers and the query API answer (timeout: 60 s); a no-op when it runs,
#              and when a Jaeger started elsewhere (another clone) answers on its ports
#   stop       SIGTERM, wait, SIGKILL as a last resort (the traces are gone: memory only)
#   status     exit 0 if Jaeger is running, 3 if not
#   url        print the query UI/API base URL (http://127.0.0.1:16686)
#   otlp       print the OTLP/HTTP endpoint (http://127.0.0.1:4318), what
#              OTEL_EXPORTER_OTLP_ENDPOINT takes
#   otlp-grpc  print the OTLP/gRPC receiver's host:port (127.0.0.1:4317)
#   logs       the last lines of Jaeger's log
#   version    print the Jaeger version this script builds
#
# Environment:
#   SAGALINE_JAEGER_VERSION          the jaeger module version built (default v1.76.0)
#   SAGALINE_JAEGER_OTLP_GRPC_PORT   OTLP/gRPC receiver port   (default 4317)
#   SAGALINE_JAEGER_OTLP_HTTP_PORT   OTLP/HTTP receiver port   (default 4318)
#   SAGALINE_JAEGER_UI_PORT          query UI and HTTP API port (default 16686)
#   SAGALINE_JAEGER_QUERY_GRPC_PORT  query gRPC API port       (default 16685)
#   SAGALINE_JAEGER_MAX_TRACES       traces kept in memory, oldest dropped first
#                                    (default 100000)
#   SAGALINE_JAEGER_CACHE            per-user binary cache (default
#                                    ${XDG_CACHE_HOME:-~/.cache}/sagaline/jaeger); `off`:
#                                    none, every clone builds its own
#   GO                               the go command (default: go in PATH, else
#                                    /usr/local/go/bin/go)
#
# Layout (all under the git-ignored .local/):
#   .local/jaeger/bin/jaeger-VERSION   the binary
#   .local/jaeger/build                the scratch module of the build
#   .local/jaeger/config.yaml          the generated collector config
#   .local/jaeger/logs/jaeger.log      its output; jaeger.pid
set -euo pipefail

SAGALINE_SCRIPT="jaeger"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

VERSION="${SAGALINE_JAEGER_VERSION:-v1.76.0}"
HOST="127.0.0.1"
OTLP_GRPC_PORT="${SAGALINE_JAEGER_OTLP_GRPC_PORT:-4317}"
OTLP_HTTP_PORT="${SAGALINE_JAEGER_OTLP_HTTP_PORT:-4318}"
UI_PORT="${SAGALINE_JAEGER_UI_PORT:-16686}"
QUERY_GRPC_PORT="${SAGALINE_JAEGER_QUERY_GRPC_PORT:-16685}"
MAX_TRACES="${SAGALINE_JAEGER_MAX_TRACES:-100000}"
START_TIMEOUT_S=60
STOP_TIMEOUT_S=20
BUILD_LOCK_WAIT_S=1200
MODULE="github.com/jaegertracing/jaeger"

for _p in "$OTLP_GRPC_PORT" "$OTLP_HTTP_PORT" "$UI_PORT" "$QUERY_GRPC_PORT" "$MAX_TRACES"; do
  [[ "$_p" =~ ^[0-9]+$ ]] || { echo "SAGALINE_JAEGER_* ports and MAX_TRACES must be numbers (got '${_p}')" >&2; exit 2; }
done
[[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] \
  || { echo "SAGALINE_JAEGER_VERSION must look like v1.76.0 (got '${VERSION}')" >&2; exit 2; }

JDIR="${SAGALINE_LOCAL}/jaeger"
BIN="${JDIR}/bin/jaeger-${VERSION}"
BUILD="${JDIR}/build"
CONF="${JDIR}/config.yaml"
LOGS="${JDIR}/logs"
PIDFILE="${JDIR}/jaeger.pid"
CACHE="${SAGALINE_JAEGER_CACHE:-${XDG_CACHE_HOME:-${HOME}/.cache}/sagaline/jaeger}"

go_cmd() {
  if [[ -n "${GO:-}" ]]; then
    echo "$GO"
  elif command -v go >/dev/null 2>&1; then
    command -v go
  elif [[ -x /usr/local/go/bin/go ]]; then
    echo /usr/local/go/bin/go
  else
    die "no Go toolchain (go in PATH or /usr/local/go/bin/go; or set GO): it builds Jaeger once"
  fi
}

# binary_is VERSION FILE: FILE is an executable built from the jaeger module at VERSION,
# as the Go toolchain recorded it in the binary (`go version -m`); without Go, its name says.
binary_is() {
  local file="$2" go
  [[ -x "$file" ]] || return 1
  go="$(go_cmd 2>/dev/null)" || return 0
  "$go" version -m "$file" 2>/dev/null | grep -Eq "^[[:space:]]+(dep|mod)[[:space:]]+${MODULE}[[:space:]]+$1([[:space:]]|$)"
}

is_built() { binary_is "$VERSION" "$BIN"; }

# The build lock is its own (a build takes minutes; take_lock waits 300 s at most).
take_build_lock() {
  mkdir -p "$JDIR"
  exec 8>"${SAGALINE_LOCAL}/.jaeger-build.lock"
  if ! flock -n 8; then
    log "waiting for another Jaeger build to finish ..."
    flock -w "$BUILD_LOCK_WAIT_S" 8 || die "could not get the Jaeger build lock within ${BUILD_LOCK_WAIT_S} s"
  fi
}

cmd_build() {
  local cached="${CACHE}/jaeger-${VERSION}"
  if is_built; then
    log "Jaeger ${VERSION} already built (${BIN#"$SAGALINE_ROOT"/})"
    keep_in_cache
    return 0
  fi
  take_build_lock
  is_built && { log "Jaeger ${VERSION} built meanwhile"; return 0; }
  mkdir -p "${JDIR}/bin"
  if [[ "$CACHE" != "off" ]] && binary_is "$VERSION" "$cached"; then
    cp "$cached" "${BIN}.tmp" && mv "${BIN}.tmp" "$BIN"
    log "Jaeger ${VERSION} copied from the per-user cache (${cached})"
    return 0
  fi
  local go t0=$SECONDS
  go="$(go_cmd)"
  log "building Jaeger ${VERSION} from the Go module proxy ($("$go" version | awk '{print $3}')): about 6 minutes on 2 cores, once ..."
  # A scratch module of our own: `go get -tool` pins the jaeger module and its whole
  # dependency graph (go.mod/go.sum) as Jaeger's own go.mod states them; the build then
  # links its cmd/jaeger. Go's module and build caches are Go's own (GOMODCACHE, GOCACHE),
  # so a second build on this machine only links. Low priority: it must not starve a
  # broker or a test running beside it on a small box.
  rm -rf "$BUILD"
  mkdir -p "$BUILD"
  if ! (
    cd "$BUILD"
    "$go" mod init scratch
    GOFLAGS=-mod=mod "$go" get -tool "${MODULE}/cmd/jaeger@${VERSION}"
    nice -n 10 "$go" build -o "${BIN}.tmp" "${MODULE}/cmd/jaeger"
  ) >"${JDIR}/build.log" 2>&1; then
    tail -n 30 "${JDIR}/build.log" >&2
    die "the Jaeger build failed (above: the end of ${JDIR#"$SAGALINE_ROOT"/}/build.log)"
  fi
  binary_is "$VERSION" "${BIN}.tmp" || die "the built binary is not jaeger ${VERSION} (go version -m ${BIN}.tmp)"
  mv "${BIN}.tmp" "$BIN"
  keep_in_cache
  log "built ${BIN#"$SAGALINE_ROOT"/} in $((SECONDS - t0)) s"
}

# A copy of the binary in the per-user cache (once), for the next clone on this machine.
keep_in_cache() {
  local cached="${CACHE}/jaeger-${VERSION}"
  [[ "$CACHE" != "off" ]] || return 0
  binary_is "$VERSION" "$cached" && return 0
  if ! { mkdir -p "$CACHE" && cp "$BIN" "${cached}.tmp.$$" && mv "${cached}.tmp.$$" "$cached"; }; then
    rm -f "${cached}.tmp.$$"
    log "WARNING: could not keep a copy in ${CACHE} (another clone builds again)"
  fi
}

# Jaeger's all-in-one configuration (cmd/jaeger/internal/all-in-one.yaml of the version
# built), cut to what a local run uses: OTLP in (gRPC and HTTP), the memory store, the query
# UI and API. Every listener on 127.0.0.1; no Jaeger/Zipkin receivers, no remote sampling,
# no health, expvar, zpages or pprof endpoints, and no internal metrics endpoint (level none:
# the collector's default would listen on port 8888). The query service's own traces are
# off: they would land in the store beside the ones tests look for.
write_config() {
  mkdir -p "$JDIR" "$LOGS"
  cat >"$CONF" <<EOF
# Generated by deploy/local/jaeger.sh on every start; edits are overwritten.
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: info

extensions:
  jaeger_query:
    storage:
      traces: memstore
    enable_tracing: false
    http:
      endpoint: ${HOST}:${UI_PORT}
    grpc:
      endpoint: ${HOST}:${QUERY_GRPC_PORT}

  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: ${MAX_TRACES}

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: ${HOST}:${OTLP_GRPC_PORT}
      http:
        endpoint: ${HOST}:${OTLP_HTTP_PORT}

processors:
  batch:

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
EOF
}

# PID of *our* Jaeger (the binary of .local/jaeger/bin with our config), or nothing; a stale
# pid file (the pid recycled by another process) is never trusted.
jaeger_pid() {
  local pid cmd
  if [[ -f "$PIDFILE" ]]; then
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if pid_alive "$pid"; then
      cmd="$(tr '\0' ' ' 2>/dev/null <"/proc/${pid}/cmdline" || true)"
      if [[ "$cmd" == *"${JDIR}/bin/jaeger-"*" --config ${CONF}"* ]]; then
        echo "$pid"; return 0
      fi
    fi
    rm -f "$PIDFILE"
  fi
  return 1
}

show_log_tail() {
  [[ -s "${LOGS}/jaeger.log" ]] || return 0
  log "---- last lines of ${LOGS#"$SAGALINE_ROOT"/}/jaeger.log ----"
  tail -n 30 "${LOGS}/jaeger.log" >&2
}

# Ready: both OTLP receivers accept connections and the query API answers a real request
# (the list of services), not just an open port.
answers() {
  is_port_open "$HOST" "$OTLP_GRPC_PORT" && is_port_open "$HOST" "$OTLP_HTTP_PORT" \
    && curl -fsS --max-time 2 "http://${HOST}:${UI_PORT}/api/services" >/dev/null 2>&1
}

wait_until_ready() {
  local pid="$1" deadline=$((SECONDS + START_TIMEOUT_S))
  until answers; do
    if ! pid_alive "$pid"; then
      rm -f "$PIDFILE"
      show_log_tail
      die "Jaeger (pid $pid) exited during startup"
    fi
    if (( SECONDS >= deadline )); then
      show_log_tail
      die "Jaeger did not answer within ${START_TIMEOUT_S} s (pid $pid still running; try: $0 stop)"
    fi
    sleep 0.3
  done
}

cmd_start() {
  local pid
  require_cmd curl "Install curl (Debian: apt-get install -y curl)."
  if pid="$(jaeger_pid)"; then
    wait_until_ready "$pid"
    log "already running (pid $pid): UI $(cmd_url), OTLP $(cmd_otlp)"
    return 0
  fi
  # A Jaeger this script did not start (another clone's, or one of your own) already serves
  # these ports: use it rather than fail on them.
  if answers; then
    log "a Jaeger not started from this clone answers on ${HOST} (UI $(cmd_url), OTLP $(cmd_otlp)): using it; stop it where it was started"
    return 0
  fi
  is_built || cmd_build
  local p
  for p in "$OTLP_GRPC_PORT" "$OTLP_HTTP_PORT" "$UI_PORT" "$QUERY_GRPC_PORT"; do
    if is_port_open "$HOST" "$p"; then
      die "port ${HOST}:${p} is already in use by another process (set SAGALINE_JAEGER_OTLP_GRPC_PORT / _OTLP_HTTP_PORT / _UI_PORT / _QUERY_GRPC_PORT)"
    fi
  done
  local t0=$SECONDS
  write_config
  log "starting Jaeger ${VERSION} (memory store, ${MAX_TRACES} traces) ..."
  # setsid + nohup: its own session, so it outlives the calling shell; stdin from /dev/null;
  # 9>&- 8>&-: it must not hold our locks (take_lock).
  setsid nohup "$BIN" --config "$CONF" </dev/null >>"${LOGS}/jaeger.log" 2>&1 9>&- 8>&- &
  pid=$!
  echo "$pid" >"$PIDFILE"
  wait_until_ready "$pid"
  log "ready in $((SECONDS - t0)) s (pid $pid): UI and query API $(cmd_url), OTLP/HTTP $(cmd_otlp), OTLP/gRPC ${HOST}:${OTLP_GRPC_PORT}"
}

cmd_stop() {
  local pid
  if ! pid="$(jaeger_pid)"; then
    log "not running"
    return 0
  fi
  log "stopping Jaeger (pid $pid) ..."
  stop_pid "$pid" "$STOP_TIMEOUT_S"
  rm -f "$PIDFILE"
  log "stopped"
}

cmd_status() {
  local pid
  if pid="$(jaeger_pid)"; then
    if answers; then
      log "running (pid $pid): UI $(cmd_url), OTLP $(cmd_otlp)"
    else
      log "process running (pid $pid) but not answering yet"
    fi
    return 0
  fi
  log "stopped"
  return 3
}

cmd_url() { echo "http://${HOST}:${UI_PORT}"; }
cmd_otlp() { echo "http://${HOST}:${OTLP_HTTP_PORT}"; }

cmd_logs() {
  [[ -f "${LOGS}/jaeger.log" ]] || die "no log yet (${LOGS#"$SAGALINE_ROOT"/}/jaeger.log)"
  tail -n "${1:-60}" "${LOGS}/jaeger.log"
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    build|fetch) cmd_build ;;
    start)       take_lock jaeger; cmd_start ;;
    stop)        take_lock jaeger; cmd_stop ;;
    status)      cmd_status ;;
    url)         cmd_url ;;
    otlp)        cmd_otlp ;;
    otlp-grpc)   echo "${HOST}:${OTLP_GRPC_PORT}" ;;
    logs)        cmd_logs "$@" ;;
    version)     echo "$VERSION" ;;
    *)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
      exit 2 ;;
  esac
}

main "$@"
