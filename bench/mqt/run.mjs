#!/usr/bin/env node
// Scenario 4 (second alternative) — message-queue-toolkit's SQS consumer with its Redis
// deduplication store against Oncely's SQS consumer: the same messages, the same business
// transaction, the same concurrency, on fauxqs in process (as bench/sqs/run.mjs).
//
//   node bench/mqt/run.mjs [--messages 2000] [--concurrency 16] [--rounds 3] [--consumers 2] [--probe 1]
//
// Variants (each round drains a freshly filled queue of its own, in rotated order):
//   mqt     an AbstractSqsConsumer (@message-queue-toolkit/sqs) with
//           `enableConsumerDeduplication` and a RedisMessageDeduplicationStore on ioredis
//           (Redis at REDIS_URL); `--consumers` sqs-consumer pollers, each receiving
//           concurrency / consumers messages at a time (16 in flight at most, as Oncely);
//           the handler runs the bare transaction (BEGIN; INSERT payment; COMMIT on a
//           pg.Pool). Library defaults for the deduplication window and the lock.
//   oncely  createSqsConsumer + PostgresStore; the handler does the same INSERT via ctx.tx
//           (marker and row in one commit).
// Per message, mqt does 5 Redis round trips around the transaction (EXISTS, the lock's
// SET NX, EXISTS again, SET NX EX of the deduplication key, the lock's release script);
// Oncely does none and adds the marker to the transaction.
//
// The probe (--probe 1) then shows the guarantee each gives when the process dies right
// after the business commit: a child process runs the consumer on a one-message queue and
// is SIGKILLed just after the row commits (mqt: inside the handler, before the
// deduplication key is written; Oncely: on `processed`, before the delete), then a second
// consumer in this process takes the redelivery. The payment rows are counted and printed.
// Run with `--probe-child mqt|oncely ...` this script is that child.
//
// fauxqs runs in this process, so its CPU is on the same event loop for both variants.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  CreateQueueCommand,
  DeleteQueueCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { MessageHandlerConfigBuilder } from '@message-queue-toolkit/core';
import { RedisMessageDeduplicationStore } from '@message-queue-toolkit/redis-message-deduplication-store';
import { AbstractSqsConsumer, SqsConsumerErrorResolver } from '@message-queue-toolkit/sqs';
import { silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { createSqsConsumer } from '@oncely/sqs';
import { startFauxqs } from 'fauxqs';
import { Redis } from 'ioredis';
import pg from 'pg';
import { pino } from 'pino';
import { z } from 'zod';
import { measureConsumer, warmStore, withDeadline } from '../lib/brokerBench.mjs';
import {
  DATABASE_URL,
  emitResult,
  interleaved,
  medianRatio,
  progress,
  REDIS_URL,
  runMain,
  summarise,
  uniqueTag,
} from '../lib/common.mjs';
import {
  bareTransaction,
  benchPool,
  businessInsert,
  createBenchSchema,
  dropSchema,
  fillPool,
} from '../lib/pg.mjs';
import { formatMs, formatRate, formatRatio, LatencyRecorder } from '../lib/stats.mjs';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '2000' },
    concurrency: { type: 'string', default: '16' },
    rounds: { type: 'string', default: '3' },
    consumers: { type: 'string', default: '2' },
    probe: { type: 'string', default: '1' },
    // The probe's child process: which consumer, and where its queue and schema are.
    'probe-child': { type: 'string' },
    'queue-url': { type: 'string' },
    endpoint: { type: 'string' },
    schema: { type: 'string' },
    name: { type: 'string' },
  },
});
const N = Number(args.messages);
const CONCURRENCY = Number(args.concurrency);
const ROUNDS = Number(args.rounds);
const CONSUMERS = Number(args.consumers);
const WARMUP = Math.min(N, 300);
const CREDENTIALS = { accessKeyId: 'bench', secretAccessKey: 'bench' };
const REGION = 'us-east-1';
const MESSAGE_TYPE = 'payment.requested';

/** The message as message-queue-toolkit wants it: id, type, deduplication ID in the body. */
const PAYMENT = z.object({
  id: z.string(),
  type: z.literal(MESSAGE_TYPE),
  timestamp: z.string(),
  deduplicationId: z.string(),
  // Per-message lock and window settings (the probe shortens the lock; see probeMessage).
  deduplicationOptions: z
    .object({
      deduplicationWindowSeconds: z.number().optional(),
      lockTimeoutSeconds: z.number().optional(),
      acquireTimeoutSeconds: z.number().optional(),
      refreshIntervalSeconds: z.number().optional(),
    })
    .optional(),
  orderId: z.string(),
  amount: z.number(),
});

// ---------------------------------------------------------------------------------------
// Queues
// ---------------------------------------------------------------------------------------

/** One message: the same body and `message-id` attribute for both consumers. */
function paymentEntry(entryId, messageId, orderId, extra = {}) {
  return {
    Id: entryId,
    MessageBody: JSON.stringify({
      id: messageId,
      type: MESSAGE_TYPE,
      timestamp: new Date().toISOString(),
      deduplicationId: messageId,
      orderId,
      amount: 40,
      ...extra,
    }),
    MessageAttributes: { 'message-id': { DataType: 'String', StringValue: messageId } },
  };
}

/** A new queue holding `count` payments; IDs are unique to this run (Redis keys are global). */
async function filledQueue(sqs, name, count, visibilitySeconds = 60) {
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({ QueueName: name, Attributes: { VisibilityTimeout: String(visibilitySeconds) } }),
  );
  for (let i = 0; i < count; i += 10) {
    const entries = [];
    for (let j = i; j < Math.min(count, i + 10); j++) {
      entries.push(paymentEntry(String(j - i), `${name}-${j}`, `order-${name}-${j}`));
    }
    const out = await sqs.send(new SendMessageBatchCommand({ QueueUrl, Entries: entries }));
    if (out.Failed?.length) throw new Error(`send failed: ${JSON.stringify(out.Failed)}`);
  }
  return QueueUrl;
}

// ---------------------------------------------------------------------------------------
// The two consumers
// ---------------------------------------------------------------------------------------

/**
 * message-queue-toolkit's consumer with consumer-side deduplication on Redis. The handler
 * runs the bare transaction, then `afterCommit` (the probe's crash point). `metrics` is
 * the library's own per-message hook (`registerProcessedMessage`, called after the
 * deduplication key is written and the lock released, before the delete).
 */
class PaymentConsumer extends AbstractSqsConsumer {
  constructor({ sqs, redis, pool, schema, queueUrl, consumers, batchSize, metrics, errors, afterCommit }) {
    const pay = bareTransaction(pool, schema);
    super(
      {
        sqsClient: sqs,
        logger: pino({ level: 'silent' }),
        errorReporter: { report: ({ error }) => errors.push(error) },
        consumerErrorResolver: new SqsConsumerErrorResolver(),
        transactionObservabilityManager: { start() {}, stop() {} },
        messageMetricsManager: metrics,
      },
      {
        locatorConfig: { queueUrl },
        messageTypeResolver: { messageTypePath: 'type' },
        handlers: new MessageHandlerConfigBuilder()
          .addConfig(PAYMENT, async (message) => {
            await pay(message.orderId);
            await afterCommit?.(message);
            return { result: 'success' };
          })
          .build(),
        enableConsumerDeduplication: true,
        messageDeduplicationConfig: { deduplicationStore: new RedisMessageDeduplicationStore({ redis }) },
        concurrentConsumersAmount: consumers,
        consumerOverrides: { batchSize, waitTimeSeconds: 1 },
      },
    );
  }
}

/** Pollers and messages per receive for a concurrency: at most 10 per receive (SQS's cap). */
function mqtShape(concurrency, consumers) {
  const batchSize = Math.min(10, Math.ceil(concurrency / consumers));
  return { consumers, batchSize, inFlight: consumers * batchSize };
}

/**
 * Starts an mqt consumer and waits until `total` messages were consumed (or skipped as
 * duplicates). Latency per message: the library's processing start to end timestamps
 * (Date.now, so whole milliseconds), from the receipt to the key written. CPU: this
 * process from start() to the last message (fauxqs included, as for Oncely).
 */
async function measureMqt(build, total) {
  const latency = new LatencyRecorder(total);
  const errors = [];
  let done = 0;
  let failures = 0;
  let lastFailure;
  let firstStart = Number.POSITIVE_INFINITY;
  let lastEnd = 0;
  let finish;
  const finished = new Promise((resolve) => {
    finish = resolve;
  });
  const metrics = {
    registerProcessedMessage(meta) {
      const { status } = meta.processingResult;
      if (status !== 'consumed') {
        failures++;
        lastFailure = JSON.stringify(meta.processingResult);
        return;
      }
      latency.record(meta.messageProcessingEndTimestamp - meta.messageProcessingStartTimestamp);
      // The clock runs from the first message in hand to the last one done, as
      // measureConsumer's (bench/lib/brokerBench.mjs): start() and close() are not counted.
      firstStart = Math.min(firstStart, meta.messageProcessingStartTimestamp);
      if (++done === total) {
        lastEnd = Date.now();
        finish();
      }
    },
  };
  const consumer = build({ metrics, errors });
  const cpuBefore = process.cpuUsage();
  await consumer.start();
  try {
    await withDeadline(finished, () => `${done} of ${total} consumed`);
  } finally {
    await consumer.close();
  }
  const elapsedMs = lastEnd - firstStart;
  const cpu = process.cpuUsage(cpuBefore);
  if (failures > 0 || errors.length > 0) {
    throw new Error(
      `mqt run: ${failures} failed messages (last ${lastFailure}), ${errors.length} reported errors (last ${errors.at(-1)})`,
    );
  }
  return {
    ops: total,
    elapsedMs,
    perSecond: total / (elapsedMs / 1000),
    latency,
    cpuUsPerOp: (cpu.user + cpu.system) / total,
  };
}

/** measureConsumer (bench/lib) plus this process's CPU over the same window. */
async function measureOncely(consumer, total) {
  const cpuBefore = process.cpuUsage();
  const result = await measureConsumer(consumer, total);
  const cpu = process.cpuUsage(cpuBefore);
  return { ...result, cpuUsPerOp: (cpu.user + cpu.system) / total };
}

function oncelyConsumer({ store, schema, name, queueUrl, endpoint, concurrency }) {
  const insert = businessInsert(schema);
  return createSqsConsumer({
    name,
    broker: { queueUrl, endpoint, region: REGION, credentials: CREDENTIALS, waitTimeSeconds: 1 },
    store,
    concurrency,
    idStrategy: { attribute: 'message-id' },
    logger: silentLogger,
    handler: async (message, ctx) => {
      await ctx.tx.query(insert, [message.body.orderId, message.body.amount]);
    },
  });
}

// ---------------------------------------------------------------------------------------
// The throughput rounds
// ---------------------------------------------------------------------------------------

function bench({ sqs, redis, endpoint, schema, tag }) {
  let queues = 0;
  const queueName = (variant) => `bench-mqt-${variant}-${tag}-${queues++}`;
  const shape = mqtShape(CONCURRENCY, CONSUMERS);
  return {
    shape,
    async mqt(total = N) {
      const queueUrl = await filledQueue(sqs, queueName('mqt'), total);
      const pool = benchPool(CONCURRENCY);
      try {
        await fillPool(pool, CONCURRENCY);
        return await measureMqt(
          ({ metrics, errors }) =>
            new PaymentConsumer({ sqs, redis, pool, schema, queueUrl, ...shape, metrics, errors }),
          total,
        );
      } finally {
        await pool.end();
        await sqs.send(new DeleteQueueCommand({ QueueUrl: queueUrl })).catch(() => {});
      }
    },
    async oncely(total = N) {
      const queueUrl = await filledQueue(sqs, queueName('oncely'), total);
      const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: CONCURRENCY });
      try {
        await warmStore(store, CONCURRENCY);
        const name = `bench-mqt-oncely-${tag}-${queues}`;
        const consumer = oncelyConsumer({
          store,
          schema,
          name,
          queueUrl,
          endpoint,
          concurrency: CONCURRENCY,
        });
        return await measureOncely(consumer, total);
      } finally {
        await store.close();
        await sqs.send(new DeleteQueueCommand({ QueueUrl: queueUrl })).catch(() => {});
      }
    },
  };
}

// ---------------------------------------------------------------------------------------
// The probe: a crash right after the business commit
// ---------------------------------------------------------------------------------------

/**
 * The probe's lock: the library default holds a dead consumer's lock for 20 s
 * (lockTimeoutSeconds) and makes the next one wait up to 20 s for it; 2 s / 5 s keep the
 * probe short without changing what happens, only when.
 */
const PROBE_DEDUPLICATION = { lockTimeoutSeconds: 2, acquireTimeoutSeconds: 5, refreshIntervalSeconds: 1 };
const PROBE_VISIBILITY_SECONDS = 2;

/** One message on a queue of its own, redelivered 2 s after a receive that is not deleted. */
async function probeQueue(sqs, name) {
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({
      QueueName: name,
      Attributes: { VisibilityTimeout: String(PROBE_VISIBILITY_SECONDS) },
    }),
  );
  const entry = paymentEntry('0', `${name}-0`, `order-${name}`, {
    deduplicationOptions: PROBE_DEDUPLICATION,
  });
  await sqs.send(new SendMessageBatchCommand({ QueueUrl, Entries: [entry] }));
  return { queueUrl: QueueUrl, orderId: `order-${name}` };
}

/** Runs this script as the probe's child and resolves with how it ended (signal or code). */
function crashingChild(kind, { queueUrl, endpoint, schema, name }) {
  const script = fileURLToPath(import.meta.url);
  const child = spawn(
    process.execPath,
    [
      script,
      '--probe-child',
      kind,
      '--queue-url',
      queueUrl,
      '--endpoint',
      endpoint,
      '--schema',
      schema,
      '--name',
      name,
    ],
    // NODE_NO_WARNINGS: the AWS SDK's Node-version notice, printed again by every child.
    { stdio: ['ignore', 'inherit', 'inherit'], env: { ...process.env, NODE_NO_WARNINGS: '1' } },
  );
  return withDeadline(
    new Promise((resolve, reject) => {
      child.on('error', reject);
      child.on('exit', (code, signal) => resolve(signal ?? `exit ${code}`));
    }),
    () => `probe child (${kind}) still running`,
  );
}

/** The child: consume until the first message's row commits, then die without cleanup. */
async function probeChild(kind) {
  const crash = () => process.kill(process.pid, 'SIGKILL');
  const sqs = new SQSClient({ endpoint: args.endpoint, region: REGION, credentials: CREDENTIALS });
  const queueUrl = args['queue-url'];
  const schema = args.schema;
  if (kind === 'mqt') {
    const redis = new Redis(REDIS_URL);
    const pool = benchPool(1);
    const consumer = new PaymentConsumer({
      sqs,
      redis,
      pool,
      schema,
      queueUrl,
      consumers: 1,
      batchSize: 1,
      metrics: undefined,
      errors: [],
      afterCommit: crash,
    });
    await consumer.start();
  } else {
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 1 });
    const consumer = oncelyConsumer({
      store,
      schema,
      name: args.name,
      queueUrl,
      endpoint: args.endpoint,
      concurrency: 1,
    });
    // `processed` is emitted after the commit and before the delete.
    consumer.on('processed', crash);
    await consumer.start();
  }
  // Wait to be killed; a child still alive here is reported by the parent's deadline.
  await new Promise(() => {});
}

async function paymentRows(schema, orderId) {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    const { rows } = await client.query(
      `SELECT count(*)::int AS n FROM "${schema}".payments WHERE order_id = $1`,
      [orderId],
    );
    return rows[0].n;
  } finally {
    await client.end();
  }
}

/**
 * One probe: the child dies after the commit, then a healthy consumer here takes the
 * redelivery; returns the payment rows for the message and how the redelivery ended.
 */
async function probe(kind, { sqs, redis, endpoint, schema, tag }) {
  const name = `bench-mqt-probe-${kind}-${tag}`;
  const { queueUrl, orderId } = await probeQueue(sqs, name);
  const consumerName = `probe-${kind}-${tag}`;
  try {
    const child = await crashingChild(kind, { queueUrl, endpoint, schema, name: consumerName });
    const rowsAfterCrash = await paymentRows(schema, orderId);
    const started = performance.now();
    let outcome;
    if (kind === 'mqt') {
      const pool = benchPool(1);
      try {
        await measureMqtOutcome(sqs, redis, pool, schema, queueUrl, (result) => {
          outcome = result;
        });
      } finally {
        await pool.end();
      }
    } else {
      const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 2 });
      try {
        const consumer = oncelyConsumer({
          store,
          schema,
          name: consumerName,
          queueUrl,
          endpoint,
          concurrency: 1,
        });
        outcome = await oncelyOutcome(consumer);
      } finally {
        await store.close();
      }
    }
    return {
      child,
      rowsAfterCrash,
      rows: await paymentRows(schema, orderId),
      redelivery: outcome,
      redeliverySeconds: (performance.now() - started) / 1000,
    };
  } finally {
    await sqs.send(new DeleteQueueCommand({ QueueUrl: queueUrl })).catch(() => {});
  }
}

/** The healthy mqt consumer: resolves once the redelivery was consumed or skipped. */
async function measureMqtOutcome(sqs, redis, pool, schema, queueUrl, report) {
  let settle;
  const settled = new Promise((resolve) => {
    settle = resolve;
  });
  const metrics = {
    registerProcessedMessage(meta) {
      const r = meta.processingResult;
      if (r.status === 'consumed')
        settle(r.skippedAsDuplicate ? 'skipped as duplicate' : 'handler ran again');
    },
  };
  const consumer = new PaymentConsumer({
    sqs,
    redis,
    pool,
    schema,
    queueUrl,
    consumers: 1,
    batchSize: 1,
    metrics,
    errors: [],
  });
  await consumer.start();
  try {
    report(await withDeadline(settled, () => 'mqt probe: redelivery not settled'));
  } finally {
    await consumer.close();
  }
}

/** The healthy Oncely consumer: resolves once the redelivery was processed or found duplicate. */
async function oncelyOutcome(consumer) {
  const settled = new Promise((resolve) => {
    consumer.on('processed', () => resolve('handler ran again'));
    consumer.on('duplicate', () => resolve('skipped as duplicate'));
  });
  await consumer.start();
  try {
    return await withDeadline(settled, () => 'oncely probe: redelivery not settled');
  } finally {
    await consumer.stop();
  }
}

// ---------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------

/** Deletes this run's deduplication keys and locks (they would expire: 40 s / 20 s TTL). */
async function dropRedisKeys(redis, tag) {
  for (const pattern of [`consumer:bench-mqt-*-${tag}-*`, `mutex:consumer:bench-mqt-*-${tag}-*`]) {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      if (keys.length) await redis.del(...keys);
    } while (cursor !== '0');
  }
}

async function main() {
  const tag = uniqueTag();
  const schema = `bench_mqt_${tag}`;
  const server = await startFauxqs({ port: 0, logger: false });
  const endpoint = server.address;
  const sqs = new SQSClient({ endpoint, region: REGION, credentials: CREDENTIALS });
  const redis = new Redis(REDIS_URL);
  await createBenchSchema(schema);
  const context = { sqs, redis, endpoint, schema, tag };
  let result;
  try {
    const setup = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 1 });
    await setup.migrate();
    await setup.close();
    const run = bench(context);
    progress('mqt: warm-up...');
    await run.mqt(WARMUP);
    await run.oncely(WARMUP);
    progress(
      `mqt: ${ROUNDS} interleaved rounds of ${N} messages, concurrency ${CONCURRENCY} (mqt: ${run.shape.consumers} pollers × ${run.shape.batchSize})...`,
    );
    const rounds = await interleaved(
      ROUNDS,
      { mqt: () => run.mqt(), oncely: () => run.oncely() },
      (round, results) =>
        progress(
          `  round ${round + 1}: ${Object.entries(results)
            .map(([name, list]) => `${name} ${Math.round(list[round].perSecond)}/s`)
            .join(', ')}`,
        ),
    );
    result = {
      scenario: 'mqt',
      settings: {
        messages: N,
        concurrency: CONCURRENCY,
        rounds: ROUNDS,
        mqtConsumers: run.shape.consumers,
        mqtBatchSize: run.shape.batchSize,
      },
      versions: packageVersions(),
      summary: { mqt: summarise(rounds.mqt), oncely: summarise(rounds.oncely) },
      // > 1: Oncely drains the queue faster than mqt (median of the per-round ratios).
      oncelyVsMqt: medianRatio(rounds.oncely, rounds.mqt),
    };
    if (args.probe !== '0') {
      progress('mqt: probe — SIGKILL right after the business commit, then the redelivery...');
      result.probe = { mqt: await probe('mqt', context), oncely: await probe('oncely', context) };
      result.probe.settings = { ...PROBE_DEDUPLICATION, visibilityTimeoutSeconds: PROBE_VISIBILITY_SECONDS };
    }
  } finally {
    await dropRedisKeys(redis, tag).catch(() => {});
    redis.disconnect();
    sqs.destroy();
    await server.stop();
    await dropSchema(schema);
  }
  print(result);
  emitResult(result);
}

/** The installed versions, read from their package.json (what the figures are for). */
function packageVersions() {
  const names = [
    '@message-queue-toolkit/sqs',
    '@message-queue-toolkit/core',
    '@message-queue-toolkit/redis-message-deduplication-store',
    'sqs-consumer',
    'redis-semaphore',
    'ioredis',
  ];
  return Object.fromEntries(names.map((name) => [name, JSON.parse(readPackageJson(name)).version]));
}

function readPackageJson(name) {
  const path = fileURLToPath(new URL(`../../node_modules/${name}/package.json`, import.meta.url));
  return readFileSync(path, 'utf8');
}

function print(result) {
  const { settings: s, summary } = result;
  console.log(
    `\nScenario 4 — message-queue-toolkit (Redis deduplication) vs Oncely, SQS on fauxqs, ${s.messages} messages, concurrency ${s.concurrency} (medians of ${s.rounds} rounds)`,
  );
  console.log('variant   msgs/s     p50 ms   p99 ms   Node CPU µs / msg');
  for (const [name, sm] of Object.entries(summary)) {
    console.log(
      `${name.padEnd(8)} ${formatRate(sm.perSecond).padStart(8)} ${formatMs(sm.p50).padStart(9)} ${formatMs(sm.p99).padStart(8)} ${(sm.cpuUsPerOp?.toFixed(0) ?? '—').padStart(19)}`,
    );
  }
  console.log(`Oncely throughput / mqt throughput: ${formatRatio(result.oncelyVsMqt)}`);
  if (result.probe) {
    for (const kind of ['mqt', 'oncely']) {
      const p = result.probe[kind];
      console.log(
        `probe ${kind}: child ended by ${p.child}; payment rows after the crash ${p.rowsAfterCrash}, after the redelivery ${p.rows} (${p.redelivery}, ${p.redeliverySeconds.toFixed(1)} s)`,
      );
    }
  }
}

if (args['probe-child']) {
  runMain(() => probeChild(args['probe-child']));
} else {
  runMain(main);
}
