#!/usr/bin/env bash
# Jars for the nightly Spark rebuild (spark_projections): Spark's Kafka source
# (spark-sql-kafka-0-10 + kafka-clients, commons-pool2, token provider) and the
# PostgreSQL and SQLite JDBC drivers, fetched ONCE from Maven Central at set-up.
# The job puts these files on `spark.jars`; it never resolves anything at run
# time (no spark.jars.packages), so a nightly run needs no network but Kafka's.
#
# The Spark version is pyspark's pin in pyproject.toml (stated there only): the
# connector is fetched for that version (-Dspark.version), and a fetch fails when a
# fetched jar is another copy of one pyspark ships (scripts/check_spark_jars.py).
#
# Usage: deploy/local/spark.sh fetch|status|jars|submit|version|cluster-up|cluster-down|...
#   fetch      download the jars into .local/spark/jars (no-op if present and
#              the pom and the version are unchanged); `make install` runs it
#   status     exit 0 if the jars are present and match the pom, 3 if not
#   jars       print the jars as a comma list (for spark-submit --jars)
#   submit ARGS  spark-submit the rebuild with those jars, e.g.
#              `spark.sh submit --master spark://host:7077` (extra args go to
#              spark-submit before the job file)
#   version    print the Spark version (pyproject.toml's pyspark pin)
#
# A Spark standalone cluster on this machine, from pyspark's own distribution (its
# bin/spark-class), bound to 127.0.0.1: what the cluster test (tests/spark/test_cluster.py)
# and benchmarks/bench_rebuild.py submit the job to, as a team submits it to theirs.
#   cluster-up    start a master and SAGALINE_SPARK_CLUSTER_WORKERS (2) workers of one core
#                 and SAGALINE_SPARK_WORKER_MEMORY (1g) each, and wait until every worker
#                 registered; a no-op when they run; prints the master URL. On failure it
#                 prints every daemon's log tail, stops what it started and exits 1
#   cluster-down  stop the workers (their executors with them) and the master
#   cluster-status  exit 0 if the master and every worker run, 3 if not
#   cluster-url   print the master URL: spark://127.0.0.1:SAGALINE_SPARK_CLUSTER_PORT (7077)
#   cluster-logs  the last lines of every daemon's log
#
# Layout (all under the git-ignored .local/):
#   .local/m2            Maven cache shared with kafka.sh
#   .local/spark/jars    the jars (+ .fetched stamp: checksum of the pom and version)
#   .local/spark/cluster master.pid, worker-N.pid, logs/<daemon>.log, work/worker-N (each
#                        application's executor logs), tmp/ (shuffle and spill files)
set -euo pipefail

SAGALINE_SCRIPT="spark"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

POM="${SAGALINE_ROOT}/deploy/local/spark/pom.xml"
SDIR="${SAGALINE_LOCAL}/spark"
JARS="${SDIR}/jars"

PYTHON="${SAGALINE_ROOT}/.venv/bin/python"

# The one statement of the Spark version: `"pyspark==X.Y.Z"` in pyproject.toml.
spark_version() {
  local version
  version="$(sed -n 's/^ *"pyspark==\([0-9][0-9.]*\)".*/\1/p' "${SAGALINE_ROOT}/pyproject.toml")"
  [[ -n "$version" ]] || die "no \"pyspark==<version>\" pin in pyproject.toml"
  printf '%s\n' "$version"
}

is_fetched() { maven_is_fetched "$POM" "$JARS" "spark.version=$(spark_version)"; }

# Run on the fetched folder before it is swapped in: no artifact twice on the classpath.
check_jars() {
  (cd "$SAGALINE_ROOT" && "$PYTHON" -m scripts.check_spark_jars "$1")
}

cmd_fetch() {
  local version installed
  version="$(spark_version)"
  [[ -x "$PYTHON" ]] || die "no ${PYTHON#"$SAGALINE_ROOT"/} (run: make install)"
  installed="$("$PYTHON" -c 'import pyspark; print(pyspark.__version__)' 2>/dev/null)" \
    || die "pyspark is not installed in .venv (run: make install)"
  [[ "$installed" == "$version" ]] \
    || die "pyspark ${installed} is installed, pyproject.toml pins ${version} (run: make install)"
  # Runtime scope only: what the job loads, not the connector's test or provided deps.
  MAVEN_STAMP="spark.version=${version}" MAVEN_CHECK=check_jars \
    maven_fetch "$POM" "$JARS" "Spark ${version} Kafka source and JDBC drivers" \
    "spark-sql-kafka-0-10_ kafka-clients- commons-pool2- postgresql- sqlite-jdbc-" \
    -DincludeScope=runtime -Dspark.version="$version"
}

cmd_status() {
  if is_fetched; then
    log "jars present in ${JARS#"$SAGALINE_ROOT"/}: $(find "$JARS" -name '*.jar' | wc -l)"
    return 0
  fi
  log "jars missing or stale (run: $0 fetch)"
  return 3
}

cmd_jars() {
  is_fetched || die "jars missing or stale (run: $0 fetch)"
  find "$JARS" -name '*.jar' | sort | paste -sd, -
}

cmd_submit() {
  local python="$PYTHON" submit
  submit="$(dirname "$("$python" -c 'import pyspark; print(pyspark.__file__)')")/bin/spark-submit"
  [[ -x "$submit" ]] || submit="$(command -v spark-submit)" || die "spark-submit not found"
  cd "$SAGALINE_ROOT"
  PYSPARK_PYTHON="${PYSPARK_PYTHON:-$python}" exec "$submit" --jars "$(cmd_jars)" "$@" \
    "${SAGALINE_ROOT}/spark_projections/job.py"
}

# --- the local standalone cluster -------------------------------------------------------
CDIR="${SDIR}/cluster"
CPORT="${SAGALINE_SPARK_CLUSTER_PORT:-7077}"
CWORKERS="${SAGALINE_SPARK_CLUSTER_WORKERS:-2}"
CMEMORY="${SAGALINE_SPARK_WORKER_MEMORY:-1g}"
CSTART_TIMEOUT_S="${SAGALINE_SPARK_CLUSTER_START_TIMEOUT_S:-120}"
MASTER_CLASS="org.apache.spark.deploy.master.Master"
WORKER_CLASS="org.apache.spark.deploy.worker.Worker"

cluster_url() { printf 'spark://127.0.0.1:%s\n' "$CPORT"; }

spark_home() {
  dirname "$("$PYTHON" -c 'import pyspark; print(pyspark.__file__)')" \
    || die "pyspark is not installed in .venv (run: make install)"
}

daemons() {
  local n
  printf 'master\n'
  for ((n = 1; n <= CWORKERS; n++)); do printf 'worker-%d\n' "$n"; done
}

# daemon_pid NAME: the pid of that daemon if it runs (a recycled pid is not ours: its
# command line must be Spark's master or worker class).
daemon_pid() {
  local pid
  pid="$(cat "${CDIR}/${1}.pid" 2>/dev/null)" || return 1
  pid_alive "$pid" || return 1
  tr '\0' ' ' <"/proc/${pid}/cmdline" 2>/dev/null | grep -q "org\.apache\.spark\.deploy\." \
    || return 1
  printf '%s\n' "$pid"
}

cluster_logs() {
  local name
  for name in $(daemons); do
    [[ -f "${CDIR}/logs/${name}.log" ]] || continue
    printf '=== %s (last 30 lines of %s)\n' "$name" "${CDIR#"$SAGALINE_ROOT"/}/logs/${name}.log"
    tail -n 30 "${CDIR}/logs/${name}.log"
  done
}

# start_daemon NAME CLASS ARG...: spark-class in the background, its log fresh (so the
# readiness line found is this start's), the lock's fd closed.
start_daemon() {
  local name="$1" class="$2" home
  shift 2
  home="$(spark_home)"
  mkdir -p "${CDIR}/logs" "${CDIR}/tmp"
  [[ "$class" != "$WORKER_CLASS" ]] || mkdir -p "${CDIR}/work/${name}"
  # Small daemons (the box is shared); no REST submission server (nothing here uses it and
  # it listens without authentication); UTC like the job's own JVMs. SPARK_LOCAL_DIRS: the
  # executors' shuffle files, SPARK_WORKER_DIR: their logs.
  SPARK_HOME="$home" SPARK_DAEMON_MEMORY=256m SPARK_LOCAL_IP=127.0.0.1 \
    SPARK_DAEMON_JAVA_OPTS="-Dspark.master.rest.enabled=false -Duser.timezone=UTC" \
    SPARK_WORKER_DIR="${CDIR}/work/${name}" SPARK_LOCAL_DIRS="${CDIR}/tmp" \
    SPARK_LOG_DIR="${CDIR}/logs" \
    nohup "${home}/bin/spark-class" "$class" "$@" \
    </dev/null >"${CDIR}/logs/${name}.log" 2>&1 9>&- &
  echo "$!" >"${CDIR}/${name}.pid"
}

# wait_line NAME TEXT: until NAME's log holds TEXT; false when it died or took too long.
wait_line() {
  local name="$1" text="$2" deadline=$((SECONDS + CSTART_TIMEOUT_S))
  until grep -qF "$text" "${CDIR}/logs/${name}.log" 2>/dev/null; do
    daemon_pid "$name" >/dev/null || { log "${name} exited during start-up"; return 1; }
    (( SECONDS < deadline )) || { log "${name}: no \"${text}\" within ${CSTART_TIMEOUT_S} s"; return 1; }
    sleep 0.5
  done
}

stop_daemon() {
  local name="$1" pid deadline
  pid="$(daemon_pid "$name")" || { rm -f "${CDIR}/${name}.pid"; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + 15))
  while pid_alive "$pid" && (( SECONDS < deadline )); do sleep 0.3; done
  if pid_alive "$pid"; then
    log "${name} (pid ${pid}) still running 15 s after SIGTERM: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "${CDIR}/${name}.pid"
}

cmd_cluster_down() {
  local name
  # Workers first: a worker stopping kills its executors; the master last.
  for name in $(daemons | tac); do stop_daemon "$name"; done
  log "cluster stopped"
}

# running_daemons: how many of the cluster's daemons run.
running_daemons() {
  local name running=0
  for name in $(daemons); do
    if daemon_pid "$name" >/dev/null; then running=$((running + 1)); fi
  done
  printf '%d\n' "$running"
}

cmd_cluster_status() {
  local running
  running="$(running_daemons)"
  if (( running == CWORKERS + 1 )); then
    log "cluster running at $(cluster_url) (${CWORKERS} workers)"
    return 0
  fi
  log "cluster not running (${running} of $((CWORKERS + 1)) daemons)"
  return 3
}

cmd_cluster_up() {
  local url n running pid
  url="$(cluster_url)"
  running="$(running_daemons)"
  # One cluster per checkout (one set of pid files): not a second one on another port.
  if pid="$(daemon_pid master)" && ! tr '\0' ' ' <"/proc/${pid}/cmdline" | grep -q -- "--port ${CPORT} "; then
    die "the cluster of this checkout runs on another port (stop it first: SAGALINE_SPARK_CLUSTER_PORT=<its port> $0 cluster-down)"
  fi
  if (( running == CWORKERS + 1 )); then
    log "cluster already running at ${url} (${CWORKERS} workers)"
    printf '%s\n' "$url"
    return 0
  fi
  (( running == 0 )) || { log "part of the cluster runs: restarting it whole"; cmd_cluster_down; }
  is_port_open 127.0.0.1 "$CPORT" \
    && die "port 127.0.0.1:${CPORT} is in use by another process (set SAGALINE_SPARK_CLUSTER_PORT)"
  local t0=$SECONDS
  log "starting a Spark $(spark_version) standalone master at ${url} and ${CWORKERS} workers (1 core, ${CMEMORY} each) ..."
  # Web UIs on free ports (0): nothing reads them, and 8080/8081 are often taken.
  start_daemon master "$MASTER_CLASS" --host 127.0.0.1 --port "$CPORT" --webui-port 0
  if wait_line master "I have been elected leader"; then
    for ((n = 1; n <= CWORKERS; n++)); do
      start_daemon "worker-${n}" "$WORKER_CLASS" --host 127.0.0.1 --cores 1 \
        --memory "$CMEMORY" --webui-port 0 "$url"
    done
    local ok=1
    for ((n = 1; n <= CWORKERS; n++)); do
      wait_line "worker-${n}" "Successfully registered with master" || { ok=0; break; }
    done
    if (( ok )); then
      log "cluster up at ${url} in $((SECONDS - t0)) s (logs: ${CDIR#"$SAGALINE_ROOT"/}/logs)"
      printf '%s\n' "$url"
      return 0
    fi
  fi
  cluster_logs >&2
  cmd_cluster_down
  die "the Spark cluster did not start (its logs are above)"
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    fetch)  take_lock spark; cmd_fetch ;;
    status) cmd_status ;;
    jars)   cmd_jars ;;
    submit) cmd_submit "$@" ;;
    version) spark_version ;;
    cluster-up)   take_lock spark-cluster; cmd_cluster_up ;;
    cluster-down) take_lock spark-cluster; cmd_cluster_down ;;
    cluster-status) cmd_cluster_status ;;
    cluster-url)  cluster_url ;;
    cluster-logs) cluster_logs ;;
    *)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
      exit 2 ;;
  esac
}

main "$@"
