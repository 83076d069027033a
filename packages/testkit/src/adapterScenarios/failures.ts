/**
 * Scenarios 10, 11 and 16: failing messages. Poison (no ID, a body that does not decode, a
 * handler that always throws), a retry with its delay, and attempts that count failures,
 * not deliveries.
 */
import type { IdempotencyStore, MessageKey, SqlClient } from '@oncely/core';
import { expect } from 'vitest';
import { WaitTimeoutError } from '../errors.js';
import { waitFor } from '../spies.js';
import {
  aborted,
  byId,
  expectOneEffectEach,
  ids,
  needs,
  recordEffect,
  type Scenario,
  within,
} from './scenario.js';

export const poison: Scenario = {
  n: 10,
  slug: 'poison',
  title: 'poison messages: no ID, unparseable body, a handler that always throws',
  // Catches silent drops (a poison message missing from the dead letters) and crash
  // loops (a poison message received again and again, or the stream behind it stuck).
  missing: () => [],
  setup: () => ({ leaseMs: 10_000 }),
  timeoutMs: 90_000,
  async body({ run, features, t }) {
    const before = ids('calm-before', 10);
    const after = ids('calm-after', 10);
    const badBody = 'poison-body';
    const alwaysFails = 'poison-throws';
    const maxAttempts = features.redeliveryOnRetry ? 3 : 1;
    await run.startConsumer({
      label: 'a',
      concurrency: 2,
      maxAttempts,
      backoff: { initialMs: 50, maxMs: 200 },
      handler: async (message, ctx) => {
        if (message.id === alwaysFails) throw new Error('this handler always fails');
        await run.insertEffect(ctx, message, 'a');
      },
    });
    await run.publish([
      ...before.map((id) => ({ id, body: {} })),
      { body: { note: 'published without an ID' } },
      { id: badBody, body: null, rawBody: '{"unterminated json' },
      { id: alwaysFails, body: {} },
      ...after.map((id) => ({ id, body: {} })),
    ]);
    const healthy = [...before, ...after];
    await run.waitForEffects(healthy, t(30_000));
    const deadLetters = await waitFor(
      async () => {
        const list = await run.setup.deadLetters();
        return list.length >= 3 ? list : undefined;
      },
      { timeoutMs: t(30_000, '3 dead letters'), description: `3 dead letters (${run.spy.summary()})` },
    );
    expect(
      deadLetters.filter((d) => d.reason === 'missing-id'),
      'dead letters with reason missing-id',
    ).toHaveLength(1);
    expect(deadLetters.find((d) => d.id === badBody)?.reason, `dead-letter reason of ${badBody}`).toBe(
      'invalid-body',
    );
    expect(
      deadLetters.find((d) => d.id === alwaysFails)?.reason,
      `dead-letter reason of ${alwaysFails}`,
    ).toBe('max-attempts');
    expect(deadLetters, 'dead letters').toHaveLength(3);
    // The copy can reach the dead-letter destination before the original is settled
    // and the event emitted: wait for the events rather than read them at once.
    await waitFor(() => run.spy.count('deadLettered') >= 3 || undefined, {
      timeoutMs: t(10_000),
      description: `3 deadLettered events (${run.spy.summary()})`,
    });
    const reasons = run.spy.list('deadLettered').map((e) => e.event.reason);
    expect(reasons.sort()).toEqual(['invalid-body', 'max-attempts', 'missing-id']);
    expect(run.receipts(undefined), 'receipts of the message without ID').toBe(1);
    expect(run.receipts(badBody), `receipts of ${badBody}`).toBe(1);
    expect(run.receipts(alwaysFails), `receipts of ${alwaysFails}`).toBe(maxAttempts);
    expect(run.spy.countFor('failed', alwaysFails), `failed attempts of ${alwaysFails}`).toBe(maxAttempts);
    await run.waitForBacklogZero(t(20_000));
    expectOneEffectEach(await run.effectCounts(), healthy);
  },
};

export const retryDelay: Scenario = {
  n: 11,
  slug: 'retry-delay',
  title: 'retry with delay: fails twice, then succeeds',
  // Catches hot redelivery loops: attempts spaced less than the backoff (a retry that
  // ignores the delay) go red.
  missing: (f) => needs(f, 'redeliveryOnRetry', 'delayedRetry'),
  setup: () => ({ leaseMs: 10_000 }),
  timeoutMs: 60_000,
  async body({ run, t }) {
    const id = 'retry-delay';
    // Far above what a hot retry (a redelivery at once: a receive, a count, a claim)
    // takes on a busy machine, so a retry that ignores the delay shows on every run.
    const initialMs = 1_000;
    // setTimeout may fire a millisecond early against Date.now(); nothing more.
    const toleranceMs = 5;
    const starts: Array<{ attempt: number; at: number }> = [];
    await run.startConsumer({
      label: 'a',
      concurrency: 2,
      maxAttempts: 5,
      backoff: { initialMs, maxMs: 10_000, multiplier: 2, jitter: 0 },
      handler: async (message, ctx) => {
        starts.push({ attempt: ctx.attempt, at: Date.now() });
        await run.insertEffect(ctx, message, 'a');
        if (ctx.attempt <= 2) throw new Error(`planned failure on attempt ${ctx.attempt}`);
      },
    });
    await run.publish([{ id, body: {} }]);
    await waitFor(() => run.spy.countFor('processed', id) > 0, {
      timeoutMs: t(30_000, `${id} processed by its third attempt`),
      description: `${id} processed by its third attempt (${run.spy.summary()})`,
    });
    expect(
      starts.map((s) => s.attempt),
      'attempts',
    ).toEqual([1, 2, 3]);
    const delays = run.spy.list('retried', byId(id)).map((e) => e.event.delayMs ?? 0);
    expect(delays, 'retry delays').toHaveLength(2);
    expect(delays[0]!, 'first retry delay').toBeGreaterThanOrEqual(initialMs);
    expect(delays[1]!, 'second retry delay').toBeGreaterThanOrEqual(2 * initialMs);
    const gap1 = starts[1]!.at - starts[0]!.at;
    const gap2 = starts[2]!.at - starts[1]!.at;
    expect(gap1, 'ms between attempts 1 and 2').toBeGreaterThanOrEqual(delays[0]! - toleranceMs);
    expect(gap2, 'ms between attempts 2 and 3').toBeGreaterThanOrEqual(delays[1]! - toleranceMs);
    expect(await run.effectsOf(id)).toBe(1);
  },
};

export const releasesNotAttempts: Scenario = {
  n: 16,
  slug: 'releases-not-attempts',
  title: 'attempts count failures, not deliveries: three releases, then maxAttempts failing runs',
  // Catches a broker delivery count taken as the attempt number (each release would use
  // up maxAttempts: the failing message dead-lettered before its 2 runs, or at once),
  // and a happy path that writes an attempt counter (the fresh message's count is 1
  // only if nothing was written before). Each cycle waits for its holder's `released`
  // event, not for a clock: the three releases are what the first part is about, and
  // when stop() resolves relative to them is scenario 19's business. (It raced a 50 ms
  // stop deadline once: under load the third release landed after stop() returned, and
  // the count read 2, issue 25.)
  missing: (f) => needs(f, 'redeliveryOnRetry'),
  // One partition: with several, each fresh message could be the first of its partition.
  setup: () => ({ leaseMs: 10_000, partitions: 1 }),
  timeoutMs: 120_000,
  async body({ run, t }) {
    const id = 'released-then-failing';
    const maxAttempts = 2;
    await run.publish([{ id, body: {} }]);
    let holds = 0;
    for (let cycle = 1; cycle <= 3; cycle++) {
      const holder = await run.startConsumer({
        label: `holder-${cycle}`,
        concurrency: 1,
        maxAttempts,
        stopTimeoutMs: 50,
        handler: async (_message, ctx) => {
          holds++;
          // Held until stop()'s deadline aborts it: a release, never a failure.
          await aborted(ctx.signal);
          throw ctx.signal.reason;
        },
      });
      await waitFor(() => holds >= cycle || undefined, {
        timeoutMs: t(40_000),
        description: `holder ${cycle} running the message (${run.spy.summary()})`,
      });
      await within(holder.stop(), t(20_000), `holder ${cycle} to stop`);
      const source = `holder-${cycle}`;
      await run.spy
        .waitFor('released', (e) => e.source === source && e.event.messageId === id, t(20_000))
        .catch(() => {
          throw new WaitTimeoutError(`the release of ${id} by ${source} (${run.spy.summary()})`, t(20_000));
        });
    }
    expect(run.spy.countFor('released', id), `releases of ${id}`).toBe(3);
    expect(run.spy.countFor('failed', id), `failures of ${id} while held`).toBe(0);

    let failingRuns = 0;
    const failing = await run.startConsumer({
      label: 'failing',
      concurrency: 1,
      maxAttempts,
      backoff: { initialMs: 50, maxMs: 200 },
      handler: async () => {
        failingRuns++;
        throw new Error('this handler always fails');
      },
    });
    const deadLetter = await waitFor(async () => (await run.setup.deadLetters()).find((d) => d.id === id), {
      timeoutMs: t(40_000, `dead letter of ${id}`),
      description: `dead letter of ${id} (${run.spy.summary()})`,
    });
    expect(deadLetter.reason, `dead-letter reason of ${id}`).toBe('max-attempts');
    expect(failingRuns, `runs of ${id} after its releases`).toBe(maxAttempts);
    await within(failing.stop(), t(20_000), 'the failing consumer to stop');

    // Two fresh messages, one after the other: the first may legitimately be counted
    // up front (Kafka: the first record of a partition after an assignment; SQS: a poll
    // the stopped consumer aborted may have taken it). The second is a plain first
    // delivery and must cost nothing but its marker.
    // Counted through the store's calls, not its rows: the core deletes the counter of
    // a processed message, so a row left behind is no evidence either way.
    const counted: string[] = [];
    await run.startConsumer({
      label: 'happy',
      concurrency: 1,
      handler: recordEffect(run, 'happy'),
      store: countingAttempts(run.store, counted),
    });
    for (const fresh of ['fresh-1', 'fresh-2']) {
      await run.publish([{ id: fresh, body: {} }]);
      await run.spy.waitFor('processed', byId(fresh), t(30_000));
    }
    expect(
      counted.filter((id) => id === 'fresh-2'),
      'attempt counter of a message processed on its first delivery (the runs counted for it)',
    ).toEqual([]);
  },
};

/** `store`, with every `recordAttempt` call's message ID pushed onto `counted`. */
function countingAttempts(
  store: IdempotencyStore<SqlClient>,
  counted: string[],
): IdempotencyStore<SqlClient> {
  return new Proxy(store, {
    get(target, property) {
      if (property === 'recordAttempt') {
        // Every argument passed on (the run's token too): a spy must not change what it watches.
        return (key: MessageKey, ...rest: [run?: string]) => {
          counted.push(key.messageId);
          return target.recordAttempt(key, ...rest);
        };
      }
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}
