/**
 * Scenario 18: a long run keeps nothing per message. Live promises, signals and timers are
 * counted after a full GC, before and after 2,000 messages.
 */
import v8 from 'node:v8';
import { expect } from 'vitest';
import { ids, recordEffect, type Scenario } from './scenario.js';

export const noRetention: Scenario = {
  n: 18,
  slug: 'no-retention',
  title:
    'a long run keeps nothing per message: live promises, signals and timers do not grow with the messages',
  // Catches state kept for the consumer's lifetime per message processed: a Promise.race
  // against a promise that lives as long as the adapter (each race leaves a reaction on
  // it until that promise settles: two live promises per message, the Kafka adapter's
  // close() wait before 418b5ac), a per-delivery signal kept reachable, a timer never
  // cleared. A consumer runs for months, and a few hundred bytes per message is an
  // out-of-memory crash after some millions. Counted with v8.queryObjects, which collects
  // garbage first: only what is reachable. (Listeners and plain objects are not counted:
  // the suite's own records grow per message.)
  missing: () => [],
  setup: () => ({ leaseMs: 30_000, partitions: 4 }),
  // Above the sum of the waits below, so a slow run names the wait it was in (2,000
  // messages under a 180 s timeout ran out on a loaded machine: issue 25).
  timeoutMs: 300_000,
  async body({ run, t }) {
    // The warm-up fills what is built once (connections, links, pools, caches).
    const warm = ids('retain-warm', 200);
    const measured = ids('retain', 2_000);
    await run.startConsumer({ label: 'a', concurrency: 8, handler: recordEffect(run, 'a') });
    await run.publish(warm.map((id, n) => ({ id, body: { n } })));
    await run.waitForEffects(warm, t(60_000));
    await run.spy.waitForCount('processed', warm.length, undefined, t(10_000));
    const before = liveObjects();
    await run.publish(measured.map((id, n) => ({ id, body: { n } })));
    await run.waitForEffects(measured, t(120_000));
    await run.spy.waitForCount('processed', warm.length + measured.length, undefined, t(10_000));
    await run.waitForBacklogZero(t(20_000));
    const after = liveObjects();
    // Bounded caches and whatever a poll has in hand may differ by a little; a leak
    // grows by at least one object per message.
    const allowed = measured.length / 10;
    for (const kind of Object.keys(before) as Array<keyof LiveObjects>) {
      expect(
        after[kind] - before[kind],
        `live ${kind} objects gained over ${measured.length} messages (before ${before[kind]}, after ${after[kind]})`,
      ).toBeLessThan(allowed);
    }
  },
};

/** Live objects of the kinds a per-message leak leaves behind, counted after a full GC. */
interface LiveObjects {
  Promise: number;
  AbortSignal: number;
  Timeout: number;
}

function liveObjects(): LiveObjects {
  // Node >= 20.13 / 22; experimental, so looked up rather than typed.
  const queryObjects = (v8 as { queryObjects?: (ctor: unknown, options: { format: 'count' }) => number })
    .queryObjects;
  if (typeof queryObjects !== 'function') {
    throw new Error(`v8.queryObjects is missing in Node ${process.version}: scenario 18 needs Node >= 20.13`);
  }
  const probe = setTimeout(() => {}, 0);
  const Timeout = probe.constructor;
  clearTimeout(probe);
  return {
    Promise: queryObjects(Promise, { format: 'count' }),
    AbortSignal: queryObjects(AbortSignal, { format: 'count' }),
    Timeout: queryObjects(Timeout, { format: 'count' }),
  };
}
