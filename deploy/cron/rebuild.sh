#!/usr/bin/env bash
# Nightly rebuild of the read models for the local stack (called by cron, see
# deploy/cron/sagaline.crontab; runnable by hand the same way).
#
# Usage: deploy/cron/rebuild.sh [sagaline rebuild options, e.g. --until-checkpoints]
#
# - Works from any cwd (repo root from common.sh) and reads the same settings as
#   the other components: SAGALINE_* from the environment, else <repo>/.env.
# - Never downloads anything: if the Spark jars are missing it fails and says to
#   run `deploy/local/spark.sh fetch` (a set-up step).
# - One run at a time (flock); the job also takes a lock in the database itself.
# - Appends to .local/logs/rebuild.log (progress lines and the summary); the exit
#   status is the job's, so cron mails on failure when MAILTO is set.
set -euo pipefail

SAGALINE_SCRIPT="rebuild"
# shellcheck source-path=SCRIPTDIR source=../local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/../local/common.sh"

LOGS="${SAGALINE_LOCAL}/logs"
SAGALINE="${SAGALINE_ROOT}/.venv/bin/sagaline"

[[ -x "$SAGALINE" ]] || die "no ${SAGALINE#"$SAGALINE_ROOT"/} (run: make install)"
"${SAGALINE_ROOT}/deploy/local/spark.sh" status 2>/dev/null \
  || die "Spark jars missing (run: deploy/local/spark.sh fetch)"

mkdir -p "$LOGS"
exec 8>"${SAGALINE_LOCAL}/.rebuild.lock"
flock -n 8 || die "another rebuild is running (lock: .local/.rebuild.lock)"

cd "$SAGALINE_ROOT"  # relative settings (.env, .local/...) resolve against the repo
{
  echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) sagaline rebuild $*"
  status=0
  "$SAGALINE" rebuild "$@" || status=$?
  echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) exit ${status}"
} >>"${LOGS}/rebuild.log" 2>&1
exit "${status:-0}"
