#!/usr/bin/env bash
# Debian's docker-compose (1.29, Python), to validate deploy/docker-compose.yml without a
# Docker engine: `docker-compose ... config` only reads the file and its env file. `make
# lint` runs it (and `make test`, whose tests run it too, installs it first).
#
# Usage: deploy/local/compose.sh install|check
#   install  apt-get install docker-compose unless it is present (runs `apt-get update`
#            only if the first attempt fails). Idempotent.
#   check    exit 0 if docker-compose is installed, 3 if not
set -euo pipefail

SAGALINE_SCRIPT="compose"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

present() {
  command -v docker-compose >/dev/null 2>&1
}

cmd_install() {
  if present; then
    log "present: $(docker-compose version --short 2>/dev/null || echo docker-compose)"
    return 0
  fi
  apt_install docker-compose
  present || die "docker-compose installed but not on PATH"
  log "installed: $(docker-compose version --short 2>/dev/null || echo docker-compose)"
}

case "${1:-}" in
  install) cmd_install ;;
  check)   present || exit 3 ;;
  *)
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
    exit 2 ;;
esac
