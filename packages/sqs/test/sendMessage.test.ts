import { silentLogger } from '@oncely/core';
import { ConsumerSpy } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer, SqsOperationError, sendMessage } from '../src/index.js';
import { drainVisible, type Emulator, startEmulator } from './fauxqs.js';
import { faultyClient } from './sqsFaults.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// The producer helper (issue 11, "Producers for every landed broker"): the stable ID in
// the `message-id` attribute (and FIFO group/dedup IDs), the send's answer awaited, a
// failed send retried with the same ID. Failures are injected into the real client.

const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('sendMessage (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('send');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  it('FIFO: a send whose answer was lost is retried with the same IDs, and SQS keeps one copy', async () => {
    const queue = await emulator.createQueue('send-fifo', {}, true);
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    faults.loseResponseOfNext('SendMessage', 1);
    const sent = await sendMessage(faults.client, {
      queueUrl: queue.url,
      id: 'order-1',
      body: { orderId: 1 },
      groupId: 'customer-7',
      attributes: { tenant: 't1' },
    });
    expect(sent.attempts).toBe(2);
    expect(faults.calls.get('SendMessage')).toBe(2);
    const copies = await drainVisible(emulator.client, queue.url);
    expect(copies).toHaveLength(1);
    expect(copies[0]!.Body).toBe('{"orderId":1}');
    expect(copies[0]!.MessageAttributes?.['message-id']?.StringValue).toBe('order-1');
    expect(copies[0]!.MessageAttributes?.tenant?.StringValue).toBe('t1');
    expect(copies[0]!.Attributes?.MessageGroupId).toBe('customer-7');
    expect(copies[0]!.Attributes?.MessageDeduplicationId).toBe('order-1');
  });

  it('standard queue: a lost answer gives SQS two copies with one ID, and the consumer applies it once', async () => {
    const queue = await emulator.createQueue('send-std', { VisibilityTimeout: '5' });
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    faults.loseResponseOfNext('SendMessage', 1);
    const sent = await sendMessage(faults.client, { queueUrl: queue.url, id: 'pay-1', body: 'raw text' });
    expect(sent.attempts).toBe(2);
    const consumer = createSqsConsumer({
      name: 'send-std',
      broker: { queueUrl: queue.url, client: emulator.client, waitTimeSeconds: 1 },
      store: db.store,
      bodyFormat: 'text',
      concurrency: 2,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await ctx.tx.query(`INSERT INTO ${db.effects}(message_id) VALUES ($1)`, [message.id]);
      },
    });
    const spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await spy.waitForCount('received', 2, (e) => e.event.messageId === 'pay-1');
    await spy.waitFor('duplicate', (e) => e.event.messageId === 'pay-1');
    expect(await db.countEffects('pay-1')).toBe(1);
  });

  it('throttling is retried; a permanent error is thrown at once', async () => {
    const queue = await emulator.createQueue('send-retry');
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    faults.failNext('SendMessage', 2, 'RequestThrottled');
    expect((await sendMessage(faults.client, { queueUrl: queue.url, id: 'r-1', body: {} })).attempts).toBe(3);
    faults.failNext('SendMessage', 5, 'AccessDenied');
    const error = await sendMessage(faults.client, { queueUrl: queue.url, id: 'r-2', body: {} }).catch(
      (e) => e,
    );
    expect(error).toBeInstanceOf(SqsOperationError);
    expect(error.sqsCode).toBe('AccessDenied');
    expect(faults.calls.get('SendMessage')).toBe(4);
    await expect(
      sendMessage(faults.client, { queueUrl: `${queue.url}.fifo`, id: 'x', body: {} }),
    ).rejects.toMatchObject({ field: 'groupId' });
  });
});
