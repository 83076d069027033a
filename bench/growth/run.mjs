#!/usr/bin/env node
// Scenario 5 — cost as the marker table grows, and retention.
//
//   node bench/growth/run.mjs [--sizes 0,1000000,10000000] [--concurrency 1,8] [--rounds 4]
//                             [--seconds 1] [--prune-rows 1000000] [--prune-batch 1000]
//
// One schema per size (bench_growth_<tag>_<size>), each migrated and filled before the
// clock starts with `size` completed markers of another consumer (generate_series, 1 M rows
// per statement, then VACUUM ANALYZE), processed_at spread over a month ago. Then, in
// interleaved rounds (every size and concurrency in rotated order), processOnce with one
// business INSERT on each schema: msgs/s, transaction latency and the claim's own latency
// (BEGIN with the claim: one round trip since issue 15).
// Target: at 10 M rows at most 10 % slower than at 0 (rate at 0 ÷ rate at 10 M ≤ 1.10).
//
// Retention: on the schema holding `prune-rows` old markers, `store.prune()` deletes them in
// batches of `prune-batch` while processOnce runs at c=4 on the same table. Reported: the
// prune's duration and rate, the locks its backend held (sampled from pg_locks every 20 ms;
// row locks live in the tuples, so only relation locks show), the claims' own sessions seen
// waiting on a lock, and the claim p99 during the prune against a window of the same length just before.
import { processOnce, silentLogger } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import pg from 'pg';
import {
  DATABASE_URL,
  emitResult,
  flags,
  interleaved,
  medianRatio,
  nextSeq,
  numberList,
  progress,
  runMain,
  runWindow,
  summarise,
  uniqueTag,
} from '../lib/common.mjs';
import { businessInsert, createBenchSchema, dropSchema } from '../lib/pg.mjs';
import { formatMs, formatRate, formatRatio, LatencyRecorder } from '../lib/stats.mjs';

const args = flags({
  sizes: '0,1000000,10000000',
  concurrency: '1,8',
  rounds: 4,
  seconds: 1,
  'prune-rows': 1_000_000,
  'prune-batch': 1000,
});
const SIZES = String(args.sizes)
  .split(',')
  .map((s) => Number(s.trim()))
  .filter((n) => Number.isInteger(n) && n >= 0);
const LEVELS = numberList(args.concurrency);
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const PRUNE_ROWS = Number(args['prune-rows']);
const PRUNE_BATCH = Number(args['prune-batch']);
const TARGET = 1.1;
const FILL_CHUNK = 1_000_000;
const WARMUP_SECONDS = 0.3;
const PRUNE_CONCURRENCY = 4;
const tag = uniqueTag();

const schemaOf = (size) => `bench_growth_${tag}_${size}`;
const label = (size) => (size >= 1e6 ? `${size / 1e6} M` : size >= 1e3 ? `${size / 1e3} k` : String(size));

async function withAdmin(work) {
  const admin = new pg.Client({ connectionString: DATABASE_URL, application_name: 'bench-growth-admin' });
  await admin.connect();
  try {
    return await work(admin);
  } finally {
    await admin.end();
  }
}

/** A migrated schema holding `rows` completed markers of consumer 'old', processed a month ago. */
async function filledSchema(size, rows) {
  const schema = schemaOf(size);
  await createBenchSchema(schema);
  const setup = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 1 });
  await setup.migrate();
  await setup.close();
  const started = performance.now();
  await withAdmin(async (admin) => {
    for (let from = 1; from <= rows; from += FILL_CHUNK) {
      const to = Math.min(rows, from + FILL_CHUNK - 1);
      await admin.query(
        `INSERT INTO "${schema}".processed_messages (consumer, message_id, status, processed_at)
         SELECT 'old', 'old-' || g, 'completed', now() - interval '30 days' + g * interval '1 ms'
         FROM generate_series($1::bigint, $2::bigint) AS g`,
        [from, to],
      );
      progress(`growth: ${schema}: ${to} of ${rows} rows`);
    }
    await admin.query(`VACUUM ANALYZE "${schema}".processed_messages`);
  });
  return { schema, fillSeconds: (performance.now() - started) / 1000 };
}

/** A store on `schema` and the processOnce operation run against it; claim latency recorded apart. */
function claimer(schema, concurrency, connectionString = DATABASE_URL) {
  const store = new PostgresStore({ connectionString, schema, poolMax: concurrency, logger: silentLogger });
  const insert = businessInsert(schema);
  const state = { recorder: undefined };
  const op = async (seq) => {
    const t0 = performance.now();
    const outcome = await processOnce(store, { consumer: 'bench', messageId: `m-${seq}` }, (tx) => {
      // BEGIN with the claim is the transaction's first round trip: the claim's latency.
      state.recorder?.record(performance.now() - t0);
      return tx.query(insert, [`order-${seq}`, 40]);
    });
    if (outcome.status !== 'processed') throw new Error(`m-${seq} was not processed`);
  };
  return { store, op, state };
}

/** One measured processOnce window on `schema` after a short warm-up. */
async function window(schema, concurrency, seconds) {
  const { store, op, state } = claimer(schema, concurrency);
  try {
    await runWindow({ concurrency, seconds: WARMUP_SECONDS, op });
    state.recorder = new LatencyRecorder();
    const result = await runWindow({ concurrency, seconds, op });
    return { ...result, claimLatency: state.recorder };
  } finally {
    await store.close();
  }
}

/** Prunes the old markers of `schema` while claims run, sampling the prune's locks. */
async function pruneUnderLoad(schema, rows) {
  const pruneUrl = new URL(DATABASE_URL);
  pruneUrl.searchParams.set('application_name', 'bench-growth-prune');
  const store = new PostgresStore({
    connectionString: pruneUrl.toString(),
    schema,
    poolMax: 1,
    logger: silentLogger,
  });
  // A window of claims alone first, as long as the prune is expected to take at most.
  const before = await window(schema, PRUNE_CONCURRENCY, 3);
  const locks = new Map();
  let samples = 0;
  let waitingClaims = 0;
  let sampling = true;
  const sampler = withAdmin(async (admin) => {
    while (sampling) {
      const { rows: held } = await admin.query(
        `SELECT l.mode, l.locktype, coalesce(c.relname, l.locktype) AS target, l.granted,
                a.application_name
         FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
         LEFT JOIN pg_class c ON c.oid = l.relation
         WHERE a.datname = current_database()
           AND a.application_name IN ('bench-growth-prune', 'bench-growth-claims')`,
      );
      samples++;
      for (const lock of held) {
        if (lock.application_name === 'bench-growth-prune' && lock.granted) {
          const key = `${lock.mode} on ${lock.target}`;
          locks.set(key, (locks.get(key) ?? 0) + 1);
        } else if (!lock.granted && lock.application_name === 'bench-growth-claims') {
          waitingClaims++;
        }
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  });
  // Claims on the same table for as long as the prune runs (one store, one closed loop).
  const claimsUrl = new URL(DATABASE_URL);
  claimsUrl.searchParams.set('application_name', 'bench-growth-claims');
  const loader = claimer(schema, PRUNE_CONCURRENCY, claimsUrl.toString());
  await runWindow({ concurrency: PRUNE_CONCURRENCY, seconds: WARMUP_SECONDS, op: loader.op });
  loader.state.recorder = new LatencyRecorder();
  let pruning = true;
  let claimed = 0;
  const loadStarted = performance.now();
  const claims = Promise.all(
    Array.from({ length: PRUNE_CONCURRENCY }, async () => {
      while (pruning) {
        await loader.op(nextSeq());
        claimed++;
      }
    }),
  );
  const started = performance.now();
  const deleted = await store.prune({ olderThan: 24 * 3600 * 1000, batchSize: PRUNE_BATCH });
  const seconds = (performance.now() - started) / 1000;
  pruning = false;
  await claims;
  const duringRate = claimed / ((performance.now() - loadStarted) / 1000);
  sampling = false;
  await sampler;
  await store.close();
  await loader.store.close();
  if (deleted !== rows) throw new Error(`prune deleted ${deleted} markers, expected ${rows}`);
  return {
    deleted,
    seconds,
    rowsPerSecond: deleted / seconds,
    batchSize: PRUNE_BATCH,
    transactions: Math.ceil(deleted / PRUNE_BATCH) + 1,
    locks: [...locks.entries()].map(([lock, seen]) => ({ lock, seenInSamples: seen })),
    samples,
    waitingLockSamples: waitingClaims,
    claimsBefore: { perSecond: before.perSecond, ...before.claimLatency.summary() },
    claimsDuring: { perSecond: duringRate, ...loader.state.recorder.summary() },
  };
}

async function main() {
  const fills = {};
  const levels = [];
  let prune;
  try {
    for (const size of SIZES) {
      progress(`growth: filling ${schemaOf(size)} with ${size} markers...`);
      fills[size] = (await filledSchema(size, size)).fillSeconds;
    }
    for (const concurrency of LEVELS) {
      progress(
        `growth: concurrency ${concurrency}, ${ROUNDS} interleaved rounds over ${SIZES.join(', ')} rows...`,
      );
      const rounds = await interleaved(
        ROUNDS,
        Object.fromEntries(
          SIZES.map((size) => [label(size), () => window(schemaOf(size), concurrency, SECONDS)]),
        ),
        (round, results) =>
          progress(
            `  round ${round + 1}: ${Object.entries(results)
              .map(([name, list]) => `${name} ${Math.round(list[round].perSecond)}/s`)
              .join(', ')}`,
          ),
      );
      const summary = {};
      for (const [name, list] of Object.entries(rounds)) {
        const claim = new LatencyRecorder();
        for (const r of list) claim.merge(r.claimLatency);
        summary[name] = { ...summarise(list), claim: claim.summary() };
      }
      const smallest = label(SIZES[0]);
      const largest = label(SIZES[SIZES.length - 1]);
      const slowdown = medianRatio(rounds[smallest], rounds[largest]);
      levels.push({ concurrency, summary, smallest, largest, slowdown, pass: slowdown <= TARGET });
    }
    const pruneSize = SIZES.find((size) => size === PRUNE_ROWS);
    if (pruneSize !== undefined) {
      progress(`growth: pruning ${PRUNE_ROWS} markers in batches of ${PRUNE_BATCH} under load...`);
      prune = await pruneUnderLoad(schemaOf(pruneSize), PRUNE_ROWS);
    }
  } finally {
    for (const size of SIZES) await dropSchema(schemaOf(size)).catch(() => {});
  }
  print(levels, prune, fills);
  emitResult({
    scenario: 'growth',
    settings: { sizes: SIZES, levels: LEVELS, rounds: ROUNDS, seconds: SECONDS },
    target: TARGET,
    fills,
    levels,
    prune,
  });
}

function print(levels, prune, fills) {
  console.log(`\nScenario 5 — growth of processed_messages (medians of ${ROUNDS} interleaved rounds)`);
  console.log(
    `fill seconds: ${Object.entries(fills)
      .map(([size, s]) => `${label(Number(size))} ${s.toFixed(0)} s`)
      .join(', ')}`,
  );
  console.log('c   rows     msgs/s   p50 ms   p99 ms   claim p50   claim p99');
  for (const level of levels) {
    for (const [name, s] of Object.entries(level.summary)) {
      console.log(
        `${String(level.concurrency).padEnd(3)} ${name.padEnd(7)} ${formatRate(s.perSecond).padStart(7)} ${formatMs(s.p50).padStart(8)} ${formatMs(s.p99).padStart(8)} ${formatMs(s.claim.p50).padStart(11)} ${formatMs(s.claim.p99).padStart(11)}`,
      );
    }
    console.log(
      `    ${level.smallest} ÷ ${level.largest}: ${formatRatio(level.slowdown)} (target ≤ ${TARGET}: ${level.pass ? 'met' : 'MISSED'})`,
    );
  }
  if (prune) {
    console.log(
      `\nprune: ${prune.deleted} markers in ${prune.seconds.toFixed(1)} s (${formatRate(prune.rowsPerSecond)} rows/s, batches of ${prune.batchSize})`,
    );
    console.log(`  locks held by the prune (samples seen in, of ${prune.samples}):`);
    for (const { lock, seenInSamples } of prune.locks) console.log(`    ${lock}: ${seenInSamples}`);
    console.log(`  lock waits seen by other sessions: ${prune.waitingLockSamples} sample rows`);
    console.log(
      `  claims at c=${PRUNE_CONCURRENCY}: before ${formatRate(prune.claimsBefore.perSecond)}/s, p99 ${formatMs(prune.claimsBefore.p99)} ms; during ${formatRate(prune.claimsDuring.perSecond)}/s, p99 ${formatMs(prune.claimsDuring.p99)} ms`,
    );
  }
}

runMain(main);
