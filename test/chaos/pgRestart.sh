#!/usr/bin/env bash
# The test command's serial group: one chaos run with a real PostgreSQL restart mid-run
# (--pg-restart). It never restarts the machine's shared server: it creates a cluster of
# its own (pg_createcluster, as root or postgres), points the run at it, restarts THAT
# cluster at 50 %, checks the run counted lost 0 / doubled 0 and that the server came
# back, then drops the cluster. Runs after every vitest project, alone.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v pg_createcluster >/dev/null; then
  # Under CI=true a missing service fails the run, as everywhere else in the suite.
  if [ "${CI:-}" = "true" ]; then echo "[pg-restart] pg_createcluster not found" >&2; exit 1; fi
  echo "[pg-restart] skipped: pg_createcluster not found (postgresql-common)"
  exit 0
fi

version="${ONCELY_PG_VERSION:-15}"
name="oncely_chaos_$$"
# A port below Linux's ephemeral range (32768-60999: a client socket of anything on the
# machine may hold one of those) and above the Kafka test broker's 19092-19095 and the
# dedicated brokers' 19100+, the first one nothing listens on (a connection refused).
free_port() {
  local candidate
  for offset in $(seq 0 99); do
    candidate=$((21000 + ($$ + offset * 37) % 4000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/${candidate}") 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "[pg-restart] no free port found in 21000-24999" >&2
  return 1
}
port="${ONCELY_PG_RESTART_PORT:-$(free_port)}"
broker="${ONCELY_PG_RESTART_BROKER:-rabbitmq}"
url="postgres://postgres@127.0.0.1:${port}/postgres"
json="$(mktemp -t oncely-pg-restart-XXXXXX.json)"

drop() { pg_dropcluster --stop "$version" "$name" >/dev/null 2>&1 || true; rm -f "$json"; }
trap drop EXIT

ready() { # seconds
  for _ in $(seq 1 $(($1 * 5))); do
    pg_isready -q -h 127.0.0.1 -p "$port" && psql "$url" -Atqc 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  return 1
}

echo "[pg-restart] creating cluster $version/$name on port $port"
pg_createcluster "$version" "$name" -p "$port" -- --auth=trust >/dev/null
pg_ctlcluster "$version" "$name" start
ready 30 || { echo "[pg-restart] cluster $version/$name did not come up" >&2; exit 1; }

started=$(date +%s)
ONCELY_PG_CLUSTER="$version $name" DATABASE_URL="$url" node test/chaos/run.mjs \
  --broker "$broker" --messages 600 --consumers 3 --kills 3 --seed 7 --pg-restart --json "$json" --quiet

# The run's own check passed (run.mjs exits non-zero otherwise); now what the restart did.
node -e '
  const [r] = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"));
  const restarted = r.timeline.some((t) => t.what === "PostgreSQL restarted");
  const problems = [];
  if (!restarted) problems.push("the restart never happened");
  if (r.lost !== 0) problems.push(`lost ${r.lost}`);
  if (r.doubled !== 0) problems.push(`doubled ${r.doubled}`);
  if (!r.drained) problems.push("not drained");
  console.log(`[pg-restart] ${r.broker}: ${r.messages} orders, lost ${r.lost}, doubled ${r.doubled}, restart ${restarted ? "done" : "MISSING"}`);
  if (problems.length) { console.error(`[pg-restart] FAILED: ${problems.join(", ")}`); process.exit(1); }
' "$json"

# The restarted server is back and answers; the machine's shared server was never touched.
ready 30 || { echo "[pg-restart] cluster $version/$name is not back after its restart" >&2; exit 1; }
if [ -n "${DATABASE_URL:-}" ]; then
  psql "$DATABASE_URL" -Atqc 'SELECT 1' >/dev/null || { echo "[pg-restart] the shared server at DATABASE_URL does not answer" >&2; exit 1; }
fi
echo "[pg-restart] server back; run took $(($(date +%s) - started)) s"
