#!/usr/bin/env node
// Throughput of the Oncely RabbitMQ consumer against a raw amqplib consume + ack loop,
// on the same messages, in the same process. Not a test: it prints numbers.
//
//   npm run build && node bench/rabbitmq/run.mjs
//
// Environment: RABBITMQ_URL (amqp://guest:guest@127.0.0.1:5672), DATABASE_URL
// (postgres://postgres@127.0.0.1:5432/test), BENCH_MESSAGES (10000), BENCH_CONCURRENCY
// (prefetch of the raw loop = concurrency of the Oncely consumer, 16), BENCH_EFFECT=1 to
// make the Oncely handler also INSERT one business row per message (default: the
// processed marker is the only write), BENCH_QUEUE_TYPE (classic | quorum, classic),
// BENCH_WARMUP (unmeasured messages per side first, 3000), BENCH_ORDER_OFFSET (which side
// runs first: 0 raw, 1 marker tx only, 2 raw + marker tx, 3 Oncely, the rest in that
// order, wrapping around; bench/run.mjs rotates it from run to run), BENCH_PROFILE=1 to
// sample the CPU of each run in process (node:inspector) and print where the Oncely run's
// main-thread time went, by package (BENCH_PROFILE_DIR: also write each run's .cpuprofile
// there, for a flame graph).
//
// Each side gets the same N messages (same IDs, same bodies) published up front to a
// queue of its own; each side's clock (wall and CPU) runs from its first message in hand
// to its last one done. The raw loop parses each body and acks it: it is the floor cost
// of the broker. The Oncely consumer runs the whole pipeline per message: ID, body decode,
// one PostgreSQL transaction with the marker INSERT (and optional effect), commit, then
// the ack.
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { assertTopology, createRabbitMqConsumer } from '@oncely/rabbitmq';
import amqp from 'amqplib';
import pg from 'pg';
import { handMarkersDdl } from '../lib/pg.mjs';
import { startProfile, stopProfile } from '../lib/profile.mjs';

// Read through `env`: these are run-time knobs of a script, not inputs of a turbo task.
const { env } = process;
const RABBITMQ_URL = env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const DATABASE_URL = env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const N = Number(env.BENCH_MESSAGES ?? 10_000);
const CONCURRENCY = Number(env.BENCH_CONCURRENCY ?? 16);
const WITH_EFFECT = env.BENCH_EFFECT === '1';
const QUEUE_TYPE = env.BENCH_QUEUE_TYPE ?? 'classic';
/**
 * Messages each side consumes, unmeasured, before the measured runs. With 500 the first
 * measured side ran at about 60 % of its rate in a later slot, whichever side it was (raw
 * amqplib: 27,000/s first, 38,000-51,000/s later): amqplib's and pg's code was not yet
 * optimised. With 3000 the slot no longer showed.
 */
const WARMUP = Number(env.BENCH_WARMUP ?? 3000);
const PROFILE = env.BENCH_PROFILE === '1';
/** Which side runs first (bench/run.mjs passes the run's number, so the order rotates). */
const ORDER_OFFSET = Number(env.BENCH_ORDER_OFFSET ?? 0);
const PROFILE_DIR = env.BENCH_PROFILE_DIR;

/**
 * One side's clock: wall time and this process's CPU (user + system: the broker client,
 * the pg driver and Oncely all run here) from the first message in hand to the last one
 * done. Opening a channel or starting a consumer (connect, declare, consume) is not
 * per-message work, on either side.
 */
class Stopwatch {
  /** At the first message; later calls keep the first reading. */
  start() {
    this.startedAt ??= performance.now();
    this.cpuBefore ??= process.cpuUsage();
  }

  stop() {
    this.ms = performance.now() - this.startedAt;
    this.cpu = process.cpuUsage(this.cpuBefore);
  }
}

/**
 * Runs one side (`work(watch)` starts and stops the watch) and reports its elapsed ms and
 * CPU µs per message, and with BENCH_PROFILE the main thread's sampled time by package
 * (over the whole side, set-up included).
 */
async function measured(label, count, work) {
  if (PROFILE) await startProfile();
  const watch = new Stopwatch();
  await work(watch);
  const profile = PROFILE ? await stopProfile() : undefined;
  if (profile && PROFILE_DIR)
    writeFileSync(join(PROFILE_DIR, `rabbitmq-${label}.cpuprofile`), JSON.stringify(profile));
  return {
    ms: watch.ms,
    cpuUs: (watch.cpu.user + watch.cpu.system) / count,
    byPackage: profile && msPerPackage(profile, count),
  };
}

/** Where a package's code sits in a profile's URLs, in print order. */
const PACKAGES = [
  ['@oncely/core', '/packages/core/'],
  ['@oncely/rabbitmq', '/packages/rabbitmq/'],
  ['@oncely/postgres', '/packages/postgres/'],
  ['amqplib', '/node_modules/amqplib/'],
  ['pg', '/node_modules/pg'],
];

/**
 * Self time per message (µs of main-thread wall time sampled in each place): the
 * packages above, socket writes, the garbage collector, the rest of what is not idle.
 */
function msPerPackage(profile, count) {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node.callFrame]));
  const usPerSample = (profile.endTime - profile.startTime) / profile.samples.length;
  const totals = new Map();
  for (const id of profile.samples) {
    const { functionName, url } = nodes.get(id);
    let place = PACKAGES.find(([, part]) => url.includes(part))?.[0];
    if (!place && functionName === '(idle)') continue;
    if (!place && (functionName === 'writeBuffer' || functionName === 'writev')) place = 'socket writes';
    if (!place && functionName === '(garbage collector)') place = 'GC';
    place ??= 'other';
    totals.set(place, (totals.get(place) ?? 0) + usPerSample);
  }
  return Object.fromEntries([...totals].map(([place, us]) => [place, Math.round(us / count)]));
}

const run = randomUUID().slice(0, 8);
const schema = `bench_rmq_${run}`;

async function publishAll(channel, queue, count, prefix) {
  for (let i = 0; i < count; i++) {
    const body = Buffer.from(JSON.stringify({ n: i, orderId: `order-${i}`, amount: 40 }));
    const ok = channel.sendToQueue(queue, body, {
      messageId: `${prefix}-${i}`,
      persistent: true,
      contentType: 'application/json',
    });
    if (!ok) await new Promise((resolve) => channel.once('drain', resolve));
    if (i % 1000 === 999) await channel.waitForConfirms();
  }
  await channel.waitForConfirms();
}

async function declare(channel, queue) {
  await channel.assertQueue(queue, { durable: true, arguments: { 'x-queue-type': QUEUE_TYPE } });
}

/** Raw amqplib: consume with prefetch = CONCURRENCY, parse, ack. */
async function rawLoop(connection, queue, count, watch = new Stopwatch()) {
  const channel = await connection.createChannel();
  await channel.prefetch(CONCURRENCY, false);
  let done = 0;
  await new Promise((resolve, reject) => {
    channel
      .consume(
        queue,
        (msg) => {
          watch.start();
          JSON.parse(msg.content.toString('utf8'));
          channel.ack(msg);
          if (++done === count) resolve();
        },
        { noAck: false },
      )
      .catch(reject);
  });
  watch.stop();
  await channel.close();
}

/**
 * Raw amqplib with the marker transaction written by hand (what a careful user writes):
 * prefetch = CONCURRENCY, per message BEGIN, INSERT the marker ON CONFLICT DO NOTHING, the
 * business INSERT when it is new, COMMIT on a pg.Pool, then the ack.
 */
async function rawMarkerLoop(connection, pool, queue, count, watch = new Stopwatch()) {
  const channel = await connection.createChannel();
  await channel.prefetch(CONCURRENCY, false);
  const mark = `INSERT INTO "${schema}".hand_markers (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`;
  const insert = `INSERT INTO "${schema}".payments(order_id, amount) VALUES ($1, $2)`;
  let done = 0;
  await new Promise((resolve, reject) => {
    channel
      .consume(
        queue,
        (msg) => {
          watch.start();
          const handle = async () => {
            const body = JSON.parse(msg.content.toString('utf8'));
            const client = await pool.connect();
            try {
              await client.query('BEGIN');
              try {
                const claimed = await client.query(mark, [queue, msg.properties.messageId]);
                if (claimed.rowCount === 1 && WITH_EFFECT)
                  await client.query(insert, [body.orderId, body.amount]);
                await client.query('COMMIT');
              } catch (error) {
                await client.query('ROLLBACK').catch(() => {});
                throw error;
              }
            } finally {
              client.release();
            }
            channel.ack(msg);
            if (++done === count) resolve();
          };
          handle().catch(reject);
        },
        { noAck: false },
      )
      .catch(reject);
  });
  watch.stop();
  await channel.close();
}

/** The Oncely consumer on the same kind of queue, with the real PostgreSQL store. */
async function oncelyLoop(store, queue, count, name, watch = new Stopwatch()) {
  const consumer = createRabbitMqConsumer({
    name,
    store,
    logger: silentLogger,
    concurrency: CONCURRENCY,
    broker: { url: RABBITMQ_URL, queue, queueType: QUEUE_TYPE },
    handler: WITH_EFFECT
      ? async (message, ctx) => {
          await ctx.tx.query(`INSERT INTO "${schema}".payments(order_id, amount) VALUES ($1, $2)`, [
            message.body.orderId,
            message.body.amount,
          ]);
        }
      : async () => {},
  });
  let done = 0;
  let failures = 0;
  const finished = new Promise((resolve) => {
    const count1 = () => {
      if (++done === count) resolve();
    };
    consumer.on('processed', count1);
    consumer.on('duplicate', count1);
  });
  consumer.on('failed', () => failures++);
  consumer.on('ackFailed', () => failures++);
  consumer.on('received', () => watch.start());
  await consumer.start();
  await finished;
  watch.stop();
  await consumer.stop();
  if (failures > 0) throw new Error(`${failures} failures during the Oncely run`);
}

/**
 * The store alone: the same marker transaction per message (claim, optional effect,
 * commit), CONCURRENCY at a time, no broker. Shows how much of the gap is PostgreSQL.
 */
async function storeOnly(store, count, name, watch) {
  let next = 0;
  watch.start();
  const worker = async () => {
    for (let i = next++; i < count; i = next++) {
      await store.transaction(async (tx) => {
        const claimed = await store.claim(tx, name, [`m-${i}`]);
        if (claimed.size !== 1) throw new Error(`m-${i} was already claimed`);
        if (WITH_EFFECT) {
          await tx.query(`INSERT INTO "${schema}".payments(order_id, amount) VALUES ($1, $2)`, [
            `order-${i}`,
            40,
          ]);
        }
      });
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  watch.stop();
}

async function main() {
  const connection = await amqp.connect(RABBITMQ_URL, {
    clientProperties: { connection_name: `oncely-bench:${run}` },
  });
  const channel = await connection.createConfirmChannel();
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  await admin.query(`CREATE SCHEMA "${schema}"`);
  await admin.query(`CREATE TABLE "${schema}".payments(order_id text NOT NULL, amount int NOT NULL)`);
  const handPool = new pg.Pool({ connectionString: DATABASE_URL, max: CONCURRENCY, keepAlive: true });
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: CONCURRENCY + 2 });
  await store.migrate();
  await admin.query(handMarkersDdl(schema));

  const queues = {
    rawWarm: `bench.raw.warm.${run}`,
    raw: `bench.raw.${run}`,
    rawMarkerWarm: `bench.rawmarker.warm.${run}`,
    rawMarker: `bench.rawmarker.${run}`,
    oncelyWarm: `bench.oncely.warm.${run}`,
    oncely: `bench.oncely.${run}`,
  };
  try {
    await declare(channel, queues.rawWarm);
    await declare(channel, queues.raw);
    await declare(channel, queues.rawMarkerWarm);
    await declare(channel, queues.rawMarker);
    // The Oncely queues get the topology the consumer declares (dead-letter exchange).
    await assertTopology(channel, { queue: queues.oncelyWarm, queueType: QUEUE_TYPE });
    await assertTopology(channel, { queue: queues.oncely, queueType: QUEUE_TYPE });
    process.stdout.write(`publishing ${N} messages to each side (+${WARMUP} warm-up)... `);
    await publishAll(channel, queues.rawWarm, WARMUP, 'warm');
    await publishAll(channel, queues.oncelyWarm, WARMUP, 'warm');
    await publishAll(channel, queues.raw, N, 'm');
    await publishAll(channel, queues.rawMarkerWarm, WARMUP, 'warm');
    await publishAll(channel, queues.rawMarker, N, 'm');
    await publishAll(channel, queues.oncely, N, 'm');
    console.log('done');

    await rawLoop(connection, queues.rawWarm, WARMUP);
    await rawMarkerLoop(connection, handPool, queues.rawMarkerWarm, WARMUP);
    await oncelyLoop(store, queues.oncelyWarm, WARMUP, 'bench-warmup');

    // The four sides in turn, starting at BENCH_ORDER_OFFSET: whatever the side before
    // leaves behind (table growth, a checkpoint, dirty buffers) falls on each side in turn
    // over several runs, not always on the one that runs last.
    const sides = {
      raw: () => measured('raw', N, (watch) => rawLoop(connection, queues.raw, N, watch)),
      storeOnly: () => measured('store-only', N, (watch) => storeOnly(store, N, 'bench-store-only', watch)),
      rawMarker: () =>
        measured('raw-marker', N, (watch) => rawMarkerLoop(connection, handPool, queues.rawMarker, N, watch)),
      oncely: () => measured('oncely', N, (watch) => oncelyLoop(store, queues.oncely, N, 'bench', watch)),
    };
    const names = Object.keys(sides);
    const order = names.map((_, i) => names[(i + ORDER_OFFSET) % names.length]);
    const measuredSides = {};
    for (const name of order) measuredSides[name] = await sides[name]();
    const { raw, storeOnly: store1, rawMarker, oncely } = measuredSides;
    const [rawMs, storeMs, rawMarkerMs, oncelyMs] = [raw.ms, store1.ms, rawMarker.ms, oncely.ms];
    const { rows } = await admin.query(
      `SELECT count(*)::int AS n FROM "${schema}".processed_messages WHERE consumer = 'bench'`,
    );
    if (rows[0].n !== N) throw new Error(`expected ${N} processed markers, found ${rows[0].n}`);

    const rawRate = N / (rawMs / 1000);
    const oncelyRate = N / (oncelyMs / 1000);
    console.log('');
    console.log(
      `RabbitMQ ${connection.connection.serverProperties.version}, ${QUEUE_TYPE} queue, ${N} messages, prefetch/concurrency ${CONCURRENCY}, handler: ${WITH_EFFECT ? 'one INSERT' : 'marker only'}, order: ${order.join(', ')}`,
    );
    console.log(
      `  raw amqplib consume+ack   ${rawMs.toFixed(0).padStart(7)} ms  ${rawRate.toFixed(0).padStart(7)} msgs/s`,
    );
    console.log(
      `  Oncely + PostgreSQL       ${oncelyMs.toFixed(0).padStart(7)} ms  ${oncelyRate.toFixed(0).padStart(7)} msgs/s`,
    );
    const storeRate = N / (storeMs / 1000);
    console.log(
      `  PostgreSQL marker tx only ${storeMs.toFixed(0).padStart(7)} ms  ${storeRate.toFixed(0).padStart(7)} msgs/s`,
    );
    const rawMarkerRate = N / (rawMarkerMs / 1000);
    console.log(
      `  raw amqplib + marker tx   ${rawMarkerMs.toFixed(0).padStart(7)} ms  ${rawMarkerRate.toFixed(0).padStart(7)} msgs/s`,
    );
    const attempts = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".attempts`);
    console.log(`  attempts rows after the run        ${attempts.rows[0].n}`);
    console.log(`  ratio Oncely / raw amqplib          ${(oncelyRate / rawRate).toFixed(3)}`);
    console.log(`  ratio Oncely / raw + marker tx      ${(oncelyRate / rawMarkerRate).toFixed(3)}`);
    console.log(`  ratio Oncely / marker transactions  ${(oncelyRate / storeRate).toFixed(3)}`);
    console.log(
      `  Node CPU µs per message: raw ${raw.cpuUs.toFixed(0)}, marker tx only ${store1.cpuUs.toFixed(0)}, raw + marker tx ${rawMarker.cpuUs.toFixed(0)}, Oncely ${oncely.cpuUs.toFixed(0)}`,
    );
    if (PROFILE) {
      console.log('  main-thread µs per message by place (sampled wall time, idle left out):');
      for (const [label, side] of [
        ['raw + marker tx', rawMarker],
        ['marker tx only', store1],
        ['Oncely', oncely],
      ])
        console.log(`    ${label.padEnd(16)} ${JSON.stringify(side.byPackage)}`);
    }
  } finally {
    for (const queue of Object.values(queues)) await channel.deleteQueue(queue).catch(() => {});
    for (const suffix of ['.dlq']) {
      await channel.deleteQueue(`${queues.oncely}${suffix}`).catch(() => {});
      await channel.deleteQueue(`${queues.oncelyWarm}${suffix}`).catch(() => {});
    }
    await channel.deleteExchange(`${queues.oncely}.dlx`).catch(() => {});
    await channel.deleteExchange(`${queues.oncelyWarm}.dlx`).catch(() => {});
    await connection.close().catch(() => {});
    await store.close().catch(() => {});
    await handPool.end().catch(() => {});
    await admin.query(`DROP SCHEMA "${schema}" CASCADE`).catch(() => {});
    await admin.end();
  }
}

main().catch((error) => {
  console.error(error);
  process.exitCode = 1;
});
