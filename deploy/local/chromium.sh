#!/usr/bin/env bash
# Debian's headless Chromium and its WebDriver, for the console's browser test
# (tests/integration/test_console_browser.py drives /usr/bin/chromium through
# /usr/bin/chromedriver with Selenium; nothing is downloaded at run time).
#
# Usage: deploy/local/chromium.sh install|check
#   install  apt-get install chromium chromium-driver unless both are present
#            (runs `apt-get update` only if the first attempt fails). Idempotent.
#   check    exit 0 if both are installed, 3 if not
set -euo pipefail

SAGALINE_SCRIPT="chromium"
# shellcheck source-path=SCRIPTDIR source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

present() {
  [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]]
}

cmd_install() {
  if present; then
    log "present: $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
    return 0
  fi
  apt_install chromium chromium-driver
  present || die "chromium installed but /usr/bin/chromium or /usr/bin/chromedriver is missing"
  log "installed: $(/usr/bin/chromium --version 2>/dev/null || echo chromium)"
}

case "${1:-}" in
  install) cmd_install ;;
  check)   present || exit 3 ;;
  *)
    sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
    exit 2 ;;
esac
