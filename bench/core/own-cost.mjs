#!/usr/bin/env node
// Oncely's own CPU per message, for finding and checking hot-path costs (not part of
// `npm run bench` and of RESULTS.md). Two variants in interleaved rounds, each N messages
// at concurrency c, Node CPU (process.cpuUsage, user + system) per message, medians:
//
//   --mode process   `oncely`: processOnce + one INSERT; `hand`: the same statements on the
//                    pool by hand (BEGIN with the claim, INSERT, COMMIT).
//   --mode consumer  `oncely`: a memory-broker consumer whose handler INSERTs; `hand`: the
//                    raw slot loop of bench/memory with the marker transaction by hand.
//
// By default the pg pool is a fake whose queries answer at once, so the database, the
// driver and the sockets are off the clock and `oncely - hand` is the cost of Oncely's
// own code alone, stable to a few tenths of a µs. With --real 1 both run on PostgreSQL
// (noisier; the figures bench/core and bench/memory report).
//
//   node bench/core/own-cost.mjs [--mode process|consumer] [--real 0|1] [--n 200000]
//                                [--rounds 7] [--c 8] [--only oncely] [--qt <queryTimeoutMs>]
//
// Profile one variant with: node --cpu-prof bench/core/own-cost.mjs --only oncely ...
import { processOnce, silentLogger } from '@oncely/core';
import { createMemoryConsumer, MemoryBroker } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { measureConsumer, slotLoop } from '../lib/brokerBench.mjs';
import { DATABASE_URL, flags, uniqueTag } from '../lib/common.mjs';
import { benchPool, businessInsert, createBenchSchema, dropSchema, fillPool } from '../lib/pg.mjs';

const args = flags({ n: 200000, rounds: 7, c: 8, qt: '', mode: 'process', only: '', real: '0' });
const N = Number(args.n);
const REAL = args.real === '1';
const realSchema = `bench_fake_${uniqueTag()}`;
const C = Number(args.c);

/**
 * A pooled client that answers at once: the claim in BEGIN's message claims the ID it
 * carries, every other statement succeeds.
 */
function fakeClient() {
  return {
    query(text) {
      if (text.startsWith('BEGIN')) {
        const rows = [{ message_id: text.match(/VALUES \('[^']*', '([^']*)'/)?.[1] }];
        return Promise.resolve([
          { command: 'BEGIN', rows: [] },
          { command: 'SET', rows: [] },
          { command: 'SET', rows: [] },
          { command: 'INSERT', rowCount: 1, rows },
        ]);
      }
      if (text === 'COMMIT') return Promise.resolve({ command: 'COMMIT', rows: [] });
      return Promise.resolve({ command: 'INSERT', rowCount: 1, rows: [] });
    },
    release() {},
    on() {},
    removeListener() {},
  };
}
const clients = Array.from({ length: C }, fakeClient);
const idle = [...clients];
const pool = {
  connect: () => Promise.resolve(idle.pop()),
  on() {},
  removeListener() {},
  end: async () => {},
};
for (const c of clients)
  c.release = function () {
    idle.push(this);
  };

if (REAL) {
  await createBenchSchema(realSchema);
  const setup = new PostgresStore({ connectionString: DATABASE_URL, schema: realSchema, poolMax: 1 });
  await setup.migrate();
  await setup.close();
}
const realPool = REAL ? benchPool(C) : undefined;
if (realPool) await fillPool(realPool, C);
const store = REAL
  ? new PostgresStore({ connectionString: DATABASE_URL, schema: realSchema, poolMax: C })
  : new PostgresStore({ pool, schema: 'fake', ...(args.qt ? { queryTimeoutMs: Number(args.qt) } : {}) });
// The fake pool has no schema to check: mark it checked (a private field, bench only).
if (!REAL) store.schemaVerified = true;
const insert = REAL ? businessInsert(realSchema) : 'INSERT INTO payments (order_id, amount) VALUES ($1, $2)';
const realMarker = `INSERT INTO "${realSchema}".processed_messages (consumer, message_id, status) VALUES ($1, $2, 'completed') ON CONFLICT (consumer, message_id) DO NOTHING RETURNING message_id`;
const begin = (id) =>
  `BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = 5000; SET LOCAL idle_in_transaction_session_timeout = 60000; INSERT INTO "fake".processed_messages (consumer, message_id, status) VALUES ('bench', '${id}', 'completed') ON CONFLICT (consumer, message_id) DO NOTHING RETURNING message_id`;
const variants = {
  hand: async (s) => {
    if (REAL) {
      const client = await realPool.connect();
      try {
        await client.query('BEGIN');
        const claimed = await client.query(realMarker, ['hand', `m-${s}`]);
        if (claimed.rows.length === 1) await client.query(insert, [`order-${s}`, 40]);
        await client.query('COMMIT');
      } finally {
        client.release();
      }
      return;
    }
    const client = await pool.connect();
    try {
      const results = await client.query(begin(`m-${s}`));
      if (results[results.length - 1].rows.length === 1) await client.query(insert, [`order-${s}`, 40]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  },
  oncely: async (s) => {
    const outcome = await processOnce(store, { consumer: 'bench', messageId: `m-${s}` }, (tx) =>
      tx.query(insert, [`order-${s}`, 40]),
    );
    if (outcome.status !== 'processed') throw new Error('not processed');
  },
};
const broker = new MemoryBroker();
let queues = 0;
async function filled(count) {
  const queue = `q-${queues++}`;
  broker.createQueue(queue, { visibilityTimeoutMs: 60_000 });
  for (let i = 0; i < count; i++)
    await broker.send(queue, { id: `${queue}-${i}`, body: { orderId: `order-${i}`, amount: 40 } });
  return queue;
}
const consumerVariants = {
  hand: async () => {
    const queue = await filled(N);
    return slotLoop({
      concurrency: C,
      total: N,
      receive: (max) => broker.receive(queue, { max: Math.min(max, 10), waitMs: 100 }),
      handle: async (delivery) => {
        const body = JSON.parse(JSON.stringify(delivery.body));
        await variants.hand(`${delivery.messageId}-${body.orderId}`);
        await broker.ack(delivery.receipt);
      },
    });
  },
  oncely: async () => {
    const queue = await filled(N);
    const consumer = createMemoryConsumer({
      name: `bench-${queue}`,
      broker: { broker, queue, pollWaitMs: 100 },
      store,
      concurrency: C,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await ctx.tx.query(insert, [message.body.orderId, message.body.amount]);
      },
    });
    // Every message must take the processed path (the one measured), not the duplicate one.
    let duplicates = 0;
    consumer.on('duplicate', () => duplicates++);
    const result = await measureConsumer(consumer, N);
    if (duplicates > 0) throw new Error(`${duplicates} deliveries were duplicates`);
    return result;
  },
};
let seq = 0;
async function run(op) {
  let left = N;
  const cpu0 = process.cpuUsage();
  if (args.mode === 'consumer') await op();
  else
    await Promise.all(
      Array.from({ length: C }, async () => {
        while (left-- > 0) await op(seq++);
      }),
    );
  const cpu = process.cpuUsage(cpu0);
  return (cpu.user + cpu.system) / N;
}
const table = args.mode === 'consumer' ? consumerVariants : variants;
const names = args.only ? args.only.split(',') : Object.keys(table);
const res = Object.fromEntries(names.map((n) => [n, []]));
for (const n of names) await run(table[n]);
for (let r = 0; r < Number(args.rounds); r++) for (const n of names) res[n].push(await run(table[n]));
const med = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
for (const n of names)
  console.log(
    `${n.padEnd(7)} ${med(res[n]).toFixed(2)} µs/msg  [${res[n].map((x) => x.toFixed(2)).join(' ')}]`,
  );
if (res.hand && res.oncely)
  console.log(`oncely - hand: ${(med(res.oncely) - med(res.hand)).toFixed(2)} µs/msg`);
await store.close();
if (realPool) {
  await realPool.end();
  await dropSchema(realSchema);
}
