# shellcheck shell=bash
# Shared helpers for the Sagaline local stack scripts (kafka.sh, postgres.sh,
# stack.sh). Sourced, never executed.
#
# Everything these scripts generate (jars, Maven cache, data, logs, pid files)
# lives under <repo>/.local/, which is git-ignored, so `rm -rf .local` is
# always a safe "factory reset".

# Repo root = two levels above this file (deploy/local/common.sh), resolved
# physically so the scripts behave the same from any cwd or through symlinks.
SAGALINE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
# shellcheck disable=SC2034  # used by the scripts that source this file
SAGALINE_LOCAL="${SAGALINE_ROOT}/.local"

# Prefix every message with the script name so interleaved output of
# stack.sh stays readable. Messages go to stderr; stdout is kept for values
# other scripts may capture (e.g. `postgres.sh url`).
log() { printf '[%s] %s\n' "${SAGALINE_SCRIPT:-sagaline}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# is_port_open HOST PORT: true if something accepts TCP connections there.
# Uses bash's /dev/tcp so it works before any venv/tooling exists; the
# `timeout` guards against a filtered port hanging the connect.
is_port_open() {
  # shellcheck disable=SC2016  # $1/$2 expand in the inner bash, on purpose
  timeout 2 bash -c 'exec 3<>"/dev/tcp/$1/$2"' _ "$1" "$2" 2>/dev/null
}

# pid_alive PID: true if the process exists (and is not a zombie).
pid_alive() {
  local pid="$1" state
  [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
  state="$(awk '{print $3}' "/proc/${pid}/stat" 2>/dev/null || true)"
  [[ "$state" != "Z" ]]
}

# stop_pid PID TIMEOUT_S: SIGTERM (the process's own clean shutdown), up to TIMEOUT_S
# seconds for it to exit, then SIGKILL (and a line saying so); returns once it is gone.
stop_pid() {
  local pid="$1" timeout_s="$2"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + timeout_s))
  while pid_alive "$pid" && (( SECONDS < deadline )); do sleep 0.2; done
  if pid_alive "$pid"; then
    log "still alive after ${timeout_s} s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    while pid_alive "$pid"; do sleep 0.2; done
  fi
}

# require_cmd CMD HINT: fail early with an actionable message.
require_cmd() {
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found in PATH. $2"
}

# apt_install PACKAGE...: install Debian packages as root, without `apt-get update` first (it
# is slow and often unneeded), then with it if that failed.
apt_install() {
  [[ $EUID -eq 0 ]] || die "$* not installed and we are not root: run 'sudo apt-get install -y $*'"
  require_cmd apt-get "Only Debian/Ubuntu are supported; install $* by hand."
  export DEBIAN_FRONTEND=noninteractive
  local apt_opts=(-y -q --no-install-recommends -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  log "installing Debian's $* ..."
  if ! apt-get install "${apt_opts[@]}" "$@"; then
    log "install failed, running apt-get update and retrying ..."
    apt-get update -q
    apt-get install "${apt_opts[@]}" "$@"
  fi
}

# take_lock NAME: serialise start/stop/reset of one service across concurrent
# callers (several engineers' or test runs' `start` at the same moment would
# otherwise race on the pid file and the port). The lock is held on fd 9
# until the script exits; anything started in the background must close fd 9
# (`9>&-`), or the long-running server would hold the lock forever.
take_lock() {
  mkdir -p "$SAGALINE_LOCAL"
  exec 9>"${SAGALINE_LOCAL}/.${1}.lock"
  if ! flock -n 9; then
    log "waiting for another ${1} start/stop to finish ..."
    flock -w 300 9 || die "could not get ${SAGALINE_LOCAL}/.${1}.lock within 300 s"
  fi
}

# maven_stamp POM [EXTRA]: the checksum a fetch of POM is stamped with: the pom's, or that of
# the pom and EXTRA (what else decides the fetched set, e.g. a version passed with -D).
maven_stamp() {
  if [[ -n "${2:-}" ]]; then
    { cat "$1"; printf '%s\n' "$2"; } | sha256sum | awk '{print $1}'
  else
    sha256sum "$1" | awk '{print $1}'
  fi
}

# maven_is_fetched POM DIR [EXTRA]: true if DIR holds a complete fetch of POM's current version
# (the stamp holds the checksum of the pom and EXTRA, so bumping a version triggers a re-fetch).
maven_is_fetched() {
  [[ -f "${2}/.fetched" ]] && [[ "$(cat "${2}/.fetched")" == "$(maven_stamp "$1" "${3:-}")" ]]
}

# maven_fetch POM DIR WHAT "PREFIX..." [MVN_ARGS...]: copy POM's dependencies into DIR
# with Maven, once. Each space-separated PREFIX must name at least one fetched jar.
# Optional, from the environment: MAVEN_STAMP, the EXTRA of maven_is_fetched; MAVEN_CHECK, a
# command run with the fetched (not yet swapped in) folder, whose failure fails the fetch.
maven_fetch() {
  local pom="$1" dir="$2" what="$3" required="$4"; shift 4
  if maven_is_fetched "$pom" "$dir" "${MAVEN_STAMP:-}"; then
    log "jars already present in ${dir#"$SAGALINE_ROOT"/} (delete it to re-fetch)"
    return 0
  fi
  require_cmd mvn "Install Maven (Debian: apt-get install -y maven)."
  mkdir -p "$(dirname "$dir")" "${SAGALINE_LOCAL}/m2"
  # Download into a temp dir and swap it in at the end, so an interrupted
  # fetch never leaves a half-populated folder that looks complete.
  local tmp="${dir}.tmp"
  rm -rf "$tmp"
  log "fetching ${what} from Maven Central (pom: ${pom#"$SAGALINE_ROOT"/}) ..."
  local start=$SECONDS attempt update=() want
  for attempt in 1 2 3; do
    # Retries pass -U so Maven re-asks Central instead of replaying a
    # failure it cached in the local repo during the previous attempt.
    # -B/-ntp: no progress bars in CI logs. maven.repo.local inside .local/
    # keeps ~/.m2 untouched and the cache disposable with everything else.
    # The sed strips the stray ANSI resets Maven 3.8 prints even with -q -B
    # (mvn's exit status still decides, thanks to pipefail).
    if mvn -B -q -ntp "${update[@]}" -f "$pom" \
         -Dmaven.repo.local="${SAGALINE_LOCAL}/m2" \
         dependency:copy-dependencies -DoutputDirectory="$tmp" "$@" 2>&1 \
         | sed -u 's/\x1b\[[0-9;]*m//g' >&2; then
      break
    fi
    [[ $attempt -lt 3 ]] || die "Maven failed to fetch the ${what} (3 attempts)"
    log "Maven failed (attempt $attempt), retrying in 5 s ..."
    rm -rf "$tmp"; update=(-U); sleep 5
  done
  for want in $required; do
    ls "$tmp"/"${want}"*.jar >/dev/null 2>&1 || die "fetch finished but ${want}*.jar is missing in $tmp"
  done
  if [[ -n "${MAVEN_CHECK:-}" ]] && ! $MAVEN_CHECK "$tmp"; then
    die "the fetched ${what} failed its check; nothing was installed (they are in $tmp)"
  fi
  maven_stamp "$pom" "${MAVEN_STAMP:-}" >"${tmp}/.fetched"
  rm -rf "$dir"
  mv "$tmp" "$dir"
  log "fetched $(find "$dir" -name '*.jar' | wc -l) jars in $((SECONDS - start)) s"
}
