#!/usr/bin/env bash
# The whole test suite, as README.md documents it: build, start what the tests need
# beyond the machine's own services, run every vitest project, stop what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
# What CI sets, so a local run skips exactly what CI skips: nothing. Under CI=true a test
# whose service (PostgreSQL, RabbitMQ, Kafka, Java) is missing or too slow to answer its
# probe fails instead of skipping. CI=false lets such suites skip, each saying why.
export CI="${CI:-true}"
export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}"
export RABBITMQ_URL="${RABBITMQ_URL:-amqp://guest:guest@127.0.0.1:5672}"
npm run build --silent
npx biome check .
if [ "$#" -ne 0 ]; then
  # Types of the tests too: vitest strips types without checking them (the packages' and
  # examples' tests in their typecheck scripts, the top-level test folders here).
  npx turbo run typecheck --output-logs=errors-only
  npx tsc -p test/tsconfig.json
  exec npx vitest run "$@"
fi
# A full run: the main vitest run, then the runs that change or restart something
# server-wide one at a time; the type check and three runs that touch nothing shared (Node 20,
# Kafka on Node 22 with @platformatic/kafka, ElasticMQ on a port of its own) run beside them in the background, their output
# printed when they end. Every run goes to the end, so one failure does not hide another;
# the status is the worst. Background runs still going when this script exits early are stopped with it.
logs="$(mktemp -d)"
status=0
# Each background run is a process group of its own (setsid), so stopping it stops what it
# started too (vitest, a JVM). Interrupted: stop at once, not on to the next run (vitest
# exits 130/143 on SIGINT/SIGTERM, which would otherwise be recorded as a failed run).
# The Kafka brokers the tests start (setsid nohup: they must outlive the scripts that start
# them) escape those groups, and a vitest run stopped by a signal skips the teardown that
# stops them: every process of this run carries TEST_SH_RUN in its environment, and whatever
# still does at the end is stopped too (at a normal end, only what leaked).
export TEST_SH_RUN="$$.$(date +%s%N)"
stop_leftovers() {
  local environ pid
  for environ in /proc/[0-9]*/environ; do
    pid=${environ#/proc/}
    pid=${pid%/environ}
    [ "$pid" != "$$" ] || continue
    if grep -qz "^TEST_SH_RUN=${TEST_SH_RUN}\$" "$environ" 2>/dev/null; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
}
stop_background() {
  for pid in $(jobs -p); do kill -TERM -- "-$pid" 2>/dev/null || true; done
  stop_leftovers
  rm -rf "$logs"
}
trap stop_background EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# The SQS suite's broker-facing files again, on ElasticMQ (a second SQS implementation,
# from Maven Central): FIFO groups as real SQS returns them, which fauxqs does not. It
# starts with the main run, not after it: four to seven minutes that mostly wait on
# visibility timeouts, off the end of the command (random schemas, queues on a server of
# its own: nothing it shares with the main run's SQS files; SQS_ELASTICMQ_ONLY leaves out
# the fauxqs suites of its files, which the main run has). Its jars are fetched first, in
# the foreground: two Maven processes (the kafka project's global setup fetches too) must
# not fill ~/.m2 at once. One file at a time, so it adds one worker beside the main run's
# three, not three. --no-cache: the side runs leave vitest's results cache (the durations
# the sequencer is regenerated from) to the main run.
# A failed fetch fails the command at the end, like any other run, after the rest has run.
# Types of the tests too (vitest strips types without checking them), beside the main run:
# about two CPU-minutes of tsc, one package at a time, off the command's critical path.
# --only: not the builds it depends on (done above), whose cache hits could restore dist/
# files while the main run imports them. At the lowest CPU priority: with the kernel's
# autogroups (sched_autogroup_enabled, on here) every session started by setsid gets an equal
# share of the CPU, so this one tsc took as much as the whole main run in its saturated first
# minutes (3 min 15 s of type check inside them: helper-71, run B); niced, it takes the idle
# CPU of the run's middle instead (tsc has no timing to miss). `renice` for kernels without
# autogroups, on the job's shell so both checks inherit it. Given its share back once the main
# run ends (below). Then the top-level test folders (test/tsconfig.json: chaos, pipeline,
# docs...; a few CPU-seconds), which belong to no package; both run whatever the first found.
setsid -w bash -c '{ echo 19 >/proc/self/autogroup; } 2>/dev/null || true
  renice -n 19 -p $$ >/dev/null 2>&1 || true
  status=0
  npx turbo run typecheck --only --output-logs=errors-only --concurrency=1 || status=1
  npx tsc -p test/tsconfig.json || status=1
  exit "$status"' >"$logs/typecheck.log" 2>&1 &
typecheck=$!
if ONCELY_ELASTICMQ_FETCH_ONLY=1 bash packages/sqs/scripts/elasticmq-conformance.sh >"$logs/elasticmq.log" 2>&1; then
  SQS_ELASTICMQ_ONLY=1 setsid -w bash packages/sqs/scripts/elasticmq-conformance.sh --maxWorkers=1 --no-cache test/conformance.test.ts \
    test/fifoOrdering.test.ts test/fifoFollowers.test.ts test/elasticmq.test.ts >>"$logs/elasticmq.log" 2>&1 &
else
  (echo "fetching ElasticMQ's jars failed: the ElasticMQ run did not start"; exit 1) >>"$logs/elasticmq.log" 2>&1 &
fi
elasticmq=$!
# record NAME RESULT LOG: a line of the closing summary, and for a failed run the failures
# its log names. CI shows only the end of a long output (the refused stop 40's failure was
# above it, unseen): that end must say which run failed and why.
statuses=""
failures=""
record() {
  local name=$1 result=$2 log=$3 lines=""
  statuses+="${name}: ${result}"$'\n'
  [ "$result" = FAILED ] || return 0
  if [ -f "$log" ]; then
    # vitest's closing list of failed files and tests (` FAIL  project file > test`, each
    # followed by its error), the type checker's errors, the scripts' own FAILED lines;
    # colour codes stripped, repeats dropped; -a: a log holding a NUL byte is still read as
    # text; `|| true`: no matching line must not end this script (set -e, pipefail).
    lines="$(sed 's/\x1b\[[0-9;]*m//g' "$log" |
      grep -aE '^ FAIL |error TS[0-9]+|\] FAILED|did not start|[A-Za-z]*Error: ' |
      awk '!seen[$0]++' | sed -n '1,30p' || true)"
  fi
  failures+="-- ${name} --"$'\n'"${lines:-(no failure line matched: see its output above)}"$'\n'
}
# run_logged NAME COMMAND...: its output shown as it comes and kept for the summary. Run
# as a background job the script waits on, in a process group of its own: bash runs a
# trap only once the foreground command has ended, so a SIGTERM (CI's time limit) met a
# foreground vitest run that went on to its end; `wait` returns at the signal, and the
# EXIT trap then stops this run's group like the side runs'.
run_logged() {
  local name=$1
  shift
  setsid -w bash -c 'set -o pipefail; log=$1; shift; "$@" 2>&1 | tee "$log"' run_logged "$logs/${name}.log" "$@" &
  if wait "$!"; then
    record "$name" passed "$logs/${name}.log"
  else
    record "$name" FAILED "$logs/${name}.log"
    status=1
  fi
}
# Node 20 reached its end of life in April 2026: the main run, every project, runs on Node 22,
# from npm's node@22 package (it ships the binary; npx caches it after the first fetch;
# `ONCELY_NODE22` picks another version). Not a root devDependency: its `node` bin would
# shadow the system node for every npm script. The processes the tests start (chaos
# consumers, the CLI, README examples) run on it too: `process.execPath`, and `node` first on
# PATH. The machine's own Node (20 here, what `npm run demo` runs on) is kept for the Node 20
# run below and for test/packaging's Node 20 install (TEST_NODE20: not an ONCELY_ name, which
# loadConfig would refuse as unknown in the CLI's tests).
export TEST_NODE20="${TEST_NODE20:-$(command -v node)}"
node22="${ONCELY_NODE22:-node@22}"
run_logged main npx -y -p "$node22" -c \
  'echo "Node $(node --version): every project" && node node_modules/vitest/vitest.mjs run'
# A type check still going shares the tail as an equal again (the runs there are all busy).
{ echo 0 >"/proc/${typecheck}/autogroup"; } 2>/dev/null || true
renice -n 0 -g "$typecheck" >/dev/null 2>&1 || true
# The packages still claim Node >= 20 (engines), so the unit, store and memory-broker suites
# and the payments demo run again on the machine's Node 20, beside the serial group. After
# the main run: it runs the same projects, some with fixed schema names.
setsid -w bash -c 'echo "Node $("$TEST_NODE20" --version): core, postgres, mysql, memory, example-payments" &&
  "$TEST_NODE20" node_modules/vitest/vitest.mjs run --no-cache --maxWorkers 3 --project core --project postgres \
    --project mysql --project memory --project example-payments' \
  >"$logs/node20.log" 2>&1 &
node20=$!
# Kafka on @platformatic/kafka (it needs Node >= 22.22), against a broker the kafka
# project's globalSetup starts for this run (the main run's broker is stopped by then):
# conformance and rebalance, the same files the kafkajs runs above passed; and send(),
# the outbox producer, findDeadLetters and diagnose on it (about 10 s together); and
# oncely dlq on Kafka (the session's scans and re-sends on this client, about 15 s); a
# rebalance while handlers run (rebalanceInFlight, about 20 s); a missing topic and a gone
# dead-letter topic (platformaticFaults, about 12 s). And the Kafka chaos run with its
# consumer processes on this client (a broker of its own, 300 orders, 3 kills; the chaos
# project's phase runs first, alone: 58 s of this job's 212 s at load 24, 2026-12-06). The
# chaos config collects that file only under ONCELY_KAFKA_CLIENT=platformatic: the main run
# (kafkajs) leaves it to this job. Your own @platformatic/kafka factories
# (broker.platformatic, platformaticInjected.test.ts) run in the main run's kafka project,
# which is on Node 22 too.
setsid -w npx -y -p "$node22" -c \
  'echo "Node $(node --version): kafka on @platformatic/kafka" && ONCELY_KAFKA_CLIENT=platformatic node node_modules/vitest/vitest.mjs run --no-cache --project kafka --project chaos packages/kafka/test/conformance.test.ts packages/kafka/test/rebalance.test.ts packages/kafka/test/producerClients.test.ts packages/kafka/test/toolsClients.test.ts packages/kafka/test/deadLetters.test.ts packages/kafka/test/deadLetterCli.test.ts packages/kafka/test/rebalanceInFlight.test.ts packages/kafka/test/platformaticFaults.test.ts test/chaos/chaos.kafkaPlatformatic.test.ts' \
  >"$logs/kafkaPlatformatic.log" 2>&1 &
kafkaPlatformatic=$!
# A chaos run with a real PostgreSQL restart, on a cluster it creates for itself (the
# shared one is never restarted); it checks the server is back before it ends.
run_logged pgRestart npx -y -p "$node22" -c 'bash test/chaos/pgRestart.sh'
# RabbitMQ's server-wide consumer_timeout, lowered and restored by the test itself.
run_logged rabbitmqConsumerTimeout npx -y -p "$node22" -c \
  'node node_modules/vitest/vitest.mjs run --config packages/rabbitmq/vitest.slow.config.ts'
for job in typecheck node20 kafkaPlatformatic elasticmq; do
  if wait "${!job}"; then result=passed; else result=FAILED; status=1; fi
  echo "---- ${job} (${result}) ----"
  cat "$logs/${job}.log"
  record "$job" "$result" "$logs/${job}.log"
done
echo "==== test command summary ===="
printf '%s' "$failures" "$statuses"
exit "$status"
