import { silentLogger } from '@oncely/core';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { type Emulator, send, startEmulator } from './fauxqs.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// Visibility heartbeat: a handler that runs 3× the visibility timeout keeps its message
// (the core's lease keeper calls Delivery.extendLease → ChangeMessageVisibility). The
// second test turns renewal off to show that this test would catch a missing heartbeat.

const VISIBILITY_MS = 2000;
const HANDLER_MS = 3 * VISIBILITY_MS;

const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS visibility heartbeat (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('long');
  });
  afterEach((ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  async function runLongHandler(leaseRenewal: boolean, id: string) {
    const queue = await emulator.createQueue('long', { VisibilityTimeout: String(VISIBILITY_MS / 1000) });
    const consumer = createSqsConsumer({
      name: `long-${id}`,
      broker: {
        queueUrl: queue.url,
        client: emulator.client,
        visibilityTimeoutMs: VISIBILITY_MS,
        waitTimeSeconds: 1,
      },
      store: db.store,
      // Two slots: a redelivery during the handler would be received by this consumer.
      concurrency: 2,
      handlerTimeoutMs: 20_000,
      leaseRenewal,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await new Promise((resolve) => setTimeout(resolve, HANDLER_MS));
        await ctx.tx.query(`INSERT INTO ${db.effects}(message_id) VALUES ($1)`, [message.id]);
      },
    });
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    await send(emulator.client, queue.url, [{ id, body: '{"n":1}' }]);
    return { consumer, spy, queue };
  }

  it('keeps a message held 3× the visibility timeout: one receipt, one effect, queue empty', async () => {
    const { consumer, spy, queue } = await runLongHandler(true, 'long-1');
    try {
      await spy.waitFor('processed', (e) => e.event.messageId === 'long-1', HANDLER_MS + 10_000);
      await waitFor(() => emulator.server.inspectQueue(queue.name)?.messages.inflight.length === 0, {
        description: 'the message deleted',
      });
      expect(spy.countFor('received', 'long-1')).toBe(1);
      expect(spy.count('leaseRenewed')).toBeGreaterThanOrEqual(2);
      expect(spy.count('leaseLost')).toBe(0);
      expect(await db.countEffects('long-1')).toBe(1);
      const left = emulator.server.inspectQueue(queue.name)!.messages;
      expect(left.ready.length + left.inflight.length + left.delayed.length).toBe(0);
    } finally {
      await consumer.stop();
    }
  }, 30_000);

  it('without the heartbeat the same handler loses the message to a redelivery (what the test above catches)', async () => {
    const { consumer, spy } = await runLongHandler(false, 'long-2');
    try {
      await spy.waitForCount('received', 2, (e) => e.event.messageId === 'long-2', HANDLER_MS + 10_000);
      await spy.waitFor('processed', (e) => e.event.messageId === 'long-2', 20_000);
      // The unique key still makes it one effect.
      await waitFor(
        async () => spy.count('duplicate') + spy.count('processed') >= 2 || spy.count('ackFailed') > 0,
        {
          timeoutMs: 20_000,
          description: 'the second delivery settled',
        },
      );
      expect(await db.countEffects('long-2')).toBe(1);
    } finally {
      await consumer.stop();
    }
  }, 40_000);
});
