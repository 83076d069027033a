#!/usr/bin/env bash
# The test command on a loaded machine: two busy processes take both cores (of a 2-core
# machine; ONCELY_LOAD_WORKERS sets how many) while the command runs, so anyone can
# reproduce what a busy CI runner does to timing. The busy processes are started and
# stopped here: each is bounded in time (ONCELY_LOAD_SECONDS, 3600 by default) and
# killed when this script exits, however it exits. The exit status is the command's.
#
#   bash scripts/ci-under-load.sh                     # the README's test command (npm test)
#   bash scripts/ci-under-load.sh npx vitest run --project defects
set -euo pipefail
cd "$(dirname "$0")/.."

workers="${ONCELY_LOAD_WORKERS:-2}"
seconds="${ONCELY_LOAD_SECONDS:-3600}"
busy=()
command_pid=""

stop_load() {
  for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${busy[@]}"; do wait "$pid" 2>/dev/null || true; done
}
# Interrupted: the command goes too (it runs in the background so the trap fires at once).
stop_command() {
  if [ -n "$command_pid" ]; then kill -TERM "$command_pid" 2>/dev/null || true; fi
}
trap stop_load EXIT
trap 'stop_command; exit 130' INT
trap 'stop_command; exit 143' TERM

for _ in $(seq "$workers"); do
  # A pure CPU loop, no I/O; `timeout` ends it even if this script is killed with SIGKILL.
  # Each in a session of its own (setsid), as another job on a shared runner would be: with
  # the kernel's autogroups (sched_autogroup_enabled) CPU is shared between sessions first,
  # so two loops in this script's session took one share between them, not two cores.
  # (setsid does not fork here: this background job is no process-group leader, so $! is
  # the loop's `timeout`.)
  setsid timeout "$seconds" node -e 'for (;;) {}' &
  busy+=("$!")
done
echo "[ci-under-load] ${workers} busy processes (pids ${busy[*]}), at most ${seconds} s" >&2

if [ "$#" -eq 0 ]; then set -- npm test; fi
"$@" &
command_pid=$!
status=0
wait "$command_pid" || status=$?
command_pid=""
echo "[ci-under-load] command exited with ${status}; load average: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
exit "$status"
