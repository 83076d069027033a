#!/usr/bin/env node
// Scenario 3 — Azure Service Bus on the @oncely/emulators emulator (in process, AMQP 1.0
// over loopback): raw @azure/service-bus receive+complete loops against the Oncely
// Service Bus consumer, with the real PostgreSQL store.
//
//   node bench/servicebus/run.mjs [--messages 2000] [--concurrency 16] [--rounds 3] [--batch 32] [--nagle 0|1]
//
// Variants (each round drains a freshly filled queue of its own, in rotated order):
//   raw          receiveMessages (at most the free slots of `concurrency`, peek-lock, the
//                SDK's lock renewer off), parse every body, completeMessage each — the loop
//                people write by hand
//   raw+tx       the same plus one bare transaction with the business INSERT per message
//   raw+marker   the same plus the marker transaction by hand: BEGIN, INSERT the processed
//                marker ON CONFLICT DO NOTHING, the business INSERT when the marker is new,
//                COMMIT, then complete — what Oncely does, written inline
//   oncely       createServiceBusConsumer + PostgresStore; the handler does the same INSERT.
//                It gets the same connected ServiceBusClient as the raw loops (broker.client),
//                so neither side's time includes opening the AMQP connection
//   oncely batch  the same consumer with `batch: { size: --batch }` and `batchHandler`
//                 (one INSERT for the batch's rows: the batch path as documented), with
//                 2 × --batch messages in flight: a batch only fills from messages in
//                 flight, so two batches alternate, one filling while the other commits.
// The emulator runs in this process, so its CPU is on the same event loop for every variant.
// The client's socket runs without Nagle's algorithm, as the emulator's does (see
// withoutNagle); `--nagle 1` keeps the SDK's default to show what that costs.
import { ServiceBusClient } from '@azure/service-bus';
import { silentLogger } from '@oncely/core';
import { startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { PostgresStore } from '@oncely/postgres';
import { createServiceBusConsumer } from '@oncely/servicebus';
import { brokerResult, measureConsumer, printBrokerTable, slotLoop, warmStore } from '../lib/brokerBench.mjs';
import {
  DATABASE_URL,
  emitResult,
  flags,
  interleaved,
  medianRatio,
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
  dropSchema,
  fillPool,
  handMarkersDdl,
  markerTransaction,
} from '../lib/pg.mjs';
import { formatRatio } from '../lib/stats.mjs';

const args = flags({ messages: 2000, concurrency: 16, rounds: 3, batch: 32, nagle: 0 });
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
const schema = `bench_sb_${tag}`;
const WAIT_MS = 1000;

let emulator;
let client;
let queueCount = 0;

/**
 * Turns Nagle's algorithm off on the client's AMQP socket. The SDK leaves it on: rhea
 * turns it off when a receiver is attached through the connection, and the SDK attaches
 * through sessions. Over loopback every small request frame (a CBS token, a link attach,
 * a `$management` request) then waits for the emulator's delayed ACK, about 40 ms, so
 * opening a link takes 50-100 ms instead of a few. Every variant opens its receiver
 * inside its clock, the Oncely consumer also its `$management` link (its start peeks to
 * check the entity): about 150 ms against the raw loop's 50, in rounds of a few hundred
 * ms. Called once the connection is open (after a send), so every variant runs with it.
 */
function withoutNagle() {
  if (args.nagle === '1') return;
  const socket = client._connectionContext?.connection?._connection?.socket;
  if (typeof socket?.setNoDelay !== 'function')
    throw new Error('the ServiceBusClient has no open socket to configure');
  socket.setNoDelay(true);
}

/** A new queue holding `count` messages with a MessageId and a JSON body. */
async function filledQueue(variant, count) {
  const name = `bench-${variant.replace(/\W+/g, '-')}-${tag}-${queueCount++}`;
  emulator.createQueue(name, { LockDuration: 'PT60S', MaxDeliveryCount: 10 });
  const sender = client.createSender(name);
  let batch = await sender.createMessageBatch();
  for (let j = 0; j < count; j++) {
    const message = { body: { orderId: `order-${j}`, amount: 40 }, messageId: `${name}-${j}` };
    if (!batch.tryAddMessage(message)) {
      await sender.sendMessages(batch);
      batch = await sender.createMessageBatch();
      batch.tryAddMessage(message);
    }
  }
  if (batch.count > 0) await sender.sendMessages(batch);
  await sender.close();
  withoutNagle();
  return name;
}

async function rawLoop(mode, total = N) {
  const queue = await filledQueue(`raw-${mode}`, total);
  const pool = mode === 'plain' ? undefined : benchPool(CONCURRENCY);
  const receiver = client.createReceiver(queue, { maxAutoLockRenewalDurationInMs: 0 });
  try {
    if (pool) await fillPool(pool, CONCURRENCY);
    const work =
      mode === 'tx'
        ? bareTransaction(pool, schema)
        : mode === 'marker'
          ? markerTransaction(pool, schema, `raw-${tag}`)
          : undefined;
    return await slotLoop({
      concurrency: CONCURRENCY,
      total,
      receive: (max) => receiver.receiveMessages(max, { maxWaitTimeInMs: WAIT_MS }),
      handle: async (message) => {
        const body = message.body;
        if (mode === 'tx') await work(body.orderId);
        else if (mode === 'marker') await work(String(message.messageId), body.orderId);
        await receiver.completeMessage(message);
      },
    });
  } finally {
    await receiver.close();
    await pool?.end();
  }
}

async function oncely(batch, total = N) {
  const queue = await filledQueue(batch ? 'oncely-batch' : 'oncely', total);
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: CONCURRENCY });
  try {
    await warmStore(store, CONCURRENCY);
    const consumer = createServiceBusConsumer({
      name: `bench-${queueCount}-${tag}`,
      broker: { client, queueName: queue, maxWaitTimeMs: WAIT_MS },
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
  emulator = await startServiceBusEmulator({ port: 0 });
  client = new ServiceBusClient(emulator.connectionString);
  await createBenchSchema(schema);
  let result;
  try {
    const setup = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 1 });
    await setup.migrate();
    await setup.transaction((tx) => tx.query(handMarkersDdl(schema)));
    await setup.close();
    progress('servicebus: warm-up...');
    await rawLoop('marker', WARMUP);
    await oncely(false, WARMUP);
    await oncely(true, WARMUP);
    progress(`servicebus: ${ROUNDS} interleaved rounds of ${N} messages, concurrency ${CONCURRENCY}...`);
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
    result = brokerResult('servicebus (@oncely/emulators)', rounds, {
      messages: N,
      concurrency: CONCURRENCY,
      rounds: ROUNDS,
      batch: BATCH,
      batchConcurrency: BATCH_CONCURRENCY,
      nagle: args.nagle === '1',
    });
    result.attemptsRows = await countAttempts(schema);
    result.vsRawMarker = Object.fromEntries(
      Object.keys(rounds).map((name) => [name, medianRatio(rounds['raw+marker'], rounds[name])]),
    );
  } finally {
    await client.close();
    await emulator.stop();
    await dropSchema(schema);
  }
  printBrokerTable(
    `Scenario 3 — Service Bus on the @oncely/emulators emulator (in process), ${N} messages, concurrency ${CONCURRENCY}, batch size ${BATCH}, Nagle ${args.nagle === '1' ? 'on' : 'off'} (medians of ${ROUNDS} rounds)`,
    result,
  );
  console.log('raw+marker/variant (the marker transaction written by hand):');
  for (const [name, ratio] of Object.entries(result.vsRawMarker))
    console.log(`  ${name.padEnd(15)} ${formatRatio(ratio)}`);
  emitResult(result);
}

runMain(main);
