#!/usr/bin/env bash
# Single-node Apache Kafka (KRaft, broker+controller in one JVM) for local
# development and CI, assembled from the official jars on Maven Central — no
# Docker, no tarball download (only package registries are reachable here).
#
# Usage: deploy/local/kafka.sh fetch|start|stop|status|reset|bootstrap|topics|run
#   fetch      download the broker jars into .local/kafka/lib (no-op if present)
#   start      fetch if needed, write config, format storage once, start the
#              broker in the background and wait until it answers a real
#              Kafka admin request (timeout: 90 s)
#   stop       SIGTERM (controlled shutdown), wait, SIGKILL as a last resort
#   status     exit 0 if the broker is running, 3 if not
#   reset      stop + delete the broker's data and logs (jars are kept)
#   bootstrap  print the bootstrap servers string (127.0.0.1:PORT)
#   sasl-bootstrap  print the SASL listener's bootstrap string (exit 3 if it has none)
#   topics ... run org.apache.kafka.tools.TopicCommand against the broker,
#              e.g. `kafka.sh topics --list`
#   run CLASS ...  run any main class from the Kafka jars (console producer, ...)
#
# Environment:
#   SAGALINE_KAFKA_PORT             client listener port   (default 9092)
#   SAGALINE_KAFKA_CONTROLLER_PORT  KRaft controller port  (default 9093)
#   SAGALINE_KAFKA_SASL_PORT        port of a second client listener that requires
#                                   SASL/SCRAM (SASL_PLAINTEXT, SCRAM-SHA-256 and -512):
#                                   default 9094 for the main broker (client port 9092),
#                                   none for a broker on other ports unless set; `off`:
#                                   no SASL listener
#   SAGALINE_KAFKA_SCRAM_USER       the SCRAM user created on every start when the SASL
#   SAGALINE_KAFKA_SCRAM_PASSWORD   listener is on (default sagaline / sagaline-local;
#                                   a local secret, not one for a real cluster; no
#                                   commas, brackets or quotes in it)
#   SAGALINE_KAFKA_HOME             where this broker keeps its config, data, logs
#                                   and pid (default .local/kafka); a second broker
#                                   (fault tests) gets its own home and ports and
#                                   shares the jars in .local/kafka/lib
#   KAFKA_HEAP_OPTS                 JVM heap flags (default -Xms256m -Xmx768m)
#
# Layout (all under the git-ignored .local/):
#   .local/m2                   Maven cache used for the download
#   .local/kafka/lib            the jars (classpath for every java call)
#   .local/kafka/data           log.dirs (topic data + KRaft metadata log)
#   .local/kafka/logs           server.log, controller.log, kafka.out (stdout/err)
#   .local/kafka/server.properties, log4j*.properties, kafka.pid
set -euo pipefail

SAGALINE_SCRIPT="kafka"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

KAFKA_PORT="${SAGALINE_KAFKA_PORT:-9092}"
CONTROLLER_PORT="${SAGALINE_KAFKA_CONTROLLER_PORT:-9093}"
HOST="127.0.0.1"
BOOTSTRAP="${HOST}:${KAFKA_PORT}"
# The SASL/SCRAM listener: on by default for the main broker only, so the private brokers
# of the fault harness and the shutdown tests (other ports) claim no extra port.
if [[ -n "${SAGALINE_KAFKA_SASL_PORT:-}" ]]; then
  SASL_PORT="${SAGALINE_KAFKA_SASL_PORT}"
elif [[ "$KAFKA_PORT" == "9092" ]]; then
  SASL_PORT=9094
else
  SASL_PORT=off
fi
[[ "$SASL_PORT" == "off" || "$SASL_PORT" =~ ^[0-9]+$ ]] \
  || { echo "SAGALINE_KAFKA_SASL_PORT must be a port number or 'off'" >&2; exit 2; }
SCRAM_USER="${SAGALINE_KAFKA_SCRAM_USER:-sagaline}"
SCRAM_PASSWORD="${SAGALINE_KAFKA_SCRAM_PASSWORD:-sagaline-local}"
START_TIMEOUT_S=90
STOP_TIMEOUT_S=45

POM="${SAGALINE_ROOT}/deploy/local/kafka/pom.xml"
KDIR="${SAGALINE_KAFKA_HOME:-${SAGALINE_LOCAL}/kafka}"
LIB="${SAGALINE_LOCAL}/kafka/lib"
DATA="${KDIR}/data"
LOGS="${KDIR}/logs"
CONF="${KDIR}/server.properties"
LOG4J_BROKER="${KDIR}/log4j.properties"
LOG4J_TOOLS="${KDIR}/tools-log4j.properties"
PIDFILE="${KDIR}/kafka.pid"

# Fixed KRaft cluster id: base64url of the 16 bytes "sagaline-local-1".
# Fixed (not random) so re-formatting after a reset yields the same cluster
# and the value is recognisable in logs.
CLUSTER_ID="c2FnYWxpbmUtbG9jYWwtMQ"

# JVM flags modelled on Kafka's own kafka-run-class.sh, with a heap small
# enough for a 2-core CI box that also runs Postgres and the app.
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}"
JVM_OPTS=(-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20
          -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent
          -Djava.awt.headless=true)

is_fetched() { maven_is_fetched "$POM" "$LIB"; }

cmd_fetch() {
  require_cmd java "Install a JDK >= 11 (Debian: apt-get install -y openjdk-17-jdk-headless)."
  maven_fetch "$POM" "$LIB" "Kafka jars" "kafka_2.13-"
}

# Run a main class from the Kafka jars with quiet (WARN, stderr) logging.
run_class() {
  local main="$1"; shift
  write_log4j_tools
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j.configuration="file:${LOG4J_TOOLS}" \
    -cp "${LIB}/*" "$main" "$@"
}

write_log4j_tools() {
  mkdir -p "$KDIR"
  cat >"$LOG4J_TOOLS" <<'EOF'
# Generated by deploy/local/kafka.sh: logging for command line tools.
log4j.rootLogger=WARN, stderr
log4j.appender.stderr=org.apache.log4j.ConsoleAppender
log4j.appender.stderr.layout=org.apache.log4j.PatternLayout
log4j.appender.stderr.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stderr.Target=System.err
EOF
}

# Listener lines of server.properties: PLAINTEXT (clients and the broker itself), the
# controller, and the SASL/SCRAM listener when it is on.
listener_config() {
  if [[ "$SASL_PORT" == "off" ]]; then
    cat <<EOF
listeners=PLAINTEXT://${HOST}:${KAFKA_PORT},CONTROLLER://${HOST}:${CONTROLLER_PORT}
advertised.listeners=PLAINTEXT://${HOST}:${KAFKA_PORT}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
EOF
    return
  fi
  cat <<EOF
listeners=PLAINTEXT://${HOST}:${KAFKA_PORT},CONTROLLER://${HOST}:${CONTROLLER_PORT},SASL://${HOST}:${SASL_PORT}
advertised.listeners=PLAINTEXT://${HOST}:${KAFKA_PORT},SASL://${HOST}:${SASL_PORT}
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL:SASL_PLAINTEXT

# --- The SASL listener: clients must log in with SCRAM (kafka.sh creates the user) -------
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl.sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
}

# The SCRAM user of the SASL listener (both mechanisms), set over the PLAINTEXT listener:
# an alter, so running it on every start is harmless and resets a changed password. One
# mechanism per call: a KRaft broker refuses two credentials of one user in one request
# ("A user credential cannot be altered twice in the same request").
create_scram_user() {
  [[ "$SASL_PORT" != "off" ]] || return 0
  local mechanism
  for mechanism in SCRAM-SHA-256 SCRAM-SHA-512; do
    run_class kafka.admin.ConfigCommand --bootstrap-server "$BOOTSTRAP" --alter \
      --add-config "${mechanism}=[password=${SCRAM_PASSWORD}]" \
      --entity-type users --entity-name "$SCRAM_USER" >/dev/null \
      || die "could not create the SCRAM user ${SCRAM_USER} (${mechanism})"
  done
  log "SASL/SCRAM listener on ${HOST}:${SASL_PORT} (SASL_PLAINTEXT, SCRAM-SHA-256/512), user ${SCRAM_USER}"
}

# A broker already running may have been started before the SASL listener existed (or
# with other ports): say so, rather than let a client fail to connect later.
check_running_listeners() {
  [[ "$SASL_PORT" != "off" ]] || return 0
  if ! grep -q "^listeners=.*SASL://${HOST}:${SASL_PORT}" "$CONF" 2>/dev/null \
      || ! is_port_open "$HOST" "$SASL_PORT"; then
    log "WARNING: this broker runs without the SASL listener on ${HOST}:${SASL_PORT};" \
        "restart it to add it ($0 stop && $0 start)"
    return 0
  fi
  create_scram_user
}

write_config() {
  mkdir -p "$DATA" "$LOGS"
  # Rewritten on every start so a change of ports via env is picked up.
  cat >"$CONF" <<EOF
# Generated by deploy/local/kafka.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) — do not edit,
# change the script instead (this file is rewritten on every start).

# --- KRaft: one JVM is both the broker and the (only) controller ---------
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@${HOST}:${CONTROLLER_PORT}
controller.listener.names=CONTROLLER

# --- Listeners: loopback only --------------------------------------------
$(listener_config)

# --- Storage: topic data and the KRaft metadata log ----------------------
log.dirs=${DATA}

# --- Single node: every replication factor must be 1 ---------------------
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
# Transactions (exactly-once sagas) need the transaction state log to be
# creatable on one broker: RF 1 and min ISR 1.
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1

# --- Behaviour the app relies on -----------------------------------------
# The app declares its own topics; a typo must fail, not create a topic.
auto.create.topics.enable=false
num.partitions=8
# No 3 s delay before the first consumer group rebalance (faster tests).
group.initial.rebalance.delay.ms=0
# Retention and everything else: Kafka defaults.
EOF

  cat >"$LOG4J_BROKER" <<'EOF'
# Generated by deploy/local/kafka.sh: broker logging into .local/kafka/logs.
log4j.rootLogger=INFO, kafkaAppender

log4j.appender.kafkaAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.kafkaAppender.DatePattern='.'yyyy-MM-dd
log4j.appender.kafkaAppender.File=${kafka.logs.dir}/server.log
log4j.appender.kafkaAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.kafkaAppender.layout.ConversionPattern=[%d] %p %m (%c)%n

log4j.appender.controllerAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.controllerAppender.DatePattern='.'yyyy-MM-dd
log4j.appender.controllerAppender.File=${kafka.logs.dir}/controller.log
log4j.appender.controllerAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.controllerAppender.layout.ConversionPattern=[%d] %p %m (%c)%n

# Same noise levels as Kafka's shipped config/log4j.properties.
log4j.logger.org.apache.kafka=INFO
log4j.logger.kafka=INFO
log4j.logger.kafka.request.logger=WARN
log4j.logger.kafka.controller=TRACE, controllerAppender
log4j.additivity.kafka.controller=false
log4j.logger.org.apache.kafka.controller=INFO, controllerAppender
log4j.additivity.org.apache.kafka.controller=false
log4j.logger.state.change.logger=INFO, controllerAppender
log4j.additivity.state.change.logger=false
EOF
}

format_storage_once() {
  # meta.properties marks a formatted log dir; formatting again would fail
  # (and must never wipe data), so only do it the first time.
  if [[ -f "${DATA}/meta.properties" ]]; then
    return 0
  fi
  log "formatting KRaft storage in ${DATA#"$SAGALINE_ROOT"/} (cluster id ${CLUSTER_ID})"
  run_class kafka.tools.StorageTool format \
    --cluster-id "$CLUSTER_ID" --config "$CONF" --ignore-formatted >/dev/null \
    || die "kafka.tools.StorageTool format failed"
}

# PID of *our* broker (the one using our server.properties), or nothing.
# Checks the pid file first and validates it against /proc so that a stale
# file whose pid was recycled by another process is never trusted; falls
# back to an exact scan for a broker started with our config path.
broker_pid() {
  local pid cmd
  if [[ -f "$PIDFILE" ]]; then
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if pid_alive "$pid"; then
      cmd="$(tr '\0' ' ' 2>/dev/null <"/proc/${pid}/cmdline" || true)"
      if [[ "$cmd" == *" kafka.Kafka ${CONF}"* ]]; then
        echo "$pid"; return 0
      fi
    fi
    rm -f "$PIDFILE"  # stale
  fi
  local f
  for f in /proc/[0-9]*/cmdline; do
    cmd="$(tr '\0' ' ' 2>/dev/null <"$f" || true)"
    if [[ "$cmd" == *" kafka.Kafka ${CONF}"* ]]; then
      pid="${f#/proc/}"; pid="${pid%/cmdline}"
      pid_alive "$pid" || continue
      echo "$pid" >"$PIDFILE"
      echo "$pid"; return 0
    fi
  done
  return 1
}

show_log_tail() {
  local f
  for f in "${LOGS}/kafka.out" "${LOGS}/server.log"; do
    [[ -s "$f" ]] || continue
    log "---- last lines of ${f#"$SAGALINE_ROOT"/} ----"
    tail -n 40 "$f" >&2
  done
}

# A real Kafka round trip (Metadata request via the AdminClient): proves the
# broker accepts requests and the KRaft controller has elected itself —
# an open TCP port alone is not enough, the socket binds before it serves.
broker_answers() {
  local budget="$1"
  timeout "$budget" java -Xmx128m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j.configuration="file:${LOG4J_TOOLS}" -cp "${LIB}/*" \
    org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --list \
    >/dev/null 2>&1
}

wait_until_ready() {
  local pid="$1" deadline=$((SECONDS + START_TIMEOUT_S)) left
  while :; do
    left=$((deadline - SECONDS))
    if ! pid_alive "$pid"; then
      rm -f "$PIDFILE"
      show_log_tail
      die "broker process $pid exited during startup"
    fi
    if (( left <= 0 )); then
      show_log_tail
      die "broker did not become ready within ${START_TIMEOUT_S} s (pid $pid still running; try: $0 stop)"
    fi
    # Cheap check first (no JVM), then one admin call bounded by the time left.
    if is_port_open "$HOST" "$KAFKA_PORT" && broker_answers "$(( left < 30 ? left : 30 ))"; then
      return 0
    fi
    sleep 0.5
  done
}

cmd_start() {
  local pid
  if pid="$(broker_pid)"; then
    log "already running (pid $pid) on ${BOOTSTRAP}"
    write_log4j_tools
    wait_until_ready "$pid"
    check_running_listeners
    return 0
  fi
  require_cmd java "Install a JDK >= 11 (Debian: apt-get install -y openjdk-17-jdk-headless)."
  is_fetched || cmd_fetch

  # Fail fast with a clear message instead of a bind error buried in the log.
  local p ports=("$KAFKA_PORT" "$CONTROLLER_PORT")
  [[ "$SASL_PORT" == "off" ]] || ports+=("$SASL_PORT")
  for p in "${ports[@]}"; do
    if is_port_open "$HOST" "$p"; then
      die "port ${HOST}:${p} is already in use by another process (set SAGALINE_KAFKA_PORT / SAGALINE_KAFKA_CONTROLLER_PORT / SAGALINE_KAFKA_SASL_PORT)"
    fi
  done

  local t0=$SECONDS
  write_config
  write_log4j_tools
  format_storage_once

  log "starting broker on ${BOOTSTRAP} (controller ${HOST}:${CONTROLLER_PORT}) ..."
  # setsid + nohup: the broker gets its own session, so it survives the
  # calling shell and a Ctrl-C there; stdin from /dev/null so it never
  # holds the caller's terminal or a CI pipe open; 9>&- so it does not
  # inherit our lock (see take_lock).
  # shellcheck disable=SC2086  # KAFKA_HEAP_OPTS is intentionally word-split
  setsid nohup java $KAFKA_HEAP_OPTS "${JVM_OPTS[@]}" \
    -Dkafka.logs.dir="$LOGS" \
    -Dlog4j.configuration="file:${LOG4J_BROKER}" \
    -cp "${LIB}/*" kafka.Kafka "$CONF" \
    </dev/null >>"${LOGS}/kafka.out" 2>&1 9>&- &
  pid=$!
  echo "$pid" >"$PIDFILE"

  wait_until_ready "$pid"
  create_scram_user
  log "ready on ${BOOTSTRAP} (pid $pid, $((SECONDS - t0)) s)"
}

cmd_stop() {
  local pid
  if ! pid="$(broker_pid)"; then
    log "not running"
    return 0
  fi
  log "stopping broker (pid $pid) ..."
  # SIGTERM triggers Kafka's shutdown hook: controlled shutdown, flush and
  # close of the logs, so the next start needs no log recovery.
  stop_pid "$pid" "$STOP_TIMEOUT_S"
  rm -f "$PIDFILE"
  log "stopped"
}

cmd_status() {
  local pid
  if pid="$(broker_pid)"; then
    if is_port_open "$HOST" "$KAFKA_PORT"; then
      log "running (pid $pid) on ${BOOTSTRAP}"
    else
      log "process running (pid $pid) but ${BOOTSTRAP} not accepting connections yet"
    fi
    return 0
  fi
  log "stopped"
  return 3
}

cmd_reset() {
  cmd_stop
  log "deleting ${DATA#"$SAGALINE_ROOT"/} and ${LOGS#"$SAGALINE_ROOT"/} (jars are kept)"
  rm -rf "$DATA" "$LOGS" "$CONF" "$LOG4J_BROKER"
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    fetch)     take_lock kafka; cmd_fetch ;;
    start)     take_lock kafka; cmd_start ;;
    stop)      take_lock kafka; cmd_stop ;;
    status)    cmd_status ;;
    reset)     take_lock kafka; cmd_reset ;;
    bootstrap) echo "$BOOTSTRAP" ;;
    sasl-bootstrap) [[ "$SASL_PORT" != "off" ]] || exit 3; echo "${HOST}:${SASL_PORT}" ;;
    topics)    is_fetched || { take_lock kafka; is_fetched || cmd_fetch; exec 9>&-; }
               run_class org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" "$@" ;;
    run)       [[ $# -ge 1 ]] || die "usage: $0 run MAIN_CLASS [ARGS...]"
               is_fetched || { take_lock kafka; is_fetched || cmd_fetch; exec 9>&-; }
               run_class "$@" ;;
    *)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
      exit 2 ;;
  esac
}

main "$@"
