#!/usr/bin/env bash
# Spectral (@stoplight/spectral-cli, pinned), the OpenAPI linter `make lint` runs on the API's
# document (scripts/export_openapi.py writes it; .spectral.yaml is the ruleset: spectral:oas,
# and why any rule is changed). Installed from npm into .local/spectral/ (git-ignored),
# never globally; nothing is downloaded at lint time once it is there.
#
# Usage: deploy/local/spectral.sh install|check|lint FILE
#   install  npm install the pinned version into .local/spectral unless it is there. Idempotent.
#   check    exit 0 if the pinned version is installed, 3 if not
#   lint     install if needed, then lint FILE with the ruleset (fails on an error or a warning)
set -euo pipefail

SAGALINE_SCRIPT="spectral"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

VERSION="6.16.3"
PREFIX="${SAGALINE_LOCAL}/spectral"
BIN="${PREFIX}/node_modules/.bin/spectral"

present() {
  [[ -x "$BIN" ]] && [[ "$("$BIN" --version 2>/dev/null)" == "$VERSION" ]]
}

cmd_install() {
  if present; then
    log "present: spectral ${VERSION}"
    return 0
  fi
  require_cmd npm "Install Node.js 18 or later (Debian: apt-get install nodejs npm)."
  mkdir -p "$PREFIX"
  log "installing @stoplight/spectral-cli@${VERSION} into ${PREFIX} ..."
  npm install --prefix "$PREFIX" --no-audit --no-fund --save-exact --loglevel=error \
    "@stoplight/spectral-cli@${VERSION}"
  present || die "spectral ${VERSION} did not install into ${PREFIX}"
  log "installed: spectral $("$BIN" --version)"
}

cmd_lint() {
  [[ $# -eq 1 ]] || die "usage: spectral.sh lint FILE"
  present || cmd_install
  "$BIN" lint --ruleset "${SAGALINE_ROOT}/.spectral.yaml" --fail-severity=warn \
    --display-only-failures "$1"
}

case "${1:-}" in
  install) cmd_install ;;
  check)   present || exit 3 ;;
  lint)    shift; cmd_lint "$@" ;;
  *)
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
    exit 2 ;;
esac
