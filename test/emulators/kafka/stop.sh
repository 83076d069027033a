#!/usr/bin/env bash
# Stop the broker started by start.sh (TERM, then KILL after KAFKA_STOP_TIMEOUT seconds,
# default 20) and remove its data dir (kept with KAFKA_KEEP_DATA=1, as restart.sh does).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="${KAFKA_DATA_DIR:-$here/data}"
pidfile="$data/kafka.pid"
timeout="${KAFKA_STOP_TIMEOUT:-20}"

if [[ -f "$pidfile" ]]; then
  pid="$(cat "$pidfile")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$(($(date +%s) + timeout))
    while kill -0 "$pid" 2>/dev/null; do
      if (($(date +%s) >= deadline)); then
        echo "stop.sh: broker (pid $pid) did not stop after ${timeout}s; killing it" >&2
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.2
    done
    echo "stop.sh: Kafka (pid $pid) stopped"
  fi
fi
rm -f "$pidfile"
[[ "${KAFKA_KEEP_DATA:-}" == 1 ]] || rm -rf "$data"
