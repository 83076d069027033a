import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { DeadLetters, type IdStrategy, type Message, silentLogger } from '@oncely/core';
import { waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { drainVisible, type Emulator, send, startEmulator } from './fauxqs.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// Hostile review of `oncely dlq replay` on SQS (fauxqs + PostgreSQL): a FIFO replay keeps the
// message group, the attributes and the ID the consumer saw; a poison message replayed goes
// back to the DLQ with its reason, once.
const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS dead-letter replay fidelity (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('dlqfid');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  async function depth(url: string): Promise<number> {
    const out = await emulator.client.send(
      new GetQueueAttributesCommand({
        QueueUrl: url,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
      }),
    );
    return (
      Number(out.Attributes?.ApproximateNumberOfMessages) +
      Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible)
    );
  }

  async function fifoRoundTrip(name: string, idStrategy?: IdStrategy) {
    const dlq = await emulator.createQueue(`${name}-dlq`, {}, true);
    const queue = await emulator.createQueue(name, { VisibilityTimeout: '5' }, true);
    const broken = { on: true };
    const seen: Message[] = [];
    const config = {
      name: `dlqfid-${name}`,
      broker: {
        type: 'sqs' as const,
        queueUrl: queue.url,
        client: emulator.client,
        waitTimeSeconds: 1,
        deadLetterQueueUrl: dlq.url,
      },
      ...(idStrategy ? { idStrategy } : {}),
      store: db.store,
      maxAttempts: 2,
      backoff: { initialMs: 10, maxMs: 20 },
      logger: silentLogger,
      handler: async (message: Message) => {
        if (broken.on) throw new Error('down');
        seen.push(message);
      },
    };
    const consumer = createSqsConsumer(config as never);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await send(emulator.client, queue.url, [
      { id: 'm-a', body: '{"n":"a"}', group: 'g-a', dedup: 'd-a', attributes: { tenant: 't-a' } },
      { id: 'm-b', body: '{"n":"b"}', group: 'g-b', dedup: 'd-b', attributes: { tenant: 't-b' } },
    ]);
    await waitFor(async () => (await depth(dlq.url)) === 2, {
      timeoutMs: 60_000,
      description: '2 dead letters',
    });
    const dead = await DeadLetters.open(config as never);
    const listed = (await dead.list()).letters.map((l) => l.messageId).sort();
    broken.on = false;
    await dead.replay({});
    await waitFor(() => seen.length === 2, { timeoutMs: 60_000, description: 'both replayed and handled' });
    return { listed, seen: seen.sort((x, y) => x.id.localeCompare(y.id)) };
  }

  it('FIFO, default ID strategy: the replay keeps the ID, the group and the attributes', async () => {
    const { listed, seen } = await fifoRoundTrip('fid');
    expect(listed).toEqual(['m-a', 'm-b']);
    expect(seen.map((m) => [m.id, m.orderingKey, m.attributes.tenant])).toEqual([
      ['m-a', 'g-a', 't-a'],
      ['m-b', 'g-b', 't-b'],
    ]);
  }, 120_000);

  // Was a defect: the dead-lettered FIFO copy's MessageDeduplicationId is the source
  // MessageId and the replay's the DLQ copy's, so the original deduplication ID was lost
  // (`list` showed no IDs, the consumer a new one). It now travels in oncely-deduplication-id.
  it("FIFO, idStrategy 'deduplication-id': list shows the IDs and the consumer sees them again", async () => {
    const { listed, seen } = await fifoRoundTrip('fdd', 'deduplication-id');
    expect(listed).toEqual(['d-a', 'd-b']);
    expect(seen.map((m) => m.id)).toEqual(['d-a', 'd-b']);
  }, 120_000);

  it('a poison message replayed goes back to the DLQ with its reason, once, and nothing is lost', async () => {
    const dlq = await emulator.createQueue('poison-dlq');
    const queue = await emulator.createQueue('poison', { VisibilityTimeout: '5' });
    const config = {
      name: 'dlqfid-poison',
      broker: {
        type: 'sqs' as const,
        queueUrl: queue.url,
        client: emulator.client,
        waitTimeSeconds: 1,
        deadLetterQueueUrl: dlq.url,
      },
      store: db.store,
      maxAttempts: 2,
      backoff: { initialMs: 10, maxMs: 20 },
      logger: silentLogger,
      handler: async () => {},
    };
    const consumer = createSqsConsumer(config as never);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    await send(emulator.client, queue.url, [{ id: 'p-1', body: '{not json' }, { body: '{"no":"id"}' }]);
    await waitFor(async () => (await depth(dlq.url)) === 2, {
      timeoutMs: 60_000,
      description: '2 dead letters',
    });
    const dead = await DeadLetters.open(config as never);
    const before = (await dead.list()).letters.map((l) => [l.messageId ?? null, l.reason]).sort();
    expect(before).toEqual([
      [null, 'missing-id'],
      ['p-1', 'invalid-body'],
    ]);
    const report = await dead.replay({});
    expect(report).toMatchObject({ replayed: ['p-1'], withoutId: 1 });
    await waitFor(async () => (await depth(dlq.url)) === 2 && (await depth(queue.url)) === 0, {
      timeoutMs: 60_000,
      description: 'both back in the DLQ, the queue empty',
    });
    const after = (await dead.list()).letters.map((l) => [l.messageId ?? null, l.reason]).sort();
    expect(after).toEqual(before);
  }, 120_000);

  it('two operators replaying at once: each dead letter is back in the queue once', async () => {
    const dlq = await emulator.createQueue('two-dlq');
    const queue = await emulator.createQueue('two');
    const ids = Array.from({ length: 60 }, (_, i) => `two-${i}`);
    await send(
      emulator.client,
      dlq.url,
      ids.map((id) => ({ id, body: '{}', attributes: { 'oncely-dead-letter-reason': 'max-attempts' } })),
    );
    const config = {
      name: 'dlqfid-two',
      broker: {
        type: 'sqs' as const,
        queueUrl: queue.url,
        client: emulator.client,
        deadLetterQueueUrl: dlq.url,
      },
      store: db.store,
      logger: silentLogger,
      handler: async () => {},
    };
    const dead = await DeadLetters.open(config as never);
    const [a, b] = await Promise.all([dead.replay({}), dead.replay({})]);
    expect(a.replayed.length + b.replayed.length).toBe(60);
    expect(await depth(dlq.url)).toBe(0);
    const back = (await drainVisible(emulator.client, queue.url)).map(
      (m) => m.MessageAttributes?.['message-id']?.StringValue,
    );
    expect(back.sort()).toEqual([...ids].sort());
  }, 120_000);
});
