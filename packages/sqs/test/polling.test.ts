import { silentLogger } from '@oncely/core';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { type Emulator, send, startEmulator } from './fauxqs.js';
import { faultyClient } from './sqsFaults.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// Short polling (`waitTimeSeconds: 0`) must not spin on an empty queue (issue 11, SQS 3):
// after an empty receive the loop pauses `pollingWaitTimeMs`. Counted: ReceiveMessage
// calls reaching fauxqs in a 2 s window.

const WINDOW_MS = 2000;
const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS polling pause after an empty receive (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('poll');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  async function receivesInWindow(name: string, broker: Record<string, unknown>) {
    const queue = await emulator.createQueue(name);
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    const consumer = createSqsConsumer({
      name,
      broker: { queueUrl: queue.url, client: faults.client, waitTimeSeconds: 0, ...broker },
      store: db.store,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await ctx.tx.query(`INSERT INTO ${db.effects}(message_id) VALUES ($1)`, [message.id]);
      },
    });
    const spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await waitFor(() => faults.callTimes('ReceiveMessage').length > 0, { description: 'first receive' });
    const from = faults.callTimes('ReceiveMessage')[0]!;
    await new Promise((resolve) => setTimeout(resolve, WINDOW_MS));
    const calls = faults.callTimes('ReceiveMessage').filter((t) => t < from + WINDOW_MS).length;
    return { calls, queue, faults, spy };
  }

  it('waitTimeSeconds 0 on an empty queue: a few receives per second by default, not a spin', async () => {
    const { calls, queue, faults, spy } = await receivesInWindow('spin', {});
    // Default pause 1000 ms after an empty short poll: about 2 calls in 2 s.
    expect(calls).toBeGreaterThanOrEqual(1);
    expect(calls).toBeLessThanOrEqual(4);
    // Messages are still picked up.
    await send(faults.client, queue.url, [{ id: 'spin-1', body: '{}' }]);
    await spy.waitFor('processed', (e) => e.event.messageId === 'spin-1');
  });

  it('pollingWaitTimeMs sets the pause', async () => {
    const { calls } = await receivesInWindow('spin-250', { pollingWaitTimeMs: 250 });
    // About 8 calls in 2 s; far from the hundreds of a spin.
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(calls).toBeLessThanOrEqual(10);
  });
});
