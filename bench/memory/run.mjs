#!/usr/bin/env node
// Scenario 3 — the in-process memory broker: raw receive+ack loop against the Oncely
// consumer, on the same kind of messages, with the real PostgreSQL store.
//
//   node bench/memory/run.mjs [--messages 2000] [--concurrency 16] [--rounds 3] [--batch 32]
//
// Variants (each round drains a freshly filled queue of its own, in rotated order):
//   raw           broker.receive (at most the free slots) + JSON round trip of the body + broker.ack
//   raw+tx        the same plus one bare transaction with the business INSERT per message
//   raw+marker    the same plus the marker transaction written by hand (BEGIN, INSERT marker
//                 ON CONFLICT DO NOTHING, the business INSERT, COMMIT): issue 15's baseline
//   oncely        createMemoryConsumer + PostgresStore; the handler does the same INSERT via ctx.tx
//   oncely batch  the same consumer with `batch: { size: --batch }` and `batchHandler`
//                 (one INSERT for the batch's rows: the batch path as documented), with
//                 2 × --batch messages in flight: a batch only fills from messages in
//                 flight, so two batches alternate, one filling while the other commits.
// The store's pool is opened before the clock starts, as the raw+tx pool is.
import { silentLogger } from '@oncely/core';
import { createMemoryConsumer, MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { brokerResult, measureConsumer, printBrokerTable, slotLoop, warmStore } from '../lib/brokerBench.mjs';
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
const schema = `bench_memory_${tag}`;

const broker = new MemoryBroker();
let queueCounter = 0;

/** A new queue holding N messages with producer IDs and JSON bodies. */
async function filledQueue(variant, count) {
  const queue = `bench-${variant.replace(/\W+/g, '-')}-${queueCounter++}`;
  broker.createQueue(queue, { visibilityTimeoutMs: 60_000 });
  for (let i = 0; i < count; i++) {
    await broker.send(queue, { id: `${queue}-${i}`, body: { orderId: `order-${i}`, amount: 40 } });
  }
  return queue;
}

/** mode: 'plain' (no database), 'tx' (bare transaction), 'marker' (the marker transaction by hand). */
async function rawLoop(mode, total = N) {
  const queue = await filledQueue(`raw-${mode}`, total);
  const pool = mode === 'plain' ? undefined : benchPool(CONCURRENCY);
  try {
    if (pool) await fillPool(pool, CONCURRENCY);
    const bare = mode === 'tx' ? bareTransaction(pool, schema) : undefined;
    const marked = mode === 'marker' ? markerTransaction(pool, schema, `raw-${queue}`) : undefined;
    return await slotLoop({
      concurrency: CONCURRENCY,
      total,
      receive: (max) => broker.receive(queue, { max: Math.min(max, 10), waitMs: 100 }),
      handle: async (delivery) => {
        // The consumer decodes a body on every delivery; the raw loop pays the same.
        const body = JSON.parse(JSON.stringify(delivery.body));
        if (bare) await bare(body.orderId);
        if (marked) await marked(delivery.messageId, body.orderId);
        await broker.ack(delivery.receipt);
      },
    });
  } finally {
    await pool?.end();
  }
}

async function oncely(batch, total = N) {
  const queue = await filledQueue(batch ? 'oncely-batch' : 'oncely', total);
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: CONCURRENCY });
  try {
    await warmStore(store, CONCURRENCY);
    const consumer = createMemoryConsumer({
      name: `bench-${queue}`,
      broker: { broker, queue, pollWaitMs: 100 },
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

async function main() {
  await createBenchSchema(schema);
  let result;
  try {
    const setup = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 1 });
    await setup.migrate();
    await setup.close();
    // One short unmeasured pass of each, so JIT and connection setup are not in round 1.
    progress('memory: warm-up...');
    await createHandMarkers(schema);
    await rawLoop('tx', WARMUP);
    await rawLoop('marker', WARMUP);
    await oncely(false, WARMUP);
    await oncely(true, WARMUP);
    progress(`memory: ${ROUNDS} interleaved rounds of ${N} messages, concurrency ${CONCURRENCY}...`);
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
    result = brokerResult('memory', rounds, {
      messages: N,
      concurrency: CONCURRENCY,
      rounds: ROUNDS,
      batch: BATCH,
      batchConcurrency: BATCH_CONCURRENCY,
    });
    result.attemptsRows = await countAttempts(schema);
  } finally {
    broker.close();
    await dropSchema(schema);
  }
  printBrokerTable(
    `Scenario 3 — memory broker, ${N} messages, concurrency ${CONCURRENCY}, batch size ${BATCH} (medians of ${ROUNDS} rounds)`,
    result,
  );
  emitResult(result);
}

runMain(main);
