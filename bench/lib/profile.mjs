// In-process CPU profile of one measured window (the V8 sampling profiler through
// node:inspector, the same data `node --cpu-prof` writes), summarised by where the time
// went: idle (waiting for PostgreSQL), garbage collection, the pg driver, Oncely's core
// and store, and Node.js internals. That answers "is the gap client CPU or round trips?"
// from measurements rather than guesses.
import { Session } from 'node:inspector/promises';

let session;

/** Starts sampling every 100 µs. */
export async function startProfile() {
  session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 100 });
  await session.post('Profiler.start');
}

/** Stops sampling and returns the raw `.cpuprofile` object. */
export async function stopProfile() {
  const { profile } = await session.post('Profiler.stop');
  await session.post('Profiler.disable');
  session.disconnect();
  session = undefined;
  return profile;
}

function categoryOf(node) {
  const { functionName, url } = node.callFrame;
  if (functionName === '(idle)') return 'idle (waiting on I/O)';
  if (functionName === '(garbage collector)') return 'garbage collector';
  if (functionName === '(program)') return 'V8/native (program)';
  if (url.includes('/packages/core/')) return '@oncely/core';
  if (url.includes('/packages/postgres/')) return '@oncely/postgres';
  if (/node_modules\/(pg|pg-protocol|pg-pool|pg-types|pgpass|pg-connection-string)\//.test(url)) {
    return 'pg driver';
  }
  if (url.includes('/bench/')) return 'benchmark loop';
  if (url.startsWith('node:') || url === '') return 'Node.js internals';
  return 'other JS';
}

/**
 * Self time per category and the ten functions with the most self time (outside idle),
 * as shares of all samples.
 */
export function summariseProfile(profile) {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const selfCount = new Map();
  for (const id of profile.samples) selfCount.set(id, (selfCount.get(id) ?? 0) + 1);
  const total = profile.samples.length;
  const categories = new Map();
  const functions = new Map();
  const oncelyFunctions = new Map();
  for (const [id, count] of selfCount) {
    const node = nodes.get(id);
    const category = categoryOf(node);
    categories.set(category, (categories.get(category) ?? 0) + count);
    if (category.startsWith('idle')) continue;
    const { functionName, url, lineNumber } = node.callFrame;
    const file = url ? url.replace(/^.*\/(node_modules|packages|bench)\//, '$1/') : '';
    const key = `${functionName || '(anonymous)'} ${file}${file ? `:${lineNumber + 1}` : ''}`;
    functions.set(key, (functions.get(key) ?? 0) + count);
    if (category.startsWith('@oncely/')) oncelyFunctions.set(key, (oncelyFunctions.get(key) ?? 0) + count);
  }
  const byShare = (map) =>
    [...map.entries()].sort((a, b) => b[1] - a[1]).map(([name, count]) => ({ name, share: count / total }));
  const wallMs = (profile.endTime - profile.startTime) / 1000;
  const idle = categories.get('idle (waiting on I/O)') ?? 0;
  return {
    samples: total,
    wallMs,
    /** Sampled time the main thread was not idle: JS, GC, native and syscalls. */
    busyMs: wallMs * (1 - idle / total),
    byCategory: byShare(categories).map(({ name, share }) => ({ category: name, share })),
    topFunctions: byShare(functions).slice(0, 10),
    /** Oncely's own functions by self time: what to look at when its code is the gap. */
    topOncelyFunctions: byShare(oncelyFunctions).slice(0, 5),
  };
}
