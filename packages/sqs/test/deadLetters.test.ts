import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { DeadLetters, silentLogger } from '@oncely/core';
import { waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { type Emulator, send, startEmulator } from './fauxqs.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// `DeadLetters` (oncely dlq) on the fauxqs emulator and PostgreSQL: 50 dead letters for two
// reasons, listed in failure groups, one group replayed and processed once (effects
// counted from rows), a second replay a no-op, the other group discarded with a record.
const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS dead letters (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const cleanups: Array<() => Promise<void> | void> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('dlqapi');
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

  it('lists two failure groups, replays one once, no-ops the second replay, discards the other', async () => {
    const dlq = await emulator.createQueue('api-dlq');
    const queue = await emulator.createQueue('api', { VisibilityTimeout: '5' });
    const broken = { on: true };
    const config = {
      name: 'dlq-sqs',
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
      concurrency: 8,
      logger: silentLogger,
      handler: async (
        message: { id: string },
        ctx: { tx: { query(s: string, p: unknown[]): Promise<unknown> } },
      ) => {
        if (broken.on) throw new Error('payment service down');
        await ctx.tx.query(`INSERT INTO ${db.effects} (message_id) VALUES ($1)`, [message.id]);
      },
    };
    const consumer = createSqsConsumer<{ id: string }>(config);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    const failing = Array.from({ length: 25 }, (_, i) => `fail-${i}`);
    const garbled = Array.from({ length: 25 }, (_, i) => `bad-${i}`);
    await send(emulator.client, queue.url, [
      ...failing.map((id) => ({ id, body: JSON.stringify({ id }) })),
      ...garbled.map((id, i) => ({ id, body: `{"id": "${id}", broken ${i}` })),
    ]);
    await waitFor(async () => (await depth(dlq.url)) === 50, {
      timeoutMs: 60_000,
      description: '50 dead letters',
    });

    const dead = await DeadLetters.open(config);
    const { letters, groups } = await dead.list();
    expect(letters).toHaveLength(50);
    expect(groups.map((g) => [g.reason, g.count]).sort()).toEqual([
      ['invalid-body', 25],
      ['max-attempts', 25],
    ]);
    expect(letters.every((l) => l.lastFailedAt instanceof Date)).toBe(true);
    // Given back at once (visibility 0): a second listing sees all of them.
    expect((await dead.list()).letters).toHaveLength(50);

    const dry = await dead.replay({ group: 'max-attempts' }, { dryRun: true });
    expect(dry.replayed.sort()).toEqual([...failing].sort());
    expect(await depth(dlq.url)).toBe(50);

    broken.on = false;
    const replayed = await dead.replay({ group: 'max-attempts' });
    expect(replayed.replayed).toHaveLength(25);
    await waitFor(async () => (await db.countEffects()) === 25, {
      timeoutMs: 60_000,
      description: '25 effects',
    });
    for (const id of failing) expect(await db.countEffects(id)).toBe(1);
    expect(await depth(dlq.url)).toBe(25);

    expect(await dead.replay({ group: 'max-attempts' })).toMatchObject({
      replayed: [],
      alreadyProcessed: [],
    });
    const discarded = await dead.discard({ group: 'invalid-body' }, { by: 'tester' });
    expect(discarded.discarded).toHaveLength(25);
    expect(await depth(dlq.url)).toBe(0);
    expect(await db.store.deadLetterLog!.discards('dlq-sqs', 'bad-3')).toMatchObject([
      { reason: 'invalid-body', discardedBy: 'tester' },
    ]);
    await waitFor(async () => (await depth(queue.url)) === 0, {
      timeoutMs: 30_000,
      description: 'the queue drained',
    });
    expect(await db.countEffects()).toBe(25);
  }, 120_000);
});
