#!/usr/bin/env bash
# Where the test command's CPU goes (issue 25: the 2-core machine is CPU-bound, so only
# less CPU work makes the command shorter). Runs the command (default: scripts/test.sh)
# with scripts/cpu-hook.cjs preloaded into every Node process, reads the machine's CPU
# counters and the shared servers' own before and after, and prints
# scripts/cpu-report.mjs's table: CPU seconds per test file (the vitest worker and all it
# started), per other process kind, and per server.
#
#   bash scripts/cpu-profile.sh                 # the whole test command
#   bash scripts/cpu-profile.sh npx vitest run --project chaos
set -uo pipefail
cd "$(dirname "$0")/.."
out="${CPU_PROFILE_DIR:-$(mktemp -d /tmp/oncely-cpu.XXXX)}"
mkdir -p "$out"
servers() {
  # name cpu-ticks for every process of the shared servers
  for pid in $(pgrep -f 'postgres|beam.smp|mariadbd|redis-server'); do
    [ -r "/proc/$pid/stat" ] || continue
    awk -v pid="$pid" '{ sub(/^.*\) /, ""); print pid, $12 + $13 }' "/proc/$pid/stat" 2>/dev/null |
      while read -r p ticks; do echo "$(tr '\0' ' ' < "/proc/$p/cmdline" | cut -c1-40) $ticks"; done
  done
}
head -1 /proc/stat > "$out/stat.before"
servers > "$out/servers.before"
if [ "$#" -eq 0 ]; then set -- bash scripts/test.sh; fi
started=$(date +%s)
CPU_PROFILE_LOG="$out/processes.jsonl" NODE_OPTIONS="${NODE_OPTIONS:+$NODE_OPTIONS }--require $PWD/scripts/cpu-hook.cjs" "$@"
status=$?
echo "$(( $(date +%s) - started ))" > "$out/wall"
head -1 /proc/stat > "$out/stat.after"
servers > "$out/servers.after"
node scripts/cpu-report.mjs "$out"
echo "raw data: $out"
exit "$status"
