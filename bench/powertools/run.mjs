#!/usr/bin/env node
// Scenario 4 — against the alternative a user would pick: AWS Lambda Powertools
// idempotency (makeIdempotent + its Redis-compatible CachePersistenceLayer on
// @redis/client, Redis at REDIS_URL) wrapping the same business transaction.
//
//   node bench/powertools/run.mjs [--concurrency 1,8] [--rounds 5] [--seconds 1.5] [--footprint-runs 3] [--footprint-messages 3000]
//
// Throughput and latency (interleaved rounds) of bare / oncely / powertools — see
// variants.mjs — then the memory footprint of each: a fresh process per sample
// (footprint.mjs) measures RSS and heap after a forced GC, before loading the variant and
// after applying N payments with it; the table shows the median deltas.
//
// Powertools runs outside Lambda as a plain function wrapper (it needs nothing from
// Lambda). Without a Lambda context it cannot know the remaining invocation time: its
// INPROGRESS records would get no in-progress expiry and it warns on stderr on every
// call, so the benchmark registers a stand-in context reporting 30 s left (see variants.mjs).
// Its guarantee differs: the Redis record and the PostgreSQL row are two separate commits.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  emitResult,
  flags,
  interleaved,
  medianRatio,
  numberList,
  progress,
  runMain,
  runWindow,
  summarise,
  uniqueTag,
} from '../lib/common.mjs';
import { createBenchSchema, dropSchema } from '../lib/pg.mjs';
import { formatMs, formatRate, formatRatio, median } from '../lib/stats.mjs';
import { createVariant, VARIANTS } from './variants.mjs';

const args = flags({
  concurrency: '1,8',
  rounds: 5,
  seconds: 1.5,
  'footprint-runs': 3,
  'footprint-messages': 3000,
});
const LEVELS = numberList(args.concurrency);
const ROUNDS = Number(args.rounds);
const SECONDS = Number(args.seconds);
const FOOTPRINT_RUNS = Number(args['footprint-runs']);
const FOOTPRINT_MESSAGES = Number(args['footprint-messages']);
const FOOTPRINT_CONCURRENCY = 8;
const WARMUP_SECONDS = 0.3;
const tag = uniqueTag();
const schema = `bench_powertools_${tag}`;

async function window(name, concurrency) {
  const variant = await createVariant(name, { schema, concurrency, tag });
  try {
    await runWindow({ concurrency, seconds: WARMUP_SECONDS, op: variant.op });
    return await runWindow({ concurrency, seconds: SECONDS, op: variant.op });
  } finally {
    await variant.close();
  }
}

function footprintSample(variant) {
  const script = fileURLToPath(new URL('./footprint.mjs', import.meta.url));
  const child = spawn(
    process.execPath,
    [
      '--expose-gc',
      script,
      '--variant',
      variant,
      '--schema',
      schema,
      '--messages',
      String(FOOTPRINT_MESSAGES),
      '--concurrency',
      String(FOOTPRINT_CONCURRENCY),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let stdout = '';
  child.stdout.on('data', (chunk) => {
    stdout += chunk;
  });
  return new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => {
      if (code !== 0) reject(new Error(`footprint ${variant} exited with ${code}`));
      else resolve(JSON.parse(stdout.trim().split('\n').at(-1)));
    });
  });
}

async function main() {
  await createBenchSchema(schema);
  const levels = [];
  const footprint = {};
  try {
    // The Oncely variant needs the store's tables in the run's schema.
    const { PostgresStore } = await import('@oncely/postgres');
    const { DATABASE_URL } = await import('../lib/common.mjs');
    const setup = new PostgresStore({ connectionString: DATABASE_URL, schema, poolMax: 1 });
    await setup.migrate();
    await setup.close();

    for (const concurrency of LEVELS) {
      progress(`powertools: concurrency ${concurrency}, ${ROUNDS} interleaved rounds...`);
      const variants = Object.fromEntries(VARIANTS.map((name) => [name, () => window(name, concurrency)]));
      const rounds = await interleaved(ROUNDS, variants, (round, results) =>
        progress(
          `  round ${round + 1}: ${VARIANTS.map((name) => `${name} ${Math.round(results[name][round].perSecond)}/s`).join(', ')}`,
        ),
      );
      levels.push({
        concurrency,
        summary: Object.fromEntries(VARIANTS.map((name) => [name, summarise(rounds[name])])),
        vsBare: Object.fromEntries(VARIANTS.map((name) => [name, medianRatio(rounds.bare, rounds[name])])),
        // > 1: Oncely is faster than Powertools.
        oncelyVsPowertools: medianRatio(rounds.powertools, rounds.oncely) ** -1,
      });
    }

    progress(`powertools: memory footprint, ${FOOTPRINT_RUNS} processes per variant...`);
    const samples = Object.fromEntries(VARIANTS.map((name) => [name, []]));
    for (let run = 0; run < FOOTPRINT_RUNS; run++) {
      for (const name of VARIANTS) samples[name].push(await footprintSample(name));
    }
    for (const name of VARIANTS) {
      const list = samples[name];
      footprint[name] = {
        loadRss: median(list.map((s) => s.afterLoad.rss)),
        loadHeap: median(list.map((s) => s.afterLoad.heapUsed)),
        runRss: median(list.map((s) => s.afterRun.rss)),
        runHeap: median(list.map((s) => s.afterRun.heapUsed)),
        peakRss: median(list.map((s) => s.peakRss)),
      };
    }
  } finally {
    await dropSchema(schema);
  }
  print(levels, footprint);
  emitResult({
    scenario: 'powertools',
    settings: {
      levels: LEVELS,
      rounds: ROUNDS,
      seconds: SECONDS,
      footprintRuns: FOOTPRINT_RUNS,
      footprintMessages: FOOTPRINT_MESSAGES,
      footprintConcurrency: FOOTPRINT_CONCURRENCY,
    },
    levels,
    footprint,
  });
}

const mb = (bytes) => `${(bytes / 1048576).toFixed(1)} MB`;

function print(levels, footprint) {
  console.log(`\nScenario 4 — Oncely against Powertools idempotency on Redis (medians of ${ROUNDS} rounds)`);
  console.log('c   variant        msgs/s     p50 ms   p99 ms   bare/variant   Node CPU µs/msg');
  for (const level of levels) {
    for (const name of VARIANTS) {
      const s = level.summary[name];
      console.log(
        `${String(level.concurrency).padEnd(3)} ${name.padEnd(12)} ${formatRate(s.perSecond).padStart(8)} ${formatMs(s.p50).padStart(9)} ${formatMs(s.p99).padStart(8)} ${formatRatio(level.vsBare[name]).padStart(13)} ${(s.cpuUsPerOp?.toFixed(0) ?? '—').padStart(17)}`,
      );
    }
    console.log(`    Oncely throughput / Powertools throughput: ${formatRatio(level.oncelyVsPowertools)}`);
  }
  console.log(
    `\nMemory (median of ${FOOTPRINT_RUNS} processes; delta from a GC'd process with pg loaded; ${FOOTPRINT_MESSAGES} payments at c=${FOOTPRINT_CONCURRENCY})`,
  );
  console.log('variant        RSS after load  heap after load  RSS after run  heap after run  peak RSS');
  for (const name of VARIANTS) {
    const f = footprint[name];
    console.log(
      `${name.padEnd(12)} ${mb(f.loadRss).padStart(16)} ${mb(f.loadHeap).padStart(16)} ${mb(f.runRss).padStart(14)} ${mb(f.runHeap).padStart(15)} ${mb(f.peakRss).padStart(9)}`,
    );
  }
}

runMain(main);
