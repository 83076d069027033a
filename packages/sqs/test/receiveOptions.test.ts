import { type Message, silentLogger } from '@oncely/core';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { type Emulator, send, startEmulator } from './fauxqs.js';
import { faultyClient } from './sqsFaults.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// Receive options (issue 11, SQS 6): which message attributes to fetch, and a longer
// pause after a receive refused for credentials (sqs-consumer's authenticationErrorTimeout).
// Credential errors are injected into the real client (`InvalidClientTokenId`, as SQS
// answers a rotated key); fauxqs serves everything else.

const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS receive options (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('recv');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  it('messageAttributeNames fetches only those attributes, plus the ID attribute', async () => {
    const queue = await emulator.createQueue('attrs');
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    const asked: unknown[] = [];
    faults.onCall('ReceiveMessage', (input) => {
      asked.push(input.MessageAttributeNames);
    });
    const seen: Message[] = [];
    const consumer = createSqsConsumer({
      name: 'attrs',
      broker: {
        queueUrl: queue.url,
        client: faults.client,
        waitTimeSeconds: 1,
        messageAttributeNames: ['tenant'],
      },
      store: db.store,
      logger: silentLogger,
      handler: async (message) => {
        seen.push(message);
      },
    });
    const spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await send(faults.client, queue.url, [
      { id: 'attrs-1', body: '{}', attributes: { tenant: 't1', trace: 'big-and-unused' } },
    ]);
    await spy.waitFor('processed', (e) => e.event.messageId === 'attrs-1');
    expect(asked[0]).toEqual(['tenant', 'message-id']);
    expect(seen[0]!.attributes).toEqual({ tenant: 't1', 'message-id': 'attrs-1' });
  });

  it('after a receive refused for credentials it waits authErrorBackoffMs, not 100 ms', async () => {
    const queue = await emulator.createQueue('creds');
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    faults.failNext('ReceiveMessage', 1000, 'InvalidClientTokenId');
    const consumer = createSqsConsumer({
      name: 'creds',
      // 30 s rather than the default 10 s: the yardstick below (a queue, a consumer, four
      // receives) must finish inside it, on a loaded machine too.
      broker: { queueUrl: queue.url, client: faults.client, waitTimeSeconds: 1, authErrorBackoffMs: 30_000 },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    });
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await waitFor(() => faults.injected('ReceiveMessage') > 0, { description: 'a refused receive' });
    // The yardstick is a consumer whose receives fail for another reason (throttled), started
    // only now: it pauses 200, 400, 800 ms (the backoff for network blips). Once it has
    // asked 4 times, a consumer that took a credential refusal for a blip, started earlier on
    // the same schedule, would have asked at least as often; one that waits
    // authErrorBackoffMs (30 s here) has asked once. Counted up to that point, not over a clock.
    const yardstickQueue = await emulator.createQueue('creds-yardstick');
    const yardstickFaults = faultyClient(emulator.endpoint);
    cleanups.push(() => yardstickFaults.destroy());
    yardstickFaults.failNext('ReceiveMessage', 1000, 'RequestThrottled');
    const yardstick = createSqsConsumer({
      name: 'creds-yardstick',
      broker: { queueUrl: yardstickQueue.url, client: yardstickFaults.client, waitTimeSeconds: 1 },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    });
    cleanups.push(() => yardstick.stop());
    await yardstick.start();
    await waitFor(() => yardstickFaults.injected('ReceiveMessage') >= 4, {
      timeoutMs: 20_000,
      description: 'four throttled receives of the yardstick consumer',
    });
    expect(faults.calls.get('ReceiveMessage')).toBe(1);
  });

  it('polls again after authErrorBackoffMs and picks up work once the credentials are accepted', async () => {
    const queue = await emulator.createQueue('creds-heal');
    const faults = faultyClient(emulator.endpoint);
    cleanups.push(() => faults.destroy());
    faults.failNext('ReceiveMessage', 2, 'ExpiredToken');
    const consumer = createSqsConsumer({
      name: 'creds-heal',
      broker: { queueUrl: queue.url, client: faults.client, waitTimeSeconds: 1, authErrorBackoffMs: 300 },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    });
    const spy = new ConsumerSpy().attach(consumer);
    cleanups.push(() => consumer.stop());
    await send(faults.client, queue.url, [{ id: 'heal-1', body: '{}' }]);
    await consumer.start();
    await spy.waitFor('processed', (e) => e.event.messageId === 'heal-1');
    expect(faults.injected('ReceiveMessage')).toBe(2);
  });
});
