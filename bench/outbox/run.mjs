#!/usr/bin/env node
// Scenario — the outbox relay against a hand-written poll-and-send loop.
//
//   node bench/outbox/run.mjs [--rate 400] [--seconds 10] [--backlog 5000] [--rounds 2]
//
// Both send to the real RabbitMQ through the same producer (createRabbitMqProducer: a
// confirm channel, one confirm awaited per message, rows in one batch published
// together), from the same outbox table (migration 0003), each variant in a schema of its
// own:
//   relay      createRelay from @oncely/postgres: rows below the snapshot's xmin,
//              FOR UPDATE SKIP LOCKED, per-key waves, marks after the confirms, LISTEN/NOTIFY
//   hand loop  `SELECT ... WHERE position > $last ORDER BY position LIMIT 100`, send,
//              `UPDATE ... SET status = 'sent'`, poll every 20 ms when idle — what people
//              write first; it skips rows that commit late (the relay exists for that)
// Two measurements per variant, in interleaved rounds:
//   drain      a backlog of --backlog rows written up front: sent rows per second
//   steady     a writer commits --rate rows per second (10 per transaction, no key) for
//              --seconds while the sender runs: the lag of each row, sent_at − created_at
//              (database clock), p50 and p99, and whether it kept up
import { publishInTransaction } from '@oncely/core';
import { createRelay, PostgresStore } from '@oncely/postgres';
import { createRabbitMqProducer } from '@oncely/rabbitmq';
import amqp from 'amqplib';
import {
  DATABASE_URL,
  emitResult,
  flags,
  interleaved,
  progress,
  runMain,
  uniqueTag,
} from '../lib/common.mjs';
import { formatMs, formatRate, median } from '../lib/stats.mjs';

const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const args = flags({ rate: 400, seconds: 10, backlog: 5000, rounds: 2 });
const RATE = Number(args.rate);
const SECONDS = Number(args.seconds);
const BACKLOG = Number(args.backlog);
const ROUNDS = Number(args.rounds);
const PER_TX = 10;
const BATCH = 100;

const tag = uniqueTag();
const queue = `bench-outbox-${tag}`;
const quiet = { debug() {}, info() {}, warn() {}, error() {} };

/** A fresh migrated store in a schema of its own. */
async function freshStore(variant, round) {
  const store = new PostgresStore({
    connectionString: DATABASE_URL,
    schema: `bench_outbox_${tag}_${variant}_${round}`,
    poolMax: 4,
    logger: quiet,
  });
  await store.migrate();
  return store;
}

async function write(store, count, prefix) {
  for (let start = 0; start < count; start += BATCH) {
    await store.transaction(async (tx) => {
      for (let i = start; i < Math.min(count, start + BATCH); i++) {
        await publishInTransaction(store, tx, queue, { i, pad: 'x'.repeat(100) }, { id: `${prefix}-${i}` });
      }
    });
  }
}

/** The hand-written loop: position cursor, send, mark. */
function handLoop(store, producer) {
  let stopped = false;
  let last = '0';
  const t = `"${store.schema}".outbox`;
  const done = (async () => {
    while (!stopped) {
      const rows = await store.transaction(async (tx) => {
        const { rows } = await tx.query(
          `SELECT o.position::text AS position, o.id, o.destination, o.body, o.attributes FROM ${t} AS o
           WHERE o.position > $1 AND o.status = 'pending' ORDER BY o.position LIMIT ${BATCH}`,
          [last],
        );
        return rows;
      });
      if (rows.length === 0) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        continue;
      }
      let results;
      try {
        results = await producer.send(
          rows.map((row) => ({
            id: row.id,
            destination: row.destination,
            body: row.body,
            attributes: row.attributes,
            attempt: 1,
          })),
        );
      } catch (error) {
        progress(`  hand loop: send failed, retrying: ${error.message}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
        continue;
      }
      const sent = rows.filter((_, i) => results[i]?.ok).map((row) => row.position);
      await store.transaction((tx) =>
        tx.query(`UPDATE ${t} SET status = 'sent', sent_at = now() WHERE position = ANY($1::bigint[])`, [
          sent,
        ]),
      );
      // Past the rows sent, up to the first failure (sent again next time).
      const firstFailed = rows.findIndex((_, i) => !results[i]?.ok);
      if (firstFailed === -1) last = rows[rows.length - 1].position;
      else {
        progress(
          `  hand loop: ${rows.length - sent.length} send(s) failed: ${results[firstFailed].error?.message}`,
        );
        if (firstFailed > 0) last = rows[firstFailed - 1].position;
      }
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await done;
    },
  };
}

function startSender(variant, store, producer) {
  if (variant === 'hand loop') return handLoop(store, producer);
  const relay = createRelay({ store, producers: producer, batchSize: BATCH, logger: quiet });
  const started = relay.start();
  return {
    stop: async () => {
      await started;
      await relay.stop();
    },
  };
}

async function pending(store) {
  return (await store.outbox.stats()).pending;
}

async function drainRound(variant, round, producer) {
  const store = await freshStore(variant.replace(' ', '_'), `d${round}`);
  try {
    await write(store, BACKLOG, 'drain');
    const t0 = performance.now();
    const sender = startSender(variant, store, producer);
    while ((await pending(store)) > 0) await new Promise((resolve) => setTimeout(resolve, 20));
    const elapsed = performance.now() - t0;
    await sender.stop();
    return { perSecond: BACKLOG / (elapsed / 1000) };
  } finally {
    await drop(store);
  }
}

async function steadyRound(variant, round, producer) {
  const store = await freshStore(variant.replace(' ', '_'), `s${round}`);
  try {
    const sender = startSender(variant, store, producer);
    const total = Math.round(RATE * SECONDS);
    const t0 = performance.now();
    for (let written = 0; written < total; written += PER_TX) {
      const due = t0 + (written / RATE) * 1000;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      await store.transaction(async (tx) => {
        for (let i = written; i < Math.min(total, written + PER_TX); i++) {
          await publishInTransaction(store, tx, queue, { i, pad: 'x'.repeat(100) }, { id: `steady-${i}` });
        }
      });
    }
    const writeSeconds = (performance.now() - t0) / 1000;
    while ((await pending(store)) > 0) await new Promise((resolve) => setTimeout(resolve, 20));
    await sender.stop();
    const { rows } = await store.transaction((tx) =>
      tx.query(
        `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50, percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99
         FROM (SELECT extract(epoch FROM (sent_at - created_at)) * 1000 AS ms FROM "${store.schema}".outbox) lags`,
      ),
    );
    return { offeredPerSecond: total / writeSeconds, p50: Number(rows[0].p50), p99: Number(rows[0].p99) };
  } finally {
    await drop(store);
  }
}

/**
 * Healthy keys' drain rate with a permanently failing key parked in front of them: the
 * failing key's 10 × BATCH rows are written first (the worst place), then BACKLOG rows over
 * 50 healthy keys; the rate counts the healthy rows only. 'without' writes no failing key.
 */
async function stalledRound(variant, round, producer) {
  const store = await freshStore(`stall_${variant}`, round);
  try {
    if (variant === 'with') {
      for (let start = 0; start < 10 * BATCH; start += BATCH) {
        await store.transaction(async (tx) => {
          for (let i = start; i < start + BATCH; i++)
            await publishInTransaction(store, tx, queue, { i }, { id: `bad-${i}`, key: 'bad' });
        });
      }
    }
    for (let start = 0; start < BACKLOG; start += BATCH) {
      await store.transaction(async (tx) => {
        for (let i = start; i < Math.min(BACKLOG, start + BATCH); i++)
          await publishInTransaction(
            store,
            tx,
            queue,
            { i, pad: 'x'.repeat(100) },
            { id: `ok-${i}`, key: `k${i % 50}` },
          );
      });
    }
    const failing = {
      send: (messages) =>
        Promise.all(
          messages.map((m) =>
            m.key === 'bad'
              ? { ok: false, error: new Error('destination down') }
              : producer.send([m]).then((r) => r[0]),
          ),
        ),
    };
    const relay = createRelay({
      store,
      producers: failing,
      batchSize: BATCH,
      maxAttempts: 1_000_000,
      backoff: { initialMs: 200, maxMs: 200 },
      logger: quiet,
    });
    const healthyPending = async () =>
      (
        await store.transaction((tx) =>
          tx.query(
            `SELECT count(*)::int AS n FROM "${store.schema}".outbox WHERE status = 'pending' AND key <> 'bad'`,
          ),
        )
      ).rows[0].n;
    const t0 = performance.now();
    await relay.start();
    while ((await healthyPending()) > 0) await new Promise((resolve) => setTimeout(resolve, 20));
    const elapsed = performance.now() - t0;
    await relay.stop();
    return { perSecond: BACKLOG / (elapsed / 1000) };
  } finally {
    await drop(store);
  }
}

/**
 * What per-key order costs the writer: WRITES transactions of one publish each, from
 * `concurrency` writers, keyed (100 keys; a keyed write locks its key's outbox_keys row
 * and takes a number) or unkeyed (no lock): transactions per second.
 */
async function writeRound(variant, round) {
  const [kind, c] = variant.split(' c=');
  const concurrency = Number(c);
  const store = await freshStore(`w_${kind}_${c}`, round);
  const WRITES = 2000;
  try {
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        for (let i = next++; i < WRITES; i = next++) {
          await store.transaction((tx) =>
            publishInTransaction(
              store,
              tx,
              queue,
              { i },
              {
                id: `w-${i}`,
                ...(kind === 'keyed' ? { key: `k${i % 100}` } : {}),
              },
            ),
          );
        }
      }),
    );
    return { perSecond: WRITES / ((performance.now() - t0) / 1000) };
  } finally {
    await drop(store);
  }
}

async function drop(store) {
  await store.transaction((tx) => tx.query(`DROP SCHEMA "${store.schema}" CASCADE`)).catch(() => {});
  await store.close();
}

async function main() {
  const connection = await amqp.connect(RABBITMQ_URL);
  const channel = await connection.createChannel();
  await channel.assertQueue(queue, {
    durable: true,
    arguments: { 'x-max-length': 1000, 'x-overflow': 'drop-head' },
  });
  const producer = createRabbitMqProducer({ url: RABBITMQ_URL });
  try {
    const variants = ['relay', 'hand loop'];
    progress(`outbox: drain ${BACKLOG} rows, then ${RATE} rows/s for ${SECONDS} s, ${ROUNDS} rounds`);
    const drain = await interleaved(
      ROUNDS,
      Object.fromEntries(variants.map((v) => [v, (round) => drainRound(v, round, producer)])),
      (round) => progress(`  drain round ${round + 1}/${ROUNDS}`),
    );
    const steady = await interleaved(
      ROUNDS,
      Object.fromEntries(variants.map((v) => [v, (round) => steadyRound(v, round, producer)])),
      (round) => progress(`  steady round ${round + 1}/${ROUNDS}`),
    );
    const stalled = await interleaved(
      ROUNDS,
      {
        without: (round) => stalledRound('without', round, producer),
        with: (round) => stalledRound('with', round, producer),
      },
      (round) => progress(`  stalled-key round ${round + 1}/${ROUNDS}`),
    );
    const writeVariants = ['unkeyed c=1', 'keyed c=1', 'unkeyed c=8', 'keyed c=8'];
    const writes = await interleaved(
      ROUNDS,
      Object.fromEntries(writeVariants.map((v) => [v, (round) => writeRound(v, round)])),
      (round) => progress(`  write round ${round + 1}/${ROUNDS}`),
    );
    const summary = Object.fromEntries(
      variants.map((v) => [
        v,
        {
          drainPerSecond: median(drain[v].map((r) => r.perSecond)),
          offeredPerSecond: median(steady[v].map((r) => r.offeredPerSecond)),
          lagP50: median(steady[v].map((r) => r.p50)),
          lagP99: median(steady[v].map((r) => r.p99)),
        },
      ]),
    );
    console.log(`\nOutbox relay vs hand-written poll-and-send loop (RabbitMQ confirms, batch ${BATCH})\n`);
    console.log('| sender | drain (msgs/s) | steady load | lag p50 | lag p99 |');
    console.log('|---|---:|---:|---:|---:|');
    for (const v of variants) {
      const s = summary[v];
      console.log(
        `| ${v} | ${formatRate(s.drainPerSecond)} | ${formatRate(s.offeredPerSecond)} | ${formatMs(s.lagP50)} | ${formatMs(s.lagP99)} |`,
      );
    }
    console.log(
      `\nrelay / hand loop drain: ${(summary.relay.drainPerSecond / summary['hand loop'].drainPerSecond).toFixed(2)}×`,
    );
    const healthyWithout = median(stalled.without.map((r) => r.perSecond));
    const healthyWith = median(stalled.with.map((r) => r.perSecond));
    console.log(
      `\nhealthy keys with a permanently failing key (${10 * BATCH} rows behind it) / without: ${formatRate(healthyWith)} / ${formatRate(healthyWithout)} msgs/s = ${((100 * healthyWith) / healthyWithout).toFixed(0)} %`,
    );
    const writeSummary = Object.fromEntries(
      writeVariants.map((v) => [v, median(writes[v].map((r) => r.perSecond))]),
    );
    console.log('\n| writes (1 publish per transaction) | transactions/s |\n|---|---:|');
    for (const v of writeVariants) console.log(`| ${v} | ${formatRate(writeSummary[v])} |`);
    console.log(
      `keyed / unkeyed: c=1 ${(writeSummary['keyed c=1'] / writeSummary['unkeyed c=1']).toFixed(2)}×, c=8 ${(writeSummary['keyed c=8'] / writeSummary['unkeyed c=8']).toFixed(2)}×`,
    );
    emitResult({
      scenario: 'outbox',
      settings: {
        rate: RATE,
        seconds: SECONDS,
        backlog: BACKLOG,
        rounds: ROUNDS,
        batch: BATCH,
        perTx: PER_TX,
        broker: 'rabbitmq',
      },
      summary,
      stalled: { healthyWithout, healthyWith, ratio: healthyWith / healthyWithout },
      writes: writeSummary,
      rounds: { drain, steady, stalled, writes },
    });
  } finally {
    await producer.close();
    await channel.deleteQueue(queue).catch(() => {});
    await connection.close().catch(() => {});
  }
}

runMain(main);
