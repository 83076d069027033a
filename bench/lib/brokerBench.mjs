// Shared parts of the per-broker scenarios (bench/memory, bench/sqs): timing an Oncely
// consumer until every message is settled, a pipelined raw loop with a fixed number of
// handler slots (what the adapters do: fetch at most the free slots), and the printed
// table. Each round drains a queue of its own, filled before the clock starts.
//
// The clock of every variant runs from its first message in hand (a raw loop's first
// non-empty fetch, the consumer's first `received`) to its last one done, as bench/kafka
// times from the first record: one-time setup — connecting, a consumer's start() with
// its schema check and the adapter's first attach — is not a per-message cost, and
// counting it for one side only skewed short rounds (2,000 messages at c=16 last about
// half a second).
import { medianRatio, summarise } from './common.mjs';
import { formatMs, formatRate, formatRatio, LatencyRecorder } from './stats.mjs';

/**
 * The CPU this process uses (user + system, all threads) over the same window as the
 * clock: from `start()` (the first message in hand; later calls do nothing) to `stop()`.
 * Filling the queue before it and stopping the consumer after it are left out, as they
 * are from the rate; the in-process emulator's work for the messages is counted.
 */
export function cpuWindow() {
  let before;
  let used;
  return {
    start() {
      before ??= process.cpuUsage();
    },
    stop() {
      if (before && !used) used = process.cpuUsage(before);
    },
    /** µs per message, once stopped. */
    perOp(ops) {
      return used ? (used.user + used.system) / ops : undefined;
    },
  };
}

/** One variant's round: `ops` messages in `elapsedMs`, their latencies and `cpu` (a cpuWindow). */
export function roundResult(ops, elapsedMs, latency, cpu) {
  return { ops, elapsedMs, perSecond: ops / (elapsedMs / 1000), latency, cpuUsPerOp: cpu.perOp(ops) };
}

/** How long one variant may take before the round is declared stuck. */
const ROUND_DEADLINE_MS = 120_000;

/**
 * Starts `consumer`, waits until `total` messages were processed (or found duplicate),
 * stops it. Latency per message: from the consumer's `received` event to its
 * `processed` event (the commit is done; the ack follows right after).
 */
export async function measureConsumer(consumer, total) {
  const latency = new LatencyRecorder(total);
  const receivedAt = new Map();
  let done = 0;
  let failures = 0;
  let lastError;
  let finish;
  const finished = new Promise((resolve) => {
    finish = resolve;
  });
  let started;
  const cpu = cpuWindow();
  consumer.on('received', (event) => {
    const now = performance.now();
    started ??= now;
    cpu.start();
    receivedAt.set(event.messageId, now);
  });
  const settled = (event) => {
    const at = receivedAt.get(event.messageId);
    if (at !== undefined) {
      latency.record(performance.now() - at);
      receivedAt.delete(event.messageId);
    }
    if (++done === total) {
      cpu.stop();
      finish();
    }
  };
  consumer.on('processed', settled);
  consumer.on('duplicate', settled);
  for (const name of ['failed', 'ackFailed', 'deadLettered', 'storeUnavailable']) {
    consumer.on(name, (event) => {
      failures++;
      lastError = event.error ?? event.reason ?? name;
    });
  }
  await consumer.start();
  await withDeadline(finished, () => `${done} of ${total} settled`);
  const elapsedMs = performance.now() - started;
  await consumer.stop();
  if (failures > 0) throw new Error(`${failures} failures during the Oncely run; last: ${String(lastError)}`);
  return roundResult(total, elapsedMs, latency, cpu);
}

/**
 * A raw consume loop with `concurrency` handler slots: `receive(max)` fetches at most the
 * free slots, each message runs `handle` (its own work plus the ack) without blocking the
 * next fetch. Latency per message: from its fetch returning to its ack resolving.
 */
export async function slotLoop({ concurrency, total, receive, handle }) {
  const latency = new LatencyRecorder(total);
  let inFlight = 0;
  let done = 0;
  let wake;
  let failure;
  let started;
  const cpu = cpuWindow();
  const run = async () => {
    while (done + inFlight < total && failure === undefined) {
      if (inFlight >= concurrency) {
        await new Promise((resolve) => {
          wake = resolve;
        });
        continue;
      }
      const batch = await receive(Math.min(concurrency - inFlight, total - done - inFlight));
      const fetchedAt = performance.now();
      if (batch.length > 0) {
        started ??= fetchedAt;
        cpu.start();
      }
      for (const message of batch) {
        inFlight++;
        handle(message).then(
          () => {
            latency.record(performance.now() - fetchedAt);
            inFlight--;
            done++;
            wake?.();
          },
          (error) => {
            failure ??= error;
            inFlight--;
            wake?.();
          },
        );
      }
    }
    while (inFlight > 0) {
      await new Promise((resolve) => {
        wake = resolve;
      });
    }
  };
  await withDeadline(run(), () => `${done} of ${total} done`);
  cpu.stop();
  if (failure !== undefined) throw failure;
  const elapsedMs = performance.now() - started;
  return roundResult(total, elapsedMs, latency, cpu);
}

export async function withDeadline(promise, describe) {
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`no progress within ${ROUND_DEADLINE_MS} ms: ${describe()}`)),
      ROUND_DEADLINE_MS,
    );
  });
  try {
    return await Promise.race([promise, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Prints one broker's table: rates, latencies and ratios against both raw baselines. */
export function printBrokerTable(title, result) {
  console.log(`\n${title}`);
  console.log('variant          msgs/s     p50 ms   p99 ms   raw/variant   raw+tx/variant');
  for (const [name, s] of Object.entries(result.summary)) {
    console.log(
      `${name.padEnd(15)} ${formatRate(s.perSecond).padStart(8)} ${formatMs(s.p50).padStart(9)} ${formatMs(s.p99).padStart(8)} ${formatRatio(result.vsRaw[name]).padStart(13)} ${formatRatio(result.vsRawTx[name]).padStart(16)}`,
    );
  }
}

/**
 * Medians and ratios of one broker's rounds. Ratios are `baseline rate / variant rate`
 * per round, median over rounds (> 1: the variant is slower than the baseline).
 */
export function brokerResult(broker, rounds, settings) {
  const summary = Object.fromEntries(Object.entries(rounds).map(([name, list]) => [name, summarise(list)]));
  const vsRaw = {};
  const vsRawTx = {};
  for (const name of Object.keys(rounds)) {
    vsRaw[name] = medianRatio(rounds.raw, rounds[name]);
    vsRawTx[name] = medianRatio(rounds['raw+tx'], rounds[name]);
  }
  const result = { scenario: 'broker', broker, settings, summary, vsRaw, vsRawTx };
  if (rounds['raw+marker']) {
    result.vsRawMarker = Object.fromEntries(
      Object.keys(rounds).map((name) => [name, medianRatio(rounds['raw+marker'], rounds[name])]),
    );
  }
  return result;
}

/**
 * Opens `connections` pooled connections of a PostgresStore before the clock starts (the
 * raw+tx baseline fills its pool too): the first ping checks the schema, the concurrent
 * ones each hold a connection.
 */
export async function warmStore(store, connections) {
  await store.ping();
  await Promise.all(Array.from({ length: connections }, () => store.ping()));
}
