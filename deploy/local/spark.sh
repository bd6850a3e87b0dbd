#!/usr/bin/env bash
# Jars for the nightly Spark rebuild (spark_projections): Spark's Kafka source
# (spark-sql-kafka-0-10 + kafka-clients, commons-pool2, token provider) and the
# PostgreSQL and SQLite JDBC drivers, fetched ONCE from Maven Central at set-up.
# The job puts these files on `spark.jars`; it never resolves anything at run
# time (no spark.jars.packages), so a nightly run needs no network but Kafka's.
#
# Usage: deploy/local/spark.sh fetch|status|jars|submit
#   fetch      download the jars into .local/spark/jars (no-op if present and
#              the pom is unchanged)
#   status     exit 0 if the jars are present and match the pom, 3 if not
#   jars       print the jars as a comma list (for spark-submit --jars)
#   submit ARGS  spark-submit the rebuild with those jars, e.g.
#              `spark.sh submit --master spark://host:7077` (extra args go to
#              spark-submit before the job file)
#
# Layout (all under the git-ignored .local/):
#   .local/m2            Maven cache shared with kafka.sh
#   .local/spark/jars    the jars (+ .fetched stamp holding the pom's checksum)
set -euo pipefail

SAGALINE_SCRIPT="spark"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

POM="${SAGALINE_ROOT}/deploy/local/spark/pom.xml"
SDIR="${SAGALINE_LOCAL}/spark"
JARS="${SDIR}/jars"
# Marker written after a complete download; holds the pom's checksum so that
# bumping a version in pom.xml triggers a re-fetch.
FETCH_STAMP="${JARS}/.fetched"

pom_checksum() { sha256sum "$POM" | awk '{print $1}'; }

is_fetched() {
  [[ -f "$FETCH_STAMP" ]] && [[ "$(cat "$FETCH_STAMP")" == "$(pom_checksum)" ]]
}

cmd_fetch() {
  if is_fetched; then
    log "jars already present in ${JARS#"$SAGALINE_ROOT"/} (delete it to re-fetch)"
    return 0
  fi
  require_cmd mvn "Install Maven (Debian: apt-get install -y maven)."
  mkdir -p "$SDIR" "${SAGALINE_LOCAL}/m2"
  # Download into a temp dir and swap it in at the end, so an interrupted
  # fetch never leaves a half-populated jars/ that looks complete.
  local tmp="${SDIR}/jars.tmp"
  rm -rf "$tmp"
  log "fetching Spark Kafka source and JDBC drivers from Maven Central (pom: ${POM#"$SAGALINE_ROOT"/}) ..."
  local start=$SECONDS attempt update=()
  for attempt in 1 2 3; do
    # Same flags as kafka.sh: retries pass -U so Maven re-asks Central
    # instead of replaying a cached failure; runtime scope only; the sed
    # strips the ANSI resets Maven 3.8 prints even with -q -B.
    if mvn -B -q -ntp "${update[@]}" -f "$POM" \
         -Dmaven.repo.local="${SAGALINE_LOCAL}/m2" \
         dependency:copy-dependencies -DoutputDirectory="$tmp" -DincludeScope=runtime 2>&1 \
         | sed -u 's/\x1b\[[0-9;]*m//g' >&2; then
      break
    fi
    [[ $attempt -lt 3 ]] || die "Maven failed to fetch the Spark jars (3 attempts)"
    log "Maven failed (attempt $attempt), retrying in 5 s ..."
    rm -rf "$tmp"; update=(-U); sleep 5
  done
  local want
  for want in spark-sql-kafka-0-10_ kafka-clients- commons-pool2- postgresql- sqlite-jdbc-; do
    ls "$tmp"/"${want}"*.jar >/dev/null 2>&1 || die "fetch finished but ${want}*.jar is missing in $tmp"
  done
  pom_checksum >"${tmp}/.fetched"
  rm -rf "$JARS"
  mv "$tmp" "$JARS"
  log "fetched $(find "$JARS" -name '*.jar' | wc -l) jars in $((SECONDS - start)) s"
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
  local python="${SAGALINE_ROOT}/.venv/bin/python" submit
  submit="$(dirname "$("$python" -c 'import pyspark; print(pyspark.__file__)')")/bin/spark-submit"
  [[ -x "$submit" ]] || submit="$(command -v spark-submit)" || die "spark-submit not found"
  cd "$SAGALINE_ROOT"
  PYSPARK_PYTHON="${PYSPARK_PYTHON:-$python}" exec "$submit" --jars "$(cmd_jars)" "$@" \
    "${SAGALINE_ROOT}/spark_projections/job.py"
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    fetch)  take_lock spark; cmd_fetch ;;
    status) cmd_status ;;
    jars)   cmd_jars ;;
    submit) cmd_submit "$@" ;;
    *)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
      exit 2 ;;
  esac
}

main "$@"
