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
# Usage: deploy/local/spark.sh fetch|status|jars|submit|version
#   fetch      download the jars into .local/spark/jars (no-op if present and
#              the pom and the version are unchanged); `make install` runs it
#   status     exit 0 if the jars are present and match the pom, 3 if not
#   jars       print the jars as a comma list (for spark-submit --jars)
#   submit ARGS  spark-submit the rebuild with those jars, e.g.
#              `spark.sh submit --master spark://host:7077` (extra args go to
#              spark-submit before the job file)
#   version    print the Spark version (pyproject.toml's pyspark pin)
#
# Layout (all under the git-ignored .local/):
#   .local/m2            Maven cache shared with kafka.sh
#   .local/spark/jars    the jars (+ .fetched stamp: checksum of the pom and version)
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

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    fetch)  take_lock spark; cmd_fetch ;;
    status) cmd_status ;;
    jars)   cmd_jars ;;
    submit) cmd_submit "$@" ;;
    version) spark_version ;;
    *)
      sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
      exit 2 ;;
  esac
}

main "$@"
