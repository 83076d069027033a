#!/usr/bin/env bash
# Start a single-node Apache Kafka (KRaft, combined broker + controller) for the tests.
#
#   KAFKA_PORT             client listener port        (default 19092)
#   KAFKA_CONTROLLER_PORT  KRaft controller port       (default 19093)
#   KAFKA_PROXIED_PORT     a second client listener    (default 19094) that advertises
#   KAFKA_PROXY_PORT       this port instead           (default 19095): a client that
#                          bootstraps at KAFKA_PROXY_PORT keeps all its connections on
#                          it, so a TCP proxy there can cut them (disconnect tests)
#   KAFKA_DATA_DIR         data dir, recreated at each start (default ./data)
#   KAFKA_LOG_FILE         broker log                  (default ./kafka.log)
#   KAFKA_START_TIMEOUT    seconds to wait for ready   (default 120)
#   KAFKA_HEAP_OPTS        JVM heap                    (default -Xms256m -Xmx768m)
#   KAFKA_KEEP_DATA=1      reuse an existing data dir (restart.sh) instead of a fresh one
#
# Prints `KAFKA_BROKERS=127.0.0.1:<port>` when the broker answers metadata requests.
# Exits non-zero (with the log tail) when it does not start in time.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

port="${KAFKA_PORT:-19092}"
cport="${KAFKA_CONTROLLER_PORT:-19093}"
pxport="${KAFKA_PROXIED_PORT:-19094}"
proxyport="${KAFKA_PROXY_PORT:-19095}"
data="${KAFKA_DATA_DIR:-$here/data}"
logfile="${KAFKA_LOG_FILE:-$here/kafka.log}"
timeout="${KAFKA_START_TIMEOUT:-120}"
heap="${KAFKA_HEAP_OPTS:--Xms256m -Xmx768m}"
pidfile="$data/kafka.pid"

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A broker this script started earlier and that is still alive is reused as it is.
if [[ -f "$pidfile" ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  if node "$here/ready.mjs" "127.0.0.1:$port" >/dev/null 2>&1; then
    echo "start.sh: Kafka already running (pid $(cat "$pidfile"))"
    echo "KAFKA_BROKERS=127.0.0.1:$port"
    exit 0
  fi
  echo "start.sh: a broker (pid $(cat "$pidfile")) is running but not answering; stop it with stop.sh" >&2
  exit 1
fi
for p in "$port" "$cport" "$pxport"; do
  if port_open "$p"; then
    echo "start.sh: port $p is already in use by another process (set KAFKA_PORT / KAFKA_CONTROLLER_PORT)" >&2
    exit 1
  fi
done

"$here/fetch.sh"

reuse=""
if [[ "${KAFKA_KEEP_DATA:-}" == 1 && -f "$data/logs/meta.properties" && -f "$data/server.properties" ]]; then
  reuse=1
else
  rm -rf "$data"
  mkdir -p "$data/logs"
fi
[[ -n "$reuse" ]] || cat >"$data/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport,PROXIED://127.0.0.1:$pxport
# A client gets the addresses of the listener it connected to: through PROXIED that is
# the proxy's port, so every connection of that client passes the proxy.
advertised.listeners=PLAINTEXT://127.0.0.1:$port,PROXIED://127.0.0.1:$proxyport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,PROXIED:PLAINTEXT
log.dirs=$data/logs
num.partitions=1
# Tests create their topics explicitly; a typo must fail, not create a new topic.
auto.create.topics.enable=false
# Single node: every internal topic has one replica (kafkajs#1752: with the default 3,
# __consumer_offsets cannot be created and every group reports COORDINATOR_NOT_AVAILABLE).
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Groups form at once instead of waiting 3 s for more members.
group.initial.rebalance.delay.ms=0
# Lease tests use session timeouts of a few seconds (the broker's default minimum is 6 s).
group.min.session.timeout.ms=1000
PROPS

cp=("$here"/lib/*.jar)
classpath="$(IFS=:; echo "${cp[*]}")"
jvm=(java $heap -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true
  "-Dlog4j2.configurationFile=$here/log4j2.xml" -cp "$classpath")

started=$(date +%s%N)
if [[ -z "$reuse" ]]; then
  cluster_id="$("${jvm[@]}" kafka.tools.StorageTool random-uuid)"
  "${jvm[@]}" kafka.tools.StorageTool format --standalone -t "$cluster_id" -c "$data/server.properties" >"$logfile" 2>&1 || {
    echo "start.sh: formatting the KRaft storage failed:" >&2
    tail -n 40 "$logfile" >&2
    exit 1
  }
fi

# setsid: the broker must outlive this script and the shell that ran it.
setsid nohup "${jvm[@]}" kafka.Kafka "$data/server.properties" >>"$logfile" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$pidfile"

deadline=$(($(date +%s) + timeout))
while :; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "start.sh: the broker exited during startup; last log lines ($logfile):" >&2
    tail -n 60 "$logfile" >&2
    rm -f "$pidfile"
    exit 1
  fi
  if port_open "$port" && node "$here/ready.mjs" "127.0.0.1:$port" >/dev/null 2>"$data/ready.err"; then
    break
  fi
  if (($(date +%s) >= deadline)); then
    echo "start.sh: the broker was not ready after ${timeout}s (last probe: $(cat "$data/ready.err" 2>/dev/null)); last log lines ($logfile):" >&2
    tail -n 60 "$logfile" >&2
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$pidfile"
    exit 1
  fi
  sleep 0.5
done
elapsed_ms=$((($(date +%s%N) - started) / 1000000))
echo "start.sh: Kafka $(ls "$here"/lib/kafka_2.13-*.jar | sed 's/.*kafka_2.13-\(.*\)\.jar/\1/') ready in ${elapsed_ms} ms (pid $pid, log $logfile)"
echo "KAFKA_BROKERS=127.0.0.1:$port"
