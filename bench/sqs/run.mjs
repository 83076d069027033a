#!/usr/bin/env node
// Scenario 3 — SQS on fauxqs (in-process emulator): raw @aws-sdk/client-sqs receive+delete
// loop against the Oncely SQS consumer, with the real PostgreSQL store.
//
//   node bench/sqs/run.mjs [--messages 2000] [--concurrency 16] [--rounds 3] [--batch 32]
//
// Variants (each round drains a freshly filled queue of its own, in rotated order):
//   raw           ceil(concurrency / 10) pollers, each: ReceiveMessage (up to 10, long poll
//                 1 s), parse every body, one DeleteMessageBatch for what it received —
//                 the loop people write by hand
//   raw+tx        the same plus one bare transaction with the business INSERT per message
//   raw+marker    the same plus the marker transaction written by hand (issue 15's baseline)
//                 (the messages of a receive run concurrently)
//   oncely        createSqsConsumer + PostgresStore; the handler does the same INSERT via ctx.tx
//   oncely batch  the same consumer with `batch: { size: --batch }` and `batchHandler`
//                 (one INSERT for the batch's rows: the batch path as documented), with
//                 2 × --batch messages in flight: a batch only fills from messages in
//                 flight, so two batches alternate, one filling while the other commits.
// fauxqs runs in this process, so its CPU is on the same event loop for every variant.
import {
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  DeleteQueueCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { createSqsConsumer } from '@oncely/sqs';
import { startFauxqs } from 'fauxqs';
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
  bareTransaction,
  benchHandlers,
  benchPool,
  countAttempts,
  createBenchSchema,
  createHandMarkers,
  dropSchema,
  fillPool,
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
const schema = `bench_sqs_${tag}`;
const CREDENTIALS = { accessKeyId: 'bench', secretAccessKey: 'bench' };
const REGION = 'us-east-1';

let server;
let client;
const queues = [];

/** A new queue holding `count` messages with a `message-id` attribute and a JSON body. */
async function filledQueue(variant, count) {
  const name = `bench-${variant.replace(/\W+/g, '-')}-${tag}-${queues.length}`;
  const { QueueUrl } = await client.send(
    new CreateQueueCommand({ QueueName: name, Attributes: { VisibilityTimeout: '60' } }),
  );
  queues.push(QueueUrl);
  for (let i = 0; i < count; i += 10) {
    const entries = [];
    for (let j = i; j < Math.min(count, i + 10); j++) {
      entries.push({
        Id: String(j - i),
        MessageBody: JSON.stringify({ orderId: `order-${j}`, amount: 40 }),
        MessageAttributes: { 'message-id': { DataType: 'String', StringValue: `${name}-${j}` } },
      });
    }
    const out = await client.send(new SendMessageBatchCommand({ QueueUrl, Entries: entries }));
    if (out.Failed?.length) throw new Error(`send failed: ${JSON.stringify(out.Failed)}`);
  }
  return QueueUrl;
}

/** mode: 'plain' (no database), 'tx' (bare transaction), 'marker' (the marker transaction by hand). */
async function rawLoop(mode, total = N) {
  const queueUrl = await filledQueue(`raw-${mode}`, total);
  const pool = mode === 'plain' ? undefined : benchPool(CONCURRENCY);
  try {
    if (pool) await fillPool(pool, CONCURRENCY);
    const bare = mode === 'tx' ? bareTransaction(pool, schema) : undefined;
    const marked = mode === 'marker' ? markerTransaction(pool, schema, `raw-${queueUrl}`) : undefined;
    const pollers = Math.ceil(CONCURRENCY / 10);
    const perPoll = Math.min(10, Math.ceil(CONCURRENCY / pollers));
    const latency = new LatencyRecorder(total);
    let done = 0;
    let finishedAt;
    // The clock stops at the last delete; a poller still long-polling an empty queue then
    // is aborted rather than waited for.
    const stop = new AbortController();
    // From the first message in hand, as measureConsumer times Oncely (bench/lib/brokerBench.mjs).
    let started;
    const cpu = cpuWindow();
    const poller = async () => {
      while (done < total) {
        let received;
        try {
          received = await client.send(
            new ReceiveMessageCommand({
              QueueUrl: queueUrl,
              MaxNumberOfMessages: perPoll,
              WaitTimeSeconds: 1,
              MessageAttributeNames: ['All'],
            }),
            { abortSignal: stop.signal },
          );
        } catch (error) {
          if (stop.signal.aborted) return;
          throw error;
        }
        const { Messages = [] } = received;
        if (Messages.length === 0) continue;
        const fetchedAt = performance.now();
        started ??= fetchedAt;
        cpu.start();
        await Promise.all(
          Messages.map(async (message) => {
            const body = JSON.parse(message.Body);
            if (bare) await bare(body.orderId);
            if (marked) await marked(message.MessageAttributes['message-id'].StringValue, body.orderId);
          }),
        );
        const out = await client.send(
          new DeleteMessageBatchCommand({
            QueueUrl: queueUrl,
            Entries: Messages.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
          }),
        );
        if (out.Failed?.length) throw new Error(`delete failed: ${JSON.stringify(out.Failed)}`);
        const now = performance.now();
        for (let i = 0; i < Messages.length; i++) latency.record(now - fetchedAt);
        done += Messages.length;
        if (done >= total) {
          finishedAt ??= now;
          cpu.stop();
          stop.abort();
        }
      }
    };
    await withDeadline(Promise.all(Array.from({ length: pollers }, poller)), () => `${done} of ${total}`);
    const elapsedMs = finishedAt - started;
    return roundResult(done, elapsedMs, latency, cpu);
  } finally {
    await pool?.end();
  }
}

async function oncely(batch, total = N) {
  const queueUrl = await filledQueue(batch ? 'oncely-batch' : 'oncely', total);
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: CONCURRENCY });
  try {
    await warmStore(store, CONCURRENCY);
    const consumer = createSqsConsumer({
      name: `bench-${queues.length}-${tag}`,
      broker: {
        queueUrl,
        endpoint: server.address,
        region: REGION,
        credentials: CREDENTIALS,
        waitTimeSeconds: 1,
      },
      store,
      concurrency: batch ? BATCH_CONCURRENCY : CONCURRENCY,
      batch: batch ? { size: BATCH } : undefined,
      idStrategy: { attribute: 'message-id' },
      logger: silentLogger,
      ...benchHandlers(schema, batch),
    });
    return await measureConsumer(consumer, total);
  } finally {
    await store.close();
  }
}

async function main() {
  server = await startFauxqs({ port: 0, logger: false });
  client = new SQSClient({ endpoint: server.address, region: REGION, credentials: CREDENTIALS });
  await createBenchSchema(schema);
  let result;
  try {
    const setup = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 1 });
    await setup.migrate();
    await setup.close();
    progress('sqs: warm-up...');
    await createHandMarkers(schema);
    await rawLoop('tx', WARMUP);
    await rawLoop('marker', WARMUP);
    await oncely(false, WARMUP);
    await oncely(true, WARMUP);
    progress(`sqs: ${ROUNDS} interleaved rounds of ${N} messages, concurrency ${CONCURRENCY}...`);
    const rounds = await interleaved(
      ROUNDS,
      {
        raw: () => rawLoop('plain'),
        'raw+tx': () => rawLoop('tx'),
        'raw+marker': () => rawLoop('marker'),
        oncely: () => oncely(false),
        'oncely batch': () => oncely(true),
      },
      (round, results) =>
        progress(
          `  round ${round + 1}: ${Object.entries(results)
            .map(([name, list]) => `${name} ${Math.round(list[round].perSecond)}/s`)
            .join(', ')}`,
        ),
    );
    result = brokerResult('sqs (fauxqs)', rounds, {
      messages: N,
      concurrency: CONCURRENCY,
      rounds: ROUNDS,
      batch: BATCH,
      batchConcurrency: BATCH_CONCURRENCY,
    });
    result.attemptsRows = await countAttempts(schema);
  } finally {
    for (const QueueUrl of queues) await client.send(new DeleteQueueCommand({ QueueUrl })).catch(() => {});
    client.destroy();
    await server.stop();
    await dropSchema(schema);
  }
  printBrokerTable(
    `Scenario 3 — SQS on fauxqs (in process), ${N} messages, concurrency ${CONCURRENCY}, batch size ${BATCH} (medians of ${ROUNDS} rounds)`,
    result,
  );
  emitResult(result);
}

runMain(main);
