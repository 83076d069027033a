#!/usr/bin/env node
// One memory-footprint sample, in a process of its own (started by bench/powertools/run.mjs
// with --expose-gc): memory after a forced GC at start, then load and build one variant,
// apply `messages` payments at `concurrency`, GC again and measure. Prints one JSON line.
//
//   node --expose-gc bench/powertools/footprint.mjs --variant oncely --schema <schema> [--messages 3000] [--concurrency 8]
import { flags, runMain, uniqueTag } from '../lib/common.mjs';

const args = flags({ variant: 'bare', schema: '', messages: 3000, concurrency: 8 });

function measure() {
  global.gc();
  const { rss, heapUsed, external, arrayBuffers } = process.memoryUsage();
  return { rss, heapUsed, external: external + arrayBuffers };
}

async function main() {
  if (typeof global.gc !== 'function') throw new Error('run with node --expose-gc');
  if (!args.schema) throw new Error('--schema is required (a schema with the payments table)');
  // The shared plumbing (pg, the bench helpers) is loaded before the first sample: every
  // variant needs it, so it is not part of any variant's delta.
  await import('../lib/pg.mjs');
  const before = measure();
  const { createVariant } = await import('./variants.mjs');
  const concurrency = Number(args.concurrency);
  const total = Number(args.messages);
  const variant = await createVariant(args.variant, { schema: args.schema, concurrency, tag: uniqueTag() });
  const loaded = measure();
  let next = 0;
  const worker = async () => {
    for (let seq = next++; seq < total; seq = next++)
      await variant.op(`${args.variant}-${process.pid}-${seq}`);
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const after = measure();
  const peakRss = process.resourceUsage().maxRSS * 1024;
  await variant.close();
  const delta = (a, b) => Object.fromEntries(Object.keys(a).map((key) => [key, b[key] - a[key]]));
  console.log(
    JSON.stringify({
      variant: args.variant,
      messages: total,
      before,
      afterLoad: delta(before, loaded),
      afterRun: delta(before, after),
      peakRss,
    }),
  );
}

runMain(main);
