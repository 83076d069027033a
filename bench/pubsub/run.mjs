#!/usr/bin/env node
// Scenario 3 — Google Pub/Sub on the in-process emulator (@oncely/emulators/pubsub): the
// raw @google-cloud/pubsub subscriber loop against the Oncely Pub/Sub consumer, with the
// real PostgreSQL store.
//
//   node bench/pubsub/run.mjs [--messages 2000] [--concurrency 16] [--rounds 3] [--batch 32]
//
// Every subscription has the recommended dead-letter policy (maxDeliveryAttempts 10, above
// the default maxAttempts 5), so the service sends deliveryAttempt (1 on a first delivery)
// and the core counts no run up front — except the `oncely no policy` variant's.
//
// Variants (each round drains a freshly filled subscription of its own, in rotated order):
//   raw           subscription.on('message') with flowControl { maxMessages: concurrency,
//                 allowExcessMessages: false }, one stream, acks batched over 5 ms (the
//                 adapter's window, which it cuts short once no other delivery is running);
//                 parse the body, message.ack()
//   raw+tx        the same, with the marker transaction written by hand: BEGIN; INSERT the
//                 (consumer, message-id) marker ON CONFLICT DO NOTHING; if it was new, the
//                 business INSERT; COMMIT; then ack — what Oncely does, without Oncely
//   oncely        createPubSubConsumer + PostgresStore; the handler does the same INSERT
//   oncely no policy  the same on a subscription without a dead-letter policy: the
//                 service sends no deliveryAttempt, so the core counts every run up front
//                 (store.recordAttempt, one extra commit per message, and one more to
//                 delete the row once processed; rows left are reported apart)
//   oncely batch  the same consumer with `batch: { size: --batch }` and `batchHandler`
//                 (one INSERT for the batch's rows: the batch path as documented), with
//                 2 × --batch messages in flight: a batch only fills from messages in
//                 flight, so two batches alternate, one filling while the other commits.
// The emulator runs in this process, so its CPU is on the same event loop for every variant.
import { PubSub } from '@google-cloud/pubsub';
import { silentLogger } from '@oncely/core';
import { startPubSubEmulator } from '@oncely/emulators/pubsub';
import { PostgresStore } from '@oncely/postgres';
import { createPubSubConsumer } from '@oncely/pubsub';
import pg from 'pg';
import {
  brokerResult,
  cpuWindow,
  measureConsumer,
  printBrokerTable,
  roundResult,
  warmStore,
  withDeadline,
} from '../lib/brokerBench.mjs';
import {
  DATABASE_URL,
  emitResult,
  flags,
  interleaved,
  progress,
  runMain,
  uniqueTag,
} from '../lib/common.mjs';
import {
  benchHandlers,
  benchPool,
  createBenchSchema,
  dropSchema,
  fillPool,
  handMarkersDdl,
  markerTransaction,
} from '../lib/pg.mjs';
import { LatencyRecorder } from '../lib/stats.mjs';

const args = flags({ messages: 2000, concurrency: 16, rounds: 3, batch: 32 });
const N = Number(args.messages);
const CONCURRENCY = Number(args.concurrency);
const ROUNDS = Number(args.rounds);
const BATCH = Number(args.batch);
/**
 * The batch variant's in-flight messages: two batches' worth, so one fills while the other
 * commits (a batch only fills from messages in flight). The other variants keep
 * `--concurrency`, their own best setting on this machine.
 */
const BATCH_CONCURRENCY = 2 * BATCH;
const WARMUP = Math.min(N, 300);
const tag = uniqueTag();
const schema = `bench_pubsub_${tag}`;
const PROJECT = 'bench';
/** Above the core's default maxAttempts (5): Oncely dead-letters first, with its reason. */
const MAX_DELIVERY_ATTEMPTS = 10;
/** In the consumer name of every `oncely no policy` run; the measured ones start with the prefix. */
const NO_POLICY_MARK = 'nopolicy-';
const NO_POLICY_PREFIX = `bench-${NO_POLICY_MARK}`;

let deadLetterTopic;

let emulator;
let pubsub;
const created = [];

/**
 * A new topic and subscription holding `count` messages with a `message-id` attribute;
 * the subscription has the recommended dead-letter policy unless `deadLetterPolicy` is false.
 */
async function filledSubscription(variant, count, { deadLetterPolicy = true } = {}) {
  const name = `bench-${variant.replace(/\W+/g, '-')}-${tag}-${created.length}`;
  const [topic] = await pubsub.createTopic(name);
  const [subscription] = await topic.createSubscription(`${name}-sub`, {
    ackDeadlineSeconds: 60,
    ...(deadLetterPolicy
      ? {
          deadLetterPolicy: {
            deadLetterTopic: deadLetterTopic.name,
            maxDeliveryAttempts: MAX_DELIVERY_ATTEMPTS,
          },
        }
      : {}),
  });
  created.push({ topic, subscription });
  topic.setPublishOptions({ batching: { maxMessages: 500, maxMilliseconds: 10 } });
  const publishes = [];
  for (let j = 0; j < count; j++) {
    publishes.push(
      topic.publishMessage({
        data: Buffer.from(JSON.stringify({ orderId: `order-${j}`, amount: 40 })),
        attributes: { 'message-id': `${name}-${j}` },
      }),
    );
  }
  await Promise.all(publishes);
  return subscription.name;
}

async function rawLoop(withTransaction, total = N) {
  const name = await filledSubscription(withTransaction ? 'raw-tx' : 'raw', total);
  const pool = withTransaction ? benchPool(CONCURRENCY) : undefined;
  const subscription = pubsub.subscription(name, {
    flowControl: { maxMessages: CONCURRENCY, allowExcessMessages: false },
    streamingOptions: { maxStreams: 1 },
    // The client's default ack batch window is 100 ms, and the service sends no more than
    // max_outstanding_messages until acks arrive: with it, raw would measure that window.
    // 5 ms is the adapter's window for its own acks.
    batching: { maxMilliseconds: 5 },
  });
  try {
    if (pool) await fillPool(pool, CONCURRENCY);
    const transaction = pool ? markerTransaction(pool, schema, name) : undefined;
    const latency = new LatencyRecorder(total);
    let done = 0;
    let finishedAt;
    // From the first message in hand, as measureConsumer times Oncely (bench/lib/brokerBench.mjs).
    let started;
    const cpu = cpuWindow();
    let fail;
    const finished = new Promise((resolve, reject) => {
      fail = reject;
      subscription.on('message', async (message) => {
        const receivedAt = performance.now();
        started ??= receivedAt;
        cpu.start();
        try {
          const body = JSON.parse(message.data.toString('utf8'));
          if (transaction) await transaction(message.attributes['message-id'], body.orderId);
          message.ack();
          latency.record(performance.now() - receivedAt);
          if (++done === total) {
            finishedAt = performance.now();
            cpu.stop();
            resolve();
          }
        } catch (error) {
          reject(error);
        }
      });
      subscription.on('error', (error) => fail(error));
    });
    await withDeadline(finished, () => `${done} of ${total}`);
    const elapsedMs = finishedAt - started;
    return roundResult(done, elapsedMs, latency, cpu);
  } finally {
    await subscription.close();
    await pool?.end();
  }
}

/** Names tell the attempts rows apart: no-policy runs (measured or warm-up) and the rest. */
function consumerPrefix(noPolicy, measured) {
  if (!noPolicy) return 'bench-';
  return measured ? NO_POLICY_PREFIX : `warm-up-${NO_POLICY_MARK}`;
}

/**
 * `noPolicy`: on a subscription without a dead-letter policy; `measured`: the consumer's
 * name marks its attempts rows as the no-policy variant's (warm-up runs are left out).
 */
async function oncely(batch, total = N, { noPolicy = false, measured = true } = {}) {
  const variant = batch ? 'oncely-batch' : noPolicy ? 'oncely-nopolicy' : 'oncely';
  const name = await filledSubscription(variant, total, { deadLetterPolicy: !noPolicy });
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: CONCURRENCY });
  try {
    await warmStore(store, CONCURRENCY);
    const consumer = createPubSubConsumer({
      name: `${consumerPrefix(noPolicy, measured)}${created.length}-${tag}`,
      broker: { projectId: PROJECT, apiEndpoint: emulator.address, subscription: name },
      store,
      concurrency: batch ? BATCH_CONCURRENCY : CONCURRENCY,
      batch: batch ? { size: BATCH } : undefined,
      logger: silentLogger,
      ...benchHandlers(schema, batch),
    });
    return await measureConsumer(consumer, total);
  } finally {
    await store.close();
  }
}

/** Attempts rows of the measured no-policy runs, and of every run with the policy. */
async function attemptsRows() {
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  try {
    const { rows } = await admin.query(
      `SELECT count(*) FILTER (WHERE consumer LIKE $1)::int AS "noPolicy",
              count(*) FILTER (WHERE consumer NOT LIKE $2)::int AS "withPolicy"
         FROM "${schema}".attempts`,
      [`${NO_POLICY_PREFIX}%`, `%${NO_POLICY_MARK}%`],
    );
    return rows[0];
  } finally {
    await admin.end();
  }
}

async function main() {
  emulator = await startPubSubEmulator({ port: 0 });
  pubsub = new PubSub({ projectId: PROJECT, apiEndpoint: emulator.address });
  [deadLetterTopic] = await pubsub.createTopic(`bench-dead-letters-${tag}`);
  await createBenchSchema(schema);
  let result;
  try {
    const setup = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 1 });
    await setup.migrate();
    await setup.transaction((tx) => tx.query(handMarkersDdl(schema)));
    await setup.close();
    progress('pubsub: warm-up...');
    await rawLoop(true, WARMUP);
    await oncely(false, WARMUP);
    await oncely(false, WARMUP, { noPolicy: true, measured: false });
    await oncely(true, WARMUP);
    progress(`pubsub: ${ROUNDS} interleaved rounds of ${N} messages, concurrency ${CONCURRENCY}...`);
    const rounds = await interleaved(
      ROUNDS,
      {
        raw: () => rawLoop(false),
        'raw+tx': () => rawLoop(true),
        oncely: () => oncely(false),
        'oncely no policy': () => oncely(false, N, { noPolicy: true }),
        'oncely batch': () => oncely(true),
      },
      (round, results) =>
        progress(
          `  round ${round + 1}: ${Object.entries(results)
            .map(([variant, list]) => `${variant} ${Math.round(list[round].perSecond)}/s`)
            .join(', ')}`,
        ),
    );
    result = brokerResult('pubsub (emulator)', rounds, {
      messages: N,
      concurrency: CONCURRENCY,
      rounds: ROUNDS,
      batch: BATCH,
      batchConcurrency: BATCH_CONCURRENCY,
    });
    // The recommended configuration (a dead-letter policy) writes none on the happy path;
    // without a policy every message costs one (its run counted up front).
    const rows = await attemptsRows();
    result.attemptsRows = rows.withPolicy;
    result.attemptsRowsNoPolicy = rows.noPolicy;
    // Here raw+tx is the marker transaction written by hand (handMarkerTransaction).
    result.markerBaseline = 'raw+tx';
  } finally {
    for (const { topic, subscription } of created) {
      await subscription.delete().catch(() => {});
      await topic.delete().catch(() => {});
    }
    await deadLetterTopic?.delete().catch(() => {});
    await pubsub.close();
    await emulator.stop();
    await dropSchema(schema);
  }
  printBrokerTable(
    `Scenario 3 — Pub/Sub on the in-process emulator, ${N} messages, concurrency ${CONCURRENCY}, batch size ${BATCH} (medians of ${ROUNDS} rounds); raw+tx writes the processed marker by hand`,
    result,
  );
  console.log(
    `attempts rows after the run: ${result.attemptsRows} with the dead-letter policy (oncely, oncely batch), ${result.attemptsRowsNoPolicy} without it (oncely no policy, ${ROUNDS * N} messages)`,
  );
  emitResult(result);
}

runMain(main);
