import {
  BrokerMisconfiguredError,
  ConfigError,
  Consumer,
  isOncelyError,
  type Message,
  silentLogger,
} from '@oncely/core';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  createAdapter,
  createSqsConsumer,
  DEAD_LETTER_ATTRIBUTES,
  type SqsAdapter,
  SqsOperationError,
} from '../src/index.js';
import { drainVisible, type Emulator, heldPolls, pollOutcomes, send, startEmulator } from './fauxqs.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// Adapter behaviour on fauxqs with the real PostgreSQL store. Nothing here asserts what
// fauxqs does differently from SQS (a stale-handle DeleteMessage, several in-flight
// messages of one FIFO group).

const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS adapter (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;
  const consumers: Array<{ stop(): Promise<void> }> = [];

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('adapter');
  });
  afterEach(async (ctx) => {
    if (ctx.task.result?.state === 'fail') failed = true;
    await Promise.all(consumers.splice(0).map((c) => c.stop()));
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  const insertEffect = async (
    message: Message,
    ctx: { tx: { query(t: string, p: unknown[]): Promise<unknown> } },
  ) => {
    await ctx.tx.query(`INSERT INTO ${db.effects}(message_id) VALUES ($1)`, [message.id]);
  };

  it('maps the SQS message onto the core message (IDs, attributes, group, sequence, delivery count)', async () => {
    const queue = await emulator.createQueue('map', { VisibilityTimeout: '5' }, true);
    const seen: Message[] = [];
    let attempts = 0;
    const consumer = createSqsConsumer({
      name: 'map',
      broker: { queueUrl: queue.url, client: emulator.client, waitTimeSeconds: 1 },
      store: db.store,
      backoff: { initialMs: 100, maxMs: 100 },
      logger: silentLogger,
      handler: async (message, ctx) => {
        seen.push(message);
        if (++attempts === 1) throw new Error('first attempt fails');
        expect(ctx.attempt).toBe(2);
        await insertEffect(message, ctx);
      },
    });
    consumers.push(consumer);
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    await send(emulator.client, queue.url, [
      { id: 'map-1', body: '{"a":1}', group: 'grp', dedup: 'd-1', attributes: { tenant: 't1' } },
    ]);
    await spy.waitFor('processed', (e) => e.event.messageId === 'map-1', 15_000);
    expect(seen).toHaveLength(2);
    const [first, second] = seen as [Message, Message];
    expect(first).toMatchObject({
      id: 'map-1',
      body: { a: 1 },
      attributes: { 'message-id': 'map-1', tenant: 't1' },
      deliveryAttempt: 1,
      redelivered: false,
      orderingKey: 'grp',
      source: queue.url,
      broker: 'sqs',
    });
    expect(first.sequence).toMatch(/^\d+$/);
    expect(second).toMatchObject({ deliveryAttempt: 2, redelivered: true });
    expect((first.raw as { MessageId: string }).MessageId).toBe(
      (second.raw as { MessageId: string }).MessageId,
    );
    expect(await db.countEffects('map-1')).toBe(1);
  }, 30_000);

  it('deletes in batches after commit: every message applied once, fewer delete calls than messages', async () => {
    const queue = await emulator.createQueue('batch', { VisibilityTimeout: '10' });
    const calls = new Map<string, number>();
    // Counts the commands that reach fauxqs (instrumentation of the real client, not a mock).
    emulator.client.middlewareStack.add(
      (next, context) => async (args) => {
        calls.set(context.commandName!, (calls.get(context.commandName!) ?? 0) + 1);
        return next(args);
      },
      { step: 'initialize', name: `count-${queue.name}` },
    );
    try {
      const consumer = createSqsConsumer({
        name: 'batch',
        broker: { queueUrl: queue.url, client: emulator.client, waitTimeSeconds: 1 },
        store: db.store,
        concurrency: 10,
        logger: silentLogger,
        handler: insertEffect,
      });
      consumers.push(consumer);
      const spy = new ConsumerSpy().attach(consumer);
      const ids = Array.from({ length: 40 }, (_, i) => `batch-${i}`);
      await send(
        emulator.client,
        queue.url,
        ids.map((id) => ({ id, body: '{}' })),
      );
      await consumer.start();
      await spy.waitForCount('processed', ids.length, undefined, 20_000);
      await waitFor(() => emulator.server.inspectQueue(queue.name)?.messages.inflight.length === 0, {
        description: 'all deleted',
      });
      expect(calls.get('DeleteMessageCommand') ?? 0).toBe(0);
      expect(calls.get('DeleteMessageBatchCommand')).toBeLessThan(ids.length);
      const { rows } = await db.pool.query<{ message_id: string; n: number }>(
        `SELECT message_id, count(*)::int AS n FROM ${db.effects} WHERE message_id LIKE 'batch-%' GROUP BY 1`,
      );
      expect(rows).toHaveLength(ids.length);
      expect(rows.every((r) => r.n === 1)).toBe(true);
      expect(spy.count('ackFailed')).toBe(0);
    } finally {
      emulator.client.middlewareStack.remove(`count-${queue.name}`);
    }
  }, 30_000);

  it('dead-letters to deadLetterQueueUrl with the reason as a message attribute, then deletes', async () => {
    const dlq = await emulator.createQueue('dlq');
    const queue = await emulator.createQueue('poison', { VisibilityTimeout: '5' });
    const consumer = createSqsConsumer({
      name: 'poison',
      broker: {
        queueUrl: queue.url,
        client: emulator.client,
        waitTimeSeconds: 1,
        deadLetterQueueUrl: dlq.url,
      },
      store: db.store,
      maxAttempts: 2,
      backoff: { initialMs: 100, maxMs: 100 },
      logger: silentLogger,
      handler: async (message, ctx) => {
        if ((message.body as { fail?: boolean }).fail) throw new Error('always fails');
        await insertEffect(message, ctx);
      },
    });
    consumers.push(consumer);
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    await send(emulator.client, queue.url, [
      { id: 'p-fail', body: '{"fail":true}' },
      { body: '{"no":"id"}' },
      { id: 'p-garbage', body: 'not json' },
      { id: 'p-ok', body: '{}' },
    ]);
    await spy.waitForCount('deadLettered', 3, undefined, 20_000);
    await spy.waitFor('processed', (e) => e.event.messageId === 'p-ok');
    const copies = await drainVisible(emulator.client, dlq.url);
    const byReason = Object.fromEntries(
      copies.map((m) => [m.MessageAttributes?.[DEAD_LETTER_ATTRIBUTES.reason]?.StringValue, m]),
    );
    expect(Object.keys(byReason).sort()).toEqual(['invalid-body', 'max-attempts', 'missing-id']);
    expect(byReason['max-attempts']!.MessageAttributes?.['message-id']?.StringValue).toBe('p-fail');
    expect(byReason['max-attempts']!.Body).toBe('{"fail":true}');
    expect(
      byReason['max-attempts']!.MessageAttributes?.[DEAD_LETTER_ATTRIBUTES.detail]?.StringValue,
    ).toContain('always fails');
    expect(byReason['invalid-body']!.MessageAttributes?.['message-id']?.StringValue).toBe('p-garbage');
    await waitFor(
      () => {
        const m = emulator.server.inspectQueue(queue.name)!.messages;
        return m.ready.length + m.inflight.length + m.delayed.length === 0;
      },
      { description: 'source queue empty' },
    );
    expect(await db.countEffects('p-fail')).toBe(0);
  }, 30_000);

  it('without deadLetterQueueUrl uses the RedrivePolicy target, with the reason, before SQS redrives', async () => {
    const dlq = await emulator.createQueue('redrive-dlq');
    const queue = await emulator.createQueue('redrive', {
      VisibilityTimeout: '5',
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlq.arn, maxReceiveCount: 5 }),
    });
    const consumer = createSqsConsumer({
      name: 'redrive',
      broker: { queueUrl: queue.url, client: emulator.client, waitTimeSeconds: 1 },
      store: db.store,
      maxAttempts: 1,
      logger: silentLogger,
      handler: async () => {
        throw new Error('poison');
      },
    });
    consumers.push(consumer);
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    await send(emulator.client, queue.url, [{ id: 'r-1', body: '{}' }]);
    await spy.waitFor('deadLettered', (e) => e.event.messageId === 'r-1', 15_000);
    const copies = await drainVisible(emulator.client, dlq.url);
    expect(copies).toHaveLength(1);
    expect(copies[0]!.MessageAttributes?.[DEAD_LETTER_ATTRIBUTES.reason]?.StringValue).toBe('max-attempts');
    // Oncely dead-lettered on the first receive; SQS's redrive (5 receives) never fired.
    expect(spy.countFor('received', 'r-1')).toBe(1);
  }, 30_000);

  it("refuses idStrategy 'deduplication-id' at start on content-based dedup and on standard queues", async () => {
    const cbd = await emulator.createQueue('cbd', { ContentBasedDeduplication: 'true' }, true);
    const standard = await emulator.createQueue('std');
    const explicit = await emulator.createQueue('explicit', {}, true);
    const start = async (queueUrl: string) => {
      const consumer = createSqsConsumer({
        name: 'dedup-refusal',
        broker: { queueUrl, client: emulator.client, waitTimeSeconds: 1 },
        store: db.store,
        idStrategy: 'deduplication-id',
        logger: silentLogger,
        handler: insertEffect,
      });
      consumers.push(consumer);
      await consumer.start();
    };
    await expect(start(cbd.url)).rejects.toBeInstanceOf(BrokerMisconfiguredError);
    await expect(start(standard.url)).rejects.toSatisfy(
      (error: unknown) => error instanceof ConfigError && error.field === 'idStrategy',
    );
    await expect(start(explicit.url)).resolves.toBeUndefined();
  }, 30_000);

  it('never uses a body-derived deduplication ID as the message ID (createConsumer path, no start-time check)', async () => {
    const queue = await emulator.createQueue(
      'cbd-run',
      { ContentBasedDeduplication: 'true', VisibilityTimeout: '5' },
      true,
    );
    const dlq = await emulator.createQueue('cbd-run-dlq', {}, true);
    const broker = {
      type: 'sqs' as const,
      queueUrl: queue.url,
      client: emulator.client,
      waitTimeSeconds: 1,
      deadLetterQueueUrl: dlq.url,
    };
    // As createConsumer builds it: the adapter is not told the ID strategy.
    const consumer = new Consumer(
      {
        name: 'cbd-run',
        broker,
        store: db.store,
        idStrategy: 'deduplication-id',
        logger: silentLogger,
        handler: insertEffect,
      },
      createAdapter(broker, { consumerName: 'cbd-run', log: silentLogger }),
    );
    consumers.push(consumer);
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    await send(emulator.client, queue.url, [
      { body: '{"order":1}', group: 'a' },
      { body: '{"order":2}', group: 'b', dedup: 'explicit-2' },
    ]);
    await spy.waitFor('processed', (e) => e.event.messageId === 'explicit-2', 15_000);
    await spy.waitFor('deadLettered', (e) => e.event.reason === 'missing-id', 15_000);
    expect(await db.countEffects('explicit-2')).toBe(1);
    // Had the body hash been used as the ID, a row keyed by a 64-hex-digit ID would exist.
    const { rows } = await db.pool.query(`SELECT 1 FROM ${db.effects} WHERE message_id ~ '^[0-9a-f]{64}$'`);
    expect(rows).toHaveLength(0);
  }, 30_000);

  it('a stale receipt handle makes the settlement fail as LeaseLost (ackFailed, counted), never a second effect', async () => {
    const queue = await emulator.createQueue('stale', { VisibilityTimeout: '1' });
    let attempts = 0;
    const broker = { type: 'sqs' as const, queueUrl: queue.url, client: emulator.client, waitTimeSeconds: 1 };
    const adapter = createAdapter(broker, { consumerName: 'stale', log: silentLogger });
    const consumer = new Consumer(
      {
        name: 'stale',
        broker,
        store: db.store,
        concurrency: 2,
        leaseRenewal: false,
        backoff: { initialMs: 100, maxMs: 100 },
        logger: silentLogger,
        handler: async (message, ctx) => {
          attempts++;
          await insertEffect(message, ctx);
          if (attempts === 1) {
            // Outlive the 1 s visibility, then fail: the retry's ChangeMessageVisibility
            // meets a handle SQS no longer honours.
            await new Promise((resolve) => setTimeout(resolve, 2500));
            throw new Error('fails after its lease lapsed');
          }
        },
      },
      adapter,
    );
    consumers.push(consumer);
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    await send(emulator.client, queue.url, [{ id: 'stale-1', body: '{}' }]);
    const ackFailed = await spy.waitFor('ackFailed', (e) => e.event.messageId === 'stale-1', 15_000);
    expect(isOncelyError(ackFailed.event.error, 'LEASE_LOST')).toBe(true);
    expect((adapter as SqsAdapter).stats.staleReceipts).toBeGreaterThanOrEqual(1);
    await spy.waitFor('processed', (e) => e.event.messageId === 'stale-1', 15_000);
    expect(await db.countEffects('stale-1')).toBe(1);
  }, 30_000);

  it('a failed delete after commit is an ackFailed, not a second effect', async () => {
    const queue = await emulator.createQueue('gone', { VisibilityTimeout: '5' });
    const consumer = createSqsConsumer({
      name: 'gone',
      broker: { queueUrl: queue.url, client: emulator.client, waitTimeSeconds: 1 },
      store: db.store,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await insertEffect(message, ctx);
        // The queue disappears before the ack: DeleteMessageBatch fails as a whole.
        emulator.server.deleteQueue(queue.name);
      },
    });
    consumers.push(consumer);
    const spy = new ConsumerSpy().attach(consumer);
    await consumer.start();
    await send(emulator.client, queue.url, [{ id: 'gone-1', body: '{}' }]);
    const failure = await spy.waitFor('ackFailed', (e) => e.event.messageId === 'gone-1', 15_000);
    expect(failure.event.error).toBeInstanceOf(SqsOperationError);
    expect(spy.countFor('processed', 'gone-1')).toBe(1);
    expect(await db.countEffects('gone-1')).toBe(1);
  }, 30_000);

  it('start fails with BrokerMisconfiguredError when the queue does not exist', async () => {
    const queue = await emulator.createQueue('missing');
    emulator.server.deleteQueue(queue.name);
    const consumer = createSqsConsumer({
      name: 'missing',
      broker: { queueUrl: queue.url, client: emulator.client },
      store: db.store,
      logger: silentLogger,
      handler: insertEffect,
    });
    await expect(consumer.start()).rejects.toBeInstanceOf(BrokerMisconfiguredError);
  });

  it('stop() with abortPollOnStop aborts a 20 s long poll at once', async () => {
    const queue = await emulator.createQueue('stop', { VisibilityTimeout: '5' });
    const consumer = createSqsConsumer({
      name: 'stop',
      broker: { queueUrl: queue.url, client: emulator.client, waitTimeSeconds: 20, abortPollOnStop: true },
      store: db.store,
      logger: silentLogger,
      handler: insertEffect,
    });
    const held = heldPolls(emulator);
    const polls = pollOutcomes(emulator.client, queue.url);
    try {
      await consumer.start();
      // A ReceiveMessage read in full by fauxqs and not answered: the server holds it for
      // 20 s whatever the client does, so only the abort can end it before stop() resolves.
      // (Waiting on the queue's existence proved nothing: stop() could run before any poll
      // started.)
      await waitFor(() => held.count() >= 1, { description: 'a long poll held by fauxqs' });
      await consumer.stop();
      // The held poll ended by the client's abort, not by fauxqs' answer after 20 s (a stop()
      // that waits it out sees it 'answered'): no clock to beat, however slow the machine.
      expect(polls).not.toContain('answered');
      expect(polls.at(-1)).toBe('AbortError');
    } finally {
      emulator.client.middlewareStack.remove(`polls-${queue.name}`);
      held.close();
    }
  });
});
