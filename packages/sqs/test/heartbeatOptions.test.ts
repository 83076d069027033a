import { silentLogger } from '@oncely/core';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { type Emulator, send, startEmulator } from './fauxqs.js';
import { faultyClient } from './sqsFaults.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// Heartbeat options (issue 11, SQS 6): `heartbeatIntervalMs` sets how often a held
// message's visibility is renewed, and renewals of many held messages share
// ChangeMessageVisibilityBatch calls. Counted: calls reaching fauxqs through a real client.

const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS heartbeat options (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('hbopt');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  it('heartbeatIntervalMs renews that often, each time to the visibility timeout', async () => {
    // A 60 s visibility: by default it would be renewed every 30 s, so 3 renewals within the
    // handler's 20 s bound happen only if the 500 ms interval is used (nominally 1.5 s: a
    // loaded machine's late timers have 13x that). Nothing is read against a wall clock.
    const queue = await emulator.createQueue('hb-interval', { VisibilityTimeout: '60' });
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    const pushed: number[] = [];
    faults.onCall('ChangeMessageVisibility', (input) => {
      pushed.push(input.VisibilityTimeout as number);
    });
    let spy: ConsumerSpy | undefined;
    const consumer = createSqsConsumer({
      name: 'hb-interval',
      broker: { queueUrl: queue.url, client: faults.client, waitTimeSeconds: 1, heartbeatIntervalMs: 500 },
      store: db.store,
      logger: silentLogger,
      handler: async (message, ctx) => {
        // Held until its visibility was renewed 3 times (throws, so the message fails, after 20 s).
        await spy!.waitForCount('leaseRenewed', 3, (e) => e.event.messageId === message.id, 20_000);
        await ctx.tx.query(`INSERT INTO ${db.effects}(message_id) VALUES ($1)`, [message.id]);
      },
    });
    spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await send(faults.client, queue.url, [{ id: 'hb-1', body: '{}' }]);
    await waitFor(() => spy!.countFor('processed', 'hb-1') + spy!.countFor('failed', 'hb-1') > 0, {
      timeoutMs: 40_000,
      description: 'hb-1 processed or failed',
    });
    expect(spy.countFor('failed', 'hb-1'), spy.summary()).toBe(0);
    expect(spy.countFor('processed', 'hb-1')).toBe(1);
    expect(spy.countFor('leaseRenewed', 'hb-1')).toBeGreaterThanOrEqual(3);
    // Each renewal asks for the visibility timeout, not twice the interval (1 s).
    expect(new Set(pushed)).toEqual(new Set([60]));
  });

  it('refuses heartbeatIntervalMs at or above the visibility timeout', async () => {
    const queue = await emulator.createQueue('hb-bad', { VisibilityTimeout: '2' });
    const consumer = createSqsConsumer({
      name: 'hb-bad',
      broker: { queueUrl: queue.url, client: emulator.client, heartbeatIntervalMs: 2000 },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    });
    await expect(consumer.start()).rejects.toMatchObject({ field: 'broker.heartbeatIntervalMs' });
  });

  it('the renewals of many held messages share ChangeMessageVisibilityBatch calls', async () => {
    // 4 s: renewed at 2 s, leaving 2 s for a loaded machine's delays (2 s left under 1 s;
    // a renewal later than that finds the message back in the queue: leaseLost).
    const queue = await emulator.createQueue('hb-batch', { VisibilityTimeout: '4' });
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    const ids = Array.from({ length: 10 }, (_, i) => `hb-batch-${i}`);
    await send(
      faults.client,
      queue.url,
      ids.map((id) => ({ id, body: '{}' })),
    );
    let spy: ConsumerSpy | undefined;
    const consumer = createSqsConsumer({
      name: 'hb-batch',
      broker: { queueUrl: queue.url, client: faults.client, waitTimeSeconds: 1 },
      store: db.store,
      concurrency: 10,
      logger: silentLogger,
      handler: async (message, ctx) => {
        // Held until its visibility was renewed once.
        await spy!.waitFor('leaseRenewed', (e) => e.event.messageId === message.id, 15_000);
        await ctx.tx.query(`INSERT INTO ${db.effects}(message_id) VALUES ($1)`, [message.id]);
      },
    });
    spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await waitFor(() => ids.every((id) => spy!.countFor('processed', id) === 1), {
      timeoutMs: 20_000,
      description: 'all processed',
    });
    const single = faults.calls.get('ChangeMessageVisibility') ?? 0;
    const batched = faults.calls.get('ChangeMessageVisibilityBatch') ?? 0;
    expect(batched, `single ${single}, batch ${batched}`).toBeGreaterThanOrEqual(1);
    expect(single + batched).toBeLessThan(ids.length);
    expect(spy.count('leaseLost')).toBe(0);
  }, 30_000);
});
