#!/usr/bin/env bash
# Runs the SQS adapter's tests a second time against ElasticMQ (in addition to fauxqs):
# fetches ElasticMQ 1.7.1 from Maven Central once, starts it on a free port on
# 127.0.0.1, waits until it answers, runs `vitest --project sqs` with
# SQS_ELASTICMQ_ENDPOINT set, and stops the server it started.
#
# Needs Java 17+ and Maven. Extra arguments go to vitest, for example:
#   packages/sqs/scripts/elasticmq-conformance.sh test/conformance.test.ts test/fifoOrdering.test.ts
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
work="${ONCELY_ELASTICMQ_DIR:-${TMPDIR:-/tmp}/oncely-elasticmq-1.7.1}"
mkdir -p "$work"

if [ ! -d "$work/lib" ] || [ -z "$(ls -A "$work/lib" 2>/dev/null)" ]; then
  echo "fetching ElasticMQ jars into $work/lib"
  mvn -q -B -f "$here/elasticmq/pom.xml" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$work/lib"
fi
# The jars only (npm test fetches them before its main run, then starts this in the background).
if [ -n "${ONCELY_ELASTICMQ_FETCH_ONLY:-}" ]; then exit 0; fi

port="$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")"
conf="$work/elasticmq-$port.conf"
cat > "$conf" <<CONF
include classpath("application.conf")
node-address { protocol = http, host = 127.0.0.1, port = $port, context-path = "" }
rest-sqs { enabled = true, bind-port = $port, bind-hostname = "127.0.0.1", sqs-limits = strict }
rest-stats { enabled = false }
CONF

java -Xmx384m -Dconfig.file="$conf" -cp "$work/lib/*" org.elasticmq.server.Main >"$work/elasticmq-$port.log" 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  rm -f "$conf"
}
trap cleanup EXIT

endpoint="http://127.0.0.1:$port"
# Up to 120 s: a JVM starting beside the main test run on a loaded 2-core machine.
for _ in $(seq 1 240); do
  if curl -s --max-time 5 -o /dev/null "$endpoint/?Action=ListQueues"; then break; fi
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "ElasticMQ exited; log:" >&2
    cat "$work/elasticmq-$port.log" >&2
    exit 1
  fi
  sleep 0.5
done
curl -s --max-time 5 -o /dev/null "$endpoint/?Action=ListQueues" || { echo "ElasticMQ did not answer on $endpoint" >&2; exit 1; }
echo "ElasticMQ listening on $endpoint (pid $pid, log $work/elasticmq-$port.log)"

cd "$root"
SQS_ELASTICMQ_ENDPOINT="$endpoint" npx vitest run --project sqs "$@"
