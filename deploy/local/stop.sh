#!/usr/bin/env bash
# Stop the worker, projector and API that `make run` started, and leave none of them behind.
#
# Usage: deploy/local/stop.sh [PID_DIR]   (default .local/logs, where `make run` writes
#        worker.pid, projector.pid and api.pid)
#
# Each pid gets SIGTERM only while it still runs our `sagaline <component>` command (a pid
# file whose pid was recycled by another program is never acted on). Each component stops
# within SAGALINE_SHUTDOWN_GRACE_S (8 s) on its own; whatever still runs after
# SAGALINE_STOP_WAIT_S (12 s) gets SIGKILL, and the script says which it had to kill.
set -euo pipefail

PID_DIR="${1:-.local/logs}"
WAIT_S="${SAGALINE_STOP_WAIT_S:-12}"
COMPONENTS=(api projector worker)

# True when pid runs `... sagaline COMPONENT ...` or `... -m sagaline.cli COMPONENT ...`.
# A zombie has an empty cmdline: it counts as gone.
ours() {
  local pid="$1" component="$2" i
  local -a args=()
  [[ "$pid" =~ ^[0-9]+$ && -r "/proc/${pid}/cmdline" ]] || return 1
  mapfile -d '' args <"/proc/${pid}/cmdline" 2>/dev/null || return 1
  for ((i = 0; i + 1 < ${#args[@]}; i++)); do
    case "${args[i]}" in
      sagaline | */sagaline | sagaline.cli)
        [[ "${args[i + 1]}" == "$component" ]] && return 0 ;;
    esac
  done
  return 1
}

declare -A running=()
for c in "${COMPONENTS[@]}"; do
  file="${PID_DIR}/${c}.pid"
  [[ -f "$file" ]] || continue
  pid="$(cat "$file" 2>/dev/null || true)"
  if ours "$pid" "$c"; then
    echo "stopping ${c} (pid ${pid})"
    kill -TERM "$pid" 2>/dev/null || true
    running[$c]="$pid"
  fi
  rm -f "$file"
done

deadline=$((SECONDS + WAIT_S))
while ((${#running[@]})); do
  for c in "${!running[@]}"; do
    ours "${running[$c]}" "$c" || unset "running[$c]"
  done
  ((${#running[@]} && SECONDS < deadline)) || break
  sleep 0.2
done

for c in "${!running[@]}"; do
  pid="${running[$c]}"
  echo "killed ${c} (pid ${pid}) with SIGKILL: still running ${WAIT_S} s after SIGTERM" >&2
  kill -KILL "$pid" 2>/dev/null || true
done
