/**
 * Scenarios 1–4: the delivery basics. Every message processed once (happy path), producer
 * duplicates skipped, an ack lost after the commit, a failure before the commit.
 */
import { expect } from 'vitest';
import { BACKLOG_ZERO_WAIT, effectsWait, sleep } from '../ScenarioRun.js';
import { waitFor } from '../spies.js';
import { byId, expectOneEffectEach, ids, needs, recordEffect, type Scenario, within } from './scenario.js';

export const happyPath: Scenario = {
  n: 1,
  slug: 'happy-path',
  title: 'happy path: 200 messages, concurrency 8',
  // Catches lost messages (an ID without a row, backlog > 0) and missing or unbounded
  // concurrency (max handlers in flight < 2 or > 8).
  missing: () => [],
  setup: () => ({ leaseMs: 30_000, partitions: 8 }),
  timeoutMs: 120_000,
  async body({ run, t }) {
    const published = ids('happy', 200);
    let inFlight = 0;
    let maxInFlight = 0;
    await run.startConsumer({
      label: 'a',
      concurrency: 8,
      handler: async (message, ctx) => {
        inFlight++;
        maxInFlight = Math.max(maxInFlight, inFlight);
        try {
          await run.insertEffect(ctx, message, 'a');
          // A little simulated work so concurrent handlers overlap.
          await sleep(10);
        } finally {
          inFlight--;
        }
      },
    });
    await run.publish(published.map((id, n) => ({ id, body: { n } })));
    const counts = await run.waitForEffects(published, t(90_000, effectsWait(published.length)));
    await run.spy.waitForCount('processed', published.length, undefined, t(10_000));
    expectOneEffectEach(counts, published);
    await run.waitForBacklogZero(t(20_000, BACKLOG_ZERO_WAIT));
    expect(maxInFlight, 'most handlers in flight at once').toBeGreaterThanOrEqual(2);
    expect(maxInFlight, 'most handlers in flight at once').toBeLessThanOrEqual(8);
  },
};

export const producerDuplicates: Scenario = {
  n: 2,
  slug: 'producer-duplicates',
  title: 'producer duplicates: each ID published 3×',
  // Catches dedup keyed on broker-assigned IDs only: every copy would then be a new
  // message and each ID would have 3 rows.
  missing: () => [],
  setup: () => ({ leaseMs: 30_000, partitions: 4 }),
  timeoutMs: 120_000,
  async body({ run, features, t }) {
    const published = ids('dup', 200);
    const copies = 3;
    await run.startConsumer({ label: 'a', concurrency: 8, handler: recordEffect(run, 'a') });
    const messages = [];
    for (let copy = 0; copy < copies; copy++)
      messages.push(...published.map((id, n) => ({ id, body: { n, copy } })));
    await run.publish(messages);
    const counts = await run.waitForEffects(published, t(90_000, effectsWait(published.length)));
    if (features.brokerDedup) {
      await run.waitForBacklogZero(t(30_000));
    } else {
      await waitFor(() => run.spy.count('processed') + run.spy.count('duplicate') >= messages.length, {
        timeoutMs: t(60_000),
        description: `${messages.length} deliveries concluded as processed or duplicate (${run.spy.summary()})`,
      });
      await run.waitForBacklogZero(t(30_000));
    }
    // Quiescence: every delivery received has concluded.
    await waitFor(
      () => run.spy.count('received') === run.spy.count('processed') + run.spy.count('duplicate'),
      {
        timeoutMs: t(20_000),
        description: `received = processed + duplicate (${run.spy.summary()})`,
      },
    );
    expectOneEffectEach(await run.effectCounts(), published);
    expect(counts.size).toBe(published.length);
    const deliveries = run.spy.count('received');
    expect(run.spy.count('processed'), 'processed events').toBe(published.length);
    expect(run.spy.count('duplicate'), 'duplicate events = deliveries − 200').toBe(
      deliveries - published.length,
    );
    if (!features.brokerDedup)
      expect(deliveries, 'every published copy delivered').toBeGreaterThanOrEqual(messages.length);
  },
};

export const ackLost: Scenario = {
  n: 3,
  slug: 'ack-lost',
  title: 'ack lost after commit, then redelivery',
  // Catches no dedup on redelivery (a lost-ack message would get a second row) and a
  // redelivered message left unsettled (no confirmed ack, backlog > 0).
  missing: () => [],
  setup: () => ({ leaseMs: 2_000 }),
  timeoutMs: 120_000,
  async body({ run, t }) {
    const published = ids('lost-ack', 50);
    const lost = published.filter((_, n) => n % 5 === 0); // 20%
    run.faults.dropAck(lost);
    await run.startConsumer({ label: 'a', concurrency: 4, handler: recordEffect(run, 'a') });
    await run.publish(published.map((id, n) => ({ id, body: { n } })));
    await run.spy.waitForCount('processed', published.length, undefined, t(60_000));
    await waitFor(
      () => lost.every((id) => run.faults.list('ack', { messageId: id, dropped: true }).length === 1),
      {
        timeoutMs: t(10_000),
        description: 'the planned acks to be dropped',
      },
    );
    // The broker never heard those acks: make it hand the messages out again (or, for
    // a harness without forceRedelivery, let their leases lapse).
    if (run.setup.forceRedelivery) for (const id of lost) await run.setup.forceRedelivery(id);
    const deadline = t(
      run.leaseMs * 3 + 30_000,
      'the redelivery of a lost-ack message to be skipped as a duplicate',
    );
    for (const id of lost) {
      await waitFor(() => run.spy.countFor('duplicate', id) > 0, {
        timeoutMs: deadline,
        description: `the redelivery of ${id} (its ack was lost) to be skipped as a duplicate (${run.spy.summary()})`,
      });
    }
    await waitFor(() => lost.every((id) => run.faults.confirmedAcks(id) >= 1), {
      timeoutMs: t(20_000),
      description: 'a confirmed ack of every redelivered message',
    });
    await run.waitForBacklogZero(t(20_000, BACKLOG_ZERO_WAIT));
    expectOneEffectEach(await run.effectCounts(), published);
    for (const id of lost) expect(run.spy.countFor('processed', id), `processed events of ${id}`).toBe(1);
    expect(run.spy.count('processed'), 'processed events').toBe(published.length);
  },
};

export const failureBeforeCommit: Scenario = {
  n: 4,
  slug: 'failure-before-commit',
  title: 'failure before commit: the handler writes its row, then throws on attempt 1',
  // Catches a marker committed outside the handler's transaction: after attempt 1 the
  // marker probe would find it (and the retry would be skipped as a duplicate, leaving
  // no row at all). And an ack after a silent rollback: a handler that swallowed a
  // statement error leaves the transaction aborted, PostgreSQL answers the COMMIT with
  // ROLLBACK, and a store that takes that for a commit acks a message with no row.
  // Both are planted in test/defects.
  missing: (f) => needs(f, 'redeliveryOnRetry'),
  setup: () => ({ leaseMs: 10_000 }),
  timeoutMs: 60_000,
  async body({ run, t }) {
    const id = 'fails-once';
    // Its attempt 1 catches a failed statement and returns: PostgreSQL then answers the
    // COMMIT with ROLLBACK, so that run is a failure (retried), never an ack.
    const swallows = 'swallows-once';
    const others = ids('steady', 3);
    // Hold the retry at the fault injector: nothing can redeliver the message while we
    // inspect the database after attempt 1.
    const retry = run.faults.hold('retryLater', id);
    const attempts: number[] = [];
    await run.startConsumer({
      label: 'a',
      concurrency: 2,
      handler: async (message, ctx) => {
        await run.insertEffect(ctx, message, 'a');
        if (message.id === swallows && ctx.attempt === 1) {
          await ctx.tx.query(run.state.sql.failingStatement).catch(() => {
            // The deliberate mistake: the transaction is aborted, the handler returns.
          });
        }
        if (message.id !== id) return;
        attempts.push(ctx.attempt);
        if (ctx.attempt === 1) throw new Error('planned failure after the business insert (attempt 1)');
      },
    });
    await run.publish([
      { id, body: {} },
      { id: swallows, body: {} },
      ...others.map((other) => ({ id: other, body: {} })),
    ]);
    await run.spy.waitFor('failed', byId(id), t(20_000));
    await within(retry.reached, t(10_000), 'the retry of the failed message to be requested');
    expect(await run.effectsOf(id), 'rows after the failed attempt').toBe(0);
    expect(await run.markerExists(id), 'processed marker after the failed attempt').toBe(false);
    retry.release();
    await run.spy.waitFor('processed', byId(id), t(30_000));
    expect(await run.effectsOf(id), 'rows after the retry').toBe(1);
    expect(await run.markerExists(id), 'processed marker after the retry').toBe(true);
    expect(attempts, 'ctx.attempt of each run of the handler').toEqual([1, 2]);
    await run.spy.waitFor('processed', byId(swallows), t(30_000));
    expect(
      run.spy.countFor('failed', swallows),
      `failed runs of ${swallows} (attempt 1 swallowed a statement error, its COMMIT rolled back: an ack would lose it)`,
    ).toBe(1);
    expect(await run.effectsOf(swallows), `rows of ${swallows} after its retry`).toBe(1);
    const all = [id, swallows, ...others];
    expectOneEffectEach(await run.waitForEffects(all, t(20_000)), all);
  },
};
