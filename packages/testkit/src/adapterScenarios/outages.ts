/**
 * Scenarios 13 and 14: the broker closing the connection mid-stream, and the store
 * unreachable (through a TCP proxy) for longer than the broker's lease allows.
 */
import { expect } from 'vitest';
import { HarnessIncompleteError } from '../errors.js';
import { effectsWait, sleep } from '../ScenarioRun.js';
import { waitFor } from '../spies.js';
import { TcpProxy } from '../TcpProxy.js';
import { expectOneEffectEach, ids, needs, recordEffect, type Scenario } from './scenario.js';

export const serverDisconnect: Scenario = {
  n: 13,
  slug: 'server-disconnect',
  title: 'server-side disconnect mid-stream',
  // Catches a dead consumer after a connection drop (messages after the cut never
  // processed) and losses or doubles around it.
  missing: (f) => needs(f, 'serverSideDisconnect'),
  setup: () => ({ leaseMs: 5_000 }),
  timeoutMs: 150_000,
  async body({ run, t }) {
    if (!run.setup.disconnect)
      throw new HarnessIncompleteError('setup.disconnect', 'feature serverSideDisconnect is declared');
    const published = ids('disconnect', 100);
    const freeRuns = 24;
    let runs = 0;
    let cut = false;
    await run.startConsumer({
      label: 'a',
      concurrency: 4,
      handler: async (message, ctx) => {
        // Runs after the first `freeRuns` wait for the cut, so the stream crosses it: a
        // consumer faster than this test (or a test slowed by load) would otherwise have
        // taken every message before the cut, and a receive loop that dies there would go
        // unseen. Counted by runs, not by message: a broker that hands out later messages
        // first (Kafka's partitions, whose next fetch waits for a held record) must still
        // reach the 20 processed the cut waits for. Bounded, in case of a redelivery storm.
        if (++runs > freeRuns && !cut) {
          await waitFor(() => cut || undefined, { timeoutMs: t(20_000), intervalMs: 20 }).catch(() => {});
        }
        await run.insertEffect(ctx, message, 'a');
        await sleep(10); // keep the stream flowing while the connection is cut
      },
    });
    await run.publish(published.map((id, n) => ({ id, body: { n } })));
    await run.spy.waitForCount('processed', 20, undefined, t(30_000));
    await run.setup.disconnect();
    cut = true;
    const counts = await run.waitForEffects(published, t(120_000, effectsWait(published.length)));
    await run.waitForBacklogZero(t(30_000));
    expectOneEffectEach(counts, published);
  },
};

export const storeOutage: Scenario = {
  n: 14,
  slug: 'store-outage',
  title: 'store outage through a TCP proxy, longer than max deliveries × lease',
  // Catches failing open (an effect or an ack while the store is down), a consumer
  // that keeps fetching during the outage (receipts pile up, the broker's delivery
  // limit dead-letters healthy messages) and one that never resumes.
  missing: () => [],
  // Three deliveries: a redelivery whose 1 s lease lapsed once in a loaded machine's stall
  // must not be dead-lettered for it (with two, the one after the outage was its last).
  setup: () => ({ leaseMs: 1_000, maxDeliveries: 3 }),
  timeoutMs: 120_000,
  async body({ run, state, t }) {
    const { harness } = state;
    if (!harness.createStoreVia)
      throw new HarnessIncompleteError('createStoreVia', 'scenario 14 reaches the store through a TCP proxy');
    if (!harness.databaseAddress)
      throw new HarnessIncompleteError('databaseAddress', 'the TCP proxy of scenario 14 forwards to it');
    const L = run.leaseMs;
    const maxDeliveries = 3;
    const concurrency = 2;
    const proxy = new TcpProxy(harness.databaseAddress);
    await proxy.start();
    run.onEnd(() => proxy.close());
    const proxied = await harness.createStoreVia(proxy.port);
    run.onEnd(() => proxied.cleanup());
    await run.startConsumer({
      label: 'a',
      store: proxied.store,
      concurrency,
      // Held deliveries go back to the broker within the outage, exercising release.
      outageHoldMs: L,
      handler: recordEffect(run, 'a'),
    });
    const early = ids('before-outage', 5);
    const late = ids('during-outage', 10);
    await run.publish(early.map((id) => ({ id, body: {} })));
    await run.waitForEffects(early, t(30_000));
    await waitFor(() => early.every((id) => run.faults.confirmedAcks(id) === 1), {
      timeoutMs: t(10_000),
      description: 'the acks of the messages before the outage',
    });

    await proxy.cut();
    const cutAt = Date.now();
    await run.publish(late.map((id) => ({ id, body: {} })));
    await waitFor(() => run.spy.count('storeUnavailable') > 0, {
      timeoutMs: t(30_000, 'the consumer to declare the store unavailable'),
      description:
        'the consumer to declare the store unavailable (a store error taken for a handler failure never is)',
    });
    // The outage under test: deliberately longer than max deliveries × lease.
    await sleep((maxDeliveries + 2) * L);
    const lateEffects = [...(await run.effectCounts()).keys()].filter((id) => late.includes(id));
    expect(lateEffects, 'effects committed while the store was down').toEqual([]);
    const acksDuringOutage = run.faults.settlements.filter(
      (s) => s.kind === 'ack' && s.at >= cutAt && !s.dropped,
    );
    expect(
      acksDuringOutage.map((s) => s.messageId),
      'acks while the store was down',
    ).toEqual([]);
    const receiptsDuringOutage = late.reduce((sum, id) => sum + run.receipts(id), 0);
    expect(
      receiptsDuringOutage,
      'receipts while the store was down (fetching must pause)',
    ).toBeLessThanOrEqual(2 * concurrency);

    await proxy.resume();
    await run.spy.waitFor('storeRecovered', undefined, t(30_000));
    const counts = await run.waitForEffects([...early, ...late], t(60_000));
    await run.waitForBacklogZero(t(30_000));
    expectOneEffectEach(counts, [...early, ...late]);
    expect(await run.setup.deadLetters(), 'dead letters after the outage').toEqual([]);
    expect(run.spy.count('deadLettered'), 'deadLettered events').toBe(0);
  },
};
