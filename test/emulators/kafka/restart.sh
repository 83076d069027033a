#!/usr/bin/env bash
# Restart the broker started by start.sh, keeping its data (topics, committed offsets):
# what a broker restart looks like to clients. Same environment variables as start.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KAFKA_KEEP_DATA=1 "$here/stop.sh"
KAFKA_KEEP_DATA=1 "$here/start.sh"
