// Kafka benchmark: the @oncely/kafka adapter (one store transaction per record, the
// processed-ID claim, the advisory attempt counter, commits after each batch) against
// raw kafkajs eachBatch loops in the same process, on the same broker and database:
//
//   raw            eachBatch, parse the body, resolveOffset per record, commit per batch, no database
//   raw+tx         the same plus one bare INSERT transaction per record (the effect alone)
//   raw+marker     the same with the marker transaction written by hand (claim + effect)
//   oncely         createKafkaConsumer, mode 'transactional' (ID table)
//   oncely-offsets createKafkaConsumer, mode 'offsets'
//   oncely-batch   createKafkaConsumer, mode 'transactional' with batch: { size: --batch-size }
//                  and batchHandler: up to that many records of a partition in one
//                  transaction (one claim statement, one INSERT for their rows), offsets
//                  committed after
//
// And the same on @platformatic/kafka (issue 32; Node >= 22.22, so not in the default runs:
// npx -y -p node@22 -c 'node bench/kafka/run.mjs --runs ...'):
//
//   plat-raw          a @platformatic/kafka consumer stream, records of a partition in order
//                     (--concurrency partitions at once), parse the body, commit when the
//                     partition's records delivered so far are done; no database
//   plat-raw+tx       the same plus one bare INSERT transaction per record
//   plat-raw+marker   the same with the marker transaction written by hand
//   plat-oncely, plat-oncely-offsets, plat-oncely-batch
//                     oncely, oncely-offsets, oncely-batch with broker.client 'platformatic'
//
// Reported as records/s and as ratios against raw+tx (the fair baseline: the same effect,
// without the guarantee) and against the marker loop by hand of the run's own client
// (raw+marker for kafkajs, plat-raw+marker for @platformatic/kafka).
//
//   node bench/kafka/run.mjs [--messages 5000] [--partitions 4] [--concurrency 4] [--batch-size 50]
//                            [--rounds 1] [--runs raw,raw+tx,raw+marker,oncely,oncely-offsets,oncely-batch]
//
// --rounds repeats the chosen runs, interleaved (round 1 of each run, then round 2 ...);
// the table shows medians, and each ratio is the median of the per-round ratios.
//
// --concurrency is the partitions consumed at once in every run; oncely-batch gets
// batch-size handler slots per such partition (its `concurrency`), so each can fill a batch.
//
// Needs PostgreSQL (DATABASE_URL) and a Kafka broker (KAFKA_BROKERS, default
// 127.0.0.1:19092; started with test/emulators/kafka/start.sh when nothing answers there).
// A benchmark, not a test: it prints numbers and checks only that every record arrived.
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { silentLogger } from '@oncely/core';
import { createKafkaConsumer, createTopics } from '@oncely/kafka';
import { PostgresStore } from '@oncely/postgres';
import kafkajs from 'kafkajs';
import pg from 'pg';
import { handMarkersDdl } from '../lib/pg.mjs';

const { Kafka, logLevel } = kafkajs;
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1';

const { values: args } = parseArgs({
  options: {
    messages: { type: 'string', default: '5000' },
    partitions: { type: 'string', default: '4' },
    concurrency: { type: 'string', default: '4' },
    'batch-size': { type: 'string', default: '50' },
    rounds: { type: 'string', default: '1' },
    runs: { type: 'string', default: 'raw,raw+tx,raw+marker,oncely,oncely-offsets,oncely-batch' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log(
    'node bench/kafka/run.mjs [--messages 5000] [--partitions 4] [--concurrency 4] [--batch-size 50] [--rounds 1] [--runs a,b,...]\n' +
      'runs: raw, raw+tx, raw+marker, oncely, oncely-offsets, oncely-batch, and on @platformatic/kafka (Node >= 22.22)\n' +
      '      plat-raw, plat-raw+tx, plat-raw+marker, plat-oncely, plat-oncely-offsets, plat-oncely-batch (see the header of this file)',
  );
  process.exit(0);
}
const N = Number(args.messages);
const BATCH_SIZE = Number(args['batch-size']);
const PARTITIONS = Number(args.partitions);
const CONCURRENCY = Number(args.concurrency);
const ROUNDS = Number(args.rounds);
const RUNS = args.runs.split(',');
const [nodeMajor = 0, nodeMinor = 0] = process.versions.node.split('.').map(Number);
if (
  RUNS.some((label) => label.startsWith('plat-')) &&
  !(nodeMajor > 22 || (nodeMajor === 22 && nodeMinor >= 22))
) {
  console.error(
    `the plat-* runs need Node >= 22.22 (@platformatic/kafka); this is ${process.version}: npx -y -p node@22 -c 'node bench/kafka/run.mjs ...'`,
  );
  process.exit(2);
}
const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const emulator = fileURLToPath(new URL('../../test/emulators/kafka/', import.meta.url));
let brokers = (process.env.KAFKA_BROKERS ?? '127.0.0.1:19092').split(',');
const tag = randomBytes(3).toString('hex');

async function reachable(list) {
  const admin = new Kafka({
    brokers: list,
    logLevel: logLevel.NOTHING,
    retry: { retries: 0 },
    connectionTimeout: 1000,
  }).admin();
  try {
    await admin.connect();
    await admin.listTopics();
    return true;
  } catch {
    return false;
  } finally {
    await admin.disconnect().catch(() => {});
  }
}

let startedBroker = false;
if (!(await reachable(brokers))) {
  console.error('no broker answers; starting test/emulators/kafka/start.sh ...');
  const started = spawnSync('bash', [`${emulator}start.sh`], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  if (started.status !== 0) process.exit(1);
  brokers = [/KAFKA_BROKERS=(\S+)/.exec(started.stdout)?.[1] ?? '127.0.0.1:19092'];
  startedBroker = true;
}

const kafka = new Kafka({ clientId: 'oncely-bench', brokers, logLevel: logLevel.NOTHING });
const admin = kafka.admin();
// Idempotent: a send retried under load must not write its records twice (the duplicates
// would be absorbed by every run, but they inflate the work of whichever run got them).
const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
await Promise.all([admin.connect(), producer.connect()]);
const pool = new pg.Pool({ connectionString: DATABASE_URL, max: CONCURRENCY + 2 });
const schema = `oncely_kafka_bench_${tag}`;
await pool.query(`CREATE SCHEMA "${schema}"`);
await pool.query(`CREATE TABLE "${schema}".effects (message_id text NOT NULL, n integer)`);
// The store's schema is migrated once here, so the hand loop's marker table can copy its shape.
const setup = new PostgresStore({ connectionString: DATABASE_URL, schema: `${schema}_store`, poolMax: 1 });
await setup.migrate();
await setup.close();
await pool.query(handMarkersDdl(schema, `${schema}_store`));

/** A topic with N records spread over the partitions, each with a message-id header. */
async function fillTopic(name) {
  const topic = `bench-${name}-${tag}`;
  await createTopics(admin, [{ topic, numPartitions: PARTITIONS }]);
  const value = JSON.stringify({ orderId: 'o-1', amount: 40, note: 'x'.repeat(100) });
  for (let start = 0; start < N; start += 1000) {
    const messages = [];
    for (let n = start; n < Math.min(N, start + 1000); n++) {
      messages.push({ value, partition: n % PARTITIONS, headers: { 'message-id': `${name}-${n}` } });
    }
    await producer.send({ topic, acks: -1, messages });
  }
  return topic;
}

/**
 * The clock of one run, from its first record to its last, and this process's CPU over
 * the same window (user + system; the broker and PostgreSQL run in processes of their own).
 */
function timer() {
  let first;
  let cpuAtFirst;
  let count = 0;
  let resolveDone;
  const done = new Promise((resolve) => (resolveDone = resolve));
  return {
    tick() {
      if (first === undefined) {
        first = performance.now();
        cpuAtFirst = process.cpuUsage();
      }
      if (++count === N) {
        const cpu = process.cpuUsage(cpuAtFirst);
        resolveDone({ end: performance.now(), cpuUs: cpu.user + cpu.system });
      }
    },
    /** { ms, cpuUsPerRecord } */
    async elapsed() {
      const { end, cpuUs } = await done;
      return { ms: end - first, cpuUsPerRecord: cpuUs / N };
    },
  };
}

/**
 * The marker transaction (or the bare one, or nothing) of one record, as the raw loops
 * write it by hand. @param {'bare' | 'marker' | false} transaction
 */
async function handWrite(name, transaction, id) {
  if (!transaction) return;
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const claimed =
      transaction === 'marker'
        ? await client.query(
            `INSERT INTO "${schema}".hand_markers (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
            [name, id],
          )
        : { rowCount: 1 };
    if (claimed.rowCount === 1) {
      await client.query(`INSERT INTO "${schema}".effects (message_id, n) VALUES ($1, $2)`, [id, 40]);
    }
    await client.query('COMMIT');
  } finally {
    client.release();
  }
}

/** transaction: false, 'bare' (BEGIN, INSERT, COMMIT) or 'marker' (the marker transaction by hand). */
async function rawLoop(name, transaction) {
  const topic = await fillTopic(name);
  const clock = timer();
  const consumer = kafka.consumer({ groupId: `bench-${name}-${tag}`, maxWaitTimeInMs: 200 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachBatchAutoResolve: false,
    partitionsConsumedConcurrently: CONCURRENCY,
    eachBatch: async ({ batch, resolveOffset, heartbeat }) => {
      for (const message of batch.messages) {
        // Every raw loop decodes the body, as any consumer does (and the other brokers' raw loops do).
        JSON.parse(message.value.toString('utf8'));
        if (transaction) await handWrite(name, transaction, message.headers['message-id'].toString());
        resolveOffset(message.offset);
        clock.tick();
        await heartbeat();
      }
      await consumer.commitOffsets([
        { topic, partition: batch.partition, offset: String(Number(batch.lastOffset()) + 1) },
      ]);
    },
  });
  const measured = await clock.elapsed();
  await consumer.disconnect();
  return measured;
}

/**
 * The raw loop on @platformatic/kafka, as a careful user writes it: the client hands over
 * one stream of records for all partitions, so each partition gets a chain of its own
 * (its records in offset order; --concurrency partitions at once), the body is parsed,
 * the marker transaction written by hand, and a partition's offset is committed once
 * every record of it delivered so far is done (a burst of a fetch commits once, as
 * kafkajs' eachBatch loop commits per batch). The stream pauses above 2000 records held.
 */
async function platRawLoop(name, transaction) {
  const { Consumer } = await import('@platformatic/kafka');
  const topic = await fillTopic(name);
  const clock = timer();
  const consumer = new Consumer({
    clientId: `oncely-bench-${name}`,
    bootstrapBrokers: brokers,
    groupId: `bench-${name}-${tag}`,
    autocommit: false,
  });
  const stream = await consumer.consume({
    topics: [topic],
    mode: 'earliest',
    autocommit: false,
    maxWaitTime: 200,
  });
  const MESSAGE_ID = Buffer.from('message-id');
  /** @type {Map<number, { tail: Promise<void>, pending: number }>} */
  const chains = new Map();
  let held = 0;
  let paused = false;
  let fail;
  const failed = new Promise((_, reject) => {
    fail = reject;
  });
  // --concurrency partitions at once, as kafkajs' partitionsConsumedConcurrently.
  let free = CONCURRENCY;
  const waiting = [];
  const acquire = () => {
    if (free === 0) return new Promise((resolve) => waiting.push(resolve));
    free--;
    return Promise.resolve();
  };
  const release = () => {
    if (waiting.length > 0) waiting.shift()();
    else free++;
  };
  stream.on('error', (error) => fail(error));
  stream.on('data', (message) => {
    let chain = chains.get(message.partition);
    if (!chain) {
      chain = { tail: Promise.resolve(), pending: 0 };
      chains.set(message.partition, chain);
    }
    const partitionChain = chain;
    partitionChain.pending++;
    if (++held >= 2000 && !paused) {
      paused = true;
      stream.pause();
    }
    partitionChain.tail = partitionChain.tail
      .then(async () => {
        await acquire();
        try {
          JSON.parse(message.value.toString('utf8'));
          let id;
          for (const [key, value] of message.headerEntries) if (key.equals(MESSAGE_ID)) id = value.toString();
          await handWrite(name, transaction, id);
          clock.tick();
          if (--partitionChain.pending === 0) {
            await consumer.commit({
              offsets: [
                {
                  topic,
                  partition: message.partition,
                  offset: message.offset + 1n,
                  leaderEpoch: message.leaderEpoch,
                },
              ],
            });
          }
        } finally {
          release();
        }
        if (--held <= 1000 && paused) {
          paused = false;
          stream.resume();
        }
      })
      .catch((error) => fail(error));
  });
  const measured = await Promise.race([clock.elapsed(), failed]);
  await stream.close();
  await consumer.close();
  return measured;
}

/** `batch`: the batch size, or undefined for one transaction per record. */
async function oncely(name, mode, batch, client = 'kafkajs') {
  const topic = await fillTopic(name);
  const store = new PostgresStore({
    connectionString: DATABASE_URL,
    schema: `${schema}_store`,
    poolMax: CONCURRENCY + 2,
  });
  await store.migrate();
  const clock = timer();
  const consumer = createKafkaConsumer({
    name: `bench-${name}-${tag}`,
    broker: {
      brokers,
      topic,
      client,
      fromBeginning: true,
      maxWaitTimeInMs: 200,
      partitionsConsumedConcurrently: CONCURRENCY,
    },
    store,
    mode,
    ...(batch
      ? { batch: { size: batch }, concurrency: batch * Math.min(CONCURRENCY, PARTITIONS) }
      : { concurrency: CONCURRENCY }),
    logger: silentLogger,
    // With batch, the batch path as documented: batchHandler, one INSERT for the batch's rows.
    ...(batch
      ? {
          batchHandler: async (entries, tx) => {
            await tx.query(
              `INSERT INTO "${schema}".effects (message_id, n) SELECT id, 40 FROM unnest($1::text[]) AS id`,
              [entries.map((entry) => entry.message.id)],
            );
          },
        }
      : {
          handler: async (message, ctx) => {
            await ctx.tx.query(`INSERT INTO "${schema}".effects (message_id, n) VALUES ($1, $2)`, [
              message.id,
              40,
            ]);
          },
        }),
  });
  consumer.on('processed', () => clock.tick());
  await consumer.start();
  const measured = await clock.elapsed();
  await consumer.stop();
  await store.close();
  return measured;
}

const runs = {
  raw: (round) => rawLoop(`raw${round}`, false),
  'raw+tx': (round) => rawLoop(`rawtx${round}`, 'bare'),
  'raw+marker': (round) => rawLoop(`rawmarker${round}`, 'marker'),
  oncely: (round) => oncely(`oncely${round}`, 'transactional'),
  'oncely-offsets': (round) => oncely(`offsets${round}`, 'offsets'),
  'oncely-batch': (round) => oncely(`batch${round}`, 'transactional', BATCH_SIZE),
  'plat-raw': (round) => platRawLoop(`platraw${round}`, false),
  'plat-raw+tx': (round) => platRawLoop(`platrawtx${round}`, 'bare'),
  'plat-raw+marker': (round) => platRawLoop(`platrawmarker${round}`, 'marker'),
  'plat-oncely': (round) => oncely(`platoncely${round}`, 'transactional', undefined, 'platformatic'),
  'plat-oncely-offsets': (round) => oncely(`platoffsets${round}`, 'offsets', undefined, 'platformatic'),
  'plat-oncely-batch': (round) => oncely(`platbatch${round}`, 'transactional', BATCH_SIZE, 'platformatic'),
};
const unknown = RUNS.filter((label) => !(label in runs));
if (unknown.length > 0) throw new Error(`unknown runs: ${unknown.join(', ')}`);
/** Per run: the elapsed ms of each round (rounds interleave the runs, so drift hits all alike). */
const rounds = new Map(RUNS.map((label) => [label, []]));
/** Per run: this process's CPU per record in each round (µs, user + system). */
const cpuRounds = new Map(RUNS.map((label) => [label, []]));
const results = [];
let attemptsRows;
let attemptsWritten;
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const label of RUNS) {
      const { ms, cpuUsPerRecord } = await runs[label](round);
      rounds.get(label).push(ms);
      cpuRounds.get(label).push(cpuUsPerRecord);
      console.error(
        `round ${round + 1}, ${label}: ${N} records in ${ms.toFixed(0)} ms, Node CPU ${cpuUsPerRecord.toFixed(0)} µs/record`,
      );
    }
  }
  for (const [label, times] of rounds) {
    const ms = median(times);
    results.push({
      label,
      ms,
      perSecond: Math.round((N / ms) * 1000),
      rounds: times.map(Math.round),
      cpuUsPerRecord: Math.round(median(cpuRounds.get(label))),
      // This run's rate ÷ each baseline's that ran (bench/run.mjs reads these).
      vs: Object.fromEntries(
        ['raw', 'raw+tx', 'raw+marker', 'plat-raw', 'plat-raw+tx', 'plat-raw+marker']
          .map((base) => [base, ratio(label, base)])
          .filter(([, value]) => value !== undefined),
      ),
    });
  }
  // The happy path leaves no attempts row (issue 15 measures it). Rows written count
  // apart: the first record of a partition after each assignment is counted up front (it
  // may be the one the previous owner crashed on) and its row deleted once it is
  // processed. The inserts come from the server's statistics, which every store
  // connection flushed when its pool closed at the end of its run.
  if (RUNS.some((label) => label.startsWith('oncely'))) {
    const counted = await pool.query(`SELECT count(*)::int AS n FROM "${schema}_store".attempts`);
    attemptsRows = counted.rows[0].n;
    const written = await pool.query(
      `SELECT n_tup_ins::int AS n FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = 'attempts'`,
      [`${schema}_store`],
    );
    attemptsWritten = written.rows[0]?.n;
  }
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).catch(() => {});
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}_store" CASCADE`).catch(() => {});
  await pool.end();
  await Promise.allSettled([admin.disconnect(), producer.disconnect()]);
  if (startedBroker) spawnSync('bash', [`${emulator}stop.sh`], { stdio: 'inherit' });
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * Run `label`'s rate ÷ run `base`'s: the median over rounds of each round's ratio (rounds
 * interleave the runs). Undefined when either did not run.
 */
function ratio(label, base) {
  const mine = rounds.get(label);
  const theirs = rounds.get(base);
  if (!mine || !theirs) return undefined;
  return median(mine.map((ms, i) => theirs[i] / ms));
}

const formatted = (value) => (value === undefined ? '—' : `${value.toFixed(2)}×`);

console.log(
  `\nKafka, ${N} records, ${PARTITIONS} partitions, concurrency ${CONCURRENCY}, ${ROUNDS} round(s) (median)`,
);
console.log("run                  records/s   vs raw+tx   vs raw+marker   vs its client's raw+marker");
for (const r of results) {
  const own = r.label.startsWith('plat-') ? 'plat-raw+marker' : 'raw+marker';
  console.log(
    `${r.label.padEnd(20)} ${String(r.perSecond).padStart(9)}   ${formatted(ratio(r.label, 'raw+tx')).padStart(8)}   ${formatted(ratio(r.label, 'raw+marker')).padStart(13)}   ${formatted(ratio(r.label, own)).padStart(13)}`,
  );
}
console.log(
  JSON.stringify({
    bench: 'kafka',
    messages: N,
    partitions: PARTITIONS,
    concurrency: CONCURRENCY,
    batchSize: BATCH_SIZE,
    rounds: ROUNDS,
    results,
    attemptsRows,
    attemptsWritten,
  }),
);
