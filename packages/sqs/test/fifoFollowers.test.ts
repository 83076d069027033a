import { CreateQueueCommand, SQSClient } from '@aws-sdk/client-sqs';
import { type Message, silentLogger } from '@oncely/core';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { CREDENTIALS, send } from './fauxqs.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// FIFO followers must not churn (issue 11, SQS 1). SQS (and ElasticMQ) can return several
// messages of one group in one receive. When the first is retried, the ones behind it
// cannot be held: SQS keeps the whole group blocked while any of its messages is in
// flight, so the retried one would never come back. They had to be released and
// received again, each time one more `ApproximateReceiveCount`: healthy messages
// reached SQS's maxReceiveCount (and, with today's attempt rule, maxAttempts) early.
// The adapter now takes one message per receive on FIFO queues by default.
//
// Runs only on ElasticMQ (SQS_ELASTICMQ_ENDPOINT, see scripts/elasticmq-conformance.sh):
// fauxqs hands out one in-flight message per group, so it never shows the case.

const endpoint = process.env.SQS_ELASTICMQ_ENDPOINT;
const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres || !endpoint)(
  `SQS FIFO followers of a retried message (ElasticMQ + PostgreSQL)${endpoint ? '' : ': skipped, SQS_ELASTICMQ_ENDPOINT is not set (scripts/elasticmq-conformance.sh sets it)'}`,
  () => {
    let client: SQSClient;
    let db: TestDatabase;
    let failed = false;
    const cleanups: Array<() => Promise<void> | void> = [];

    beforeAll(async () => {
      client = new SQSClient({ endpoint, region: 'us-east-1', credentials: CREDENTIALS });
      db = await createTestDatabase('follow');
    });
    afterEach(async (ctx) => {
      if (ctx.task.result?.state === 'fail') failed = true;
      for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
    });
    afterAll(async () => {
      await db?.cleanup(failed);
      client?.destroy();
    });

    it('a retried head does not raise the receive count of the messages behind it', async () => {
      const name = `follow-${Date.now()}-${Math.random().toString(36).slice(2, 8)}.fifo`;
      const { QueueUrl } = await client.send(
        new CreateQueueCommand({
          QueueName: name,
          Attributes: { FifoQueue: 'true', VisibilityTimeout: '10' },
        }),
      );
      const queueUrl = QueueUrl!;
      const ids = ['f1', 'f2', 'f3', 'f4'];
      await send(
        client,
        queueUrl,
        ids.map((id) => ({ id, body: JSON.stringify({ id }), group: 'g', dedup: id })),
      );
      const seen: Array<{ id: string; attempt: number | undefined }> = [];
      let failures = 0;
      const consumer = createSqsConsumer({
        name: 'follow',
        broker: { queueUrl, client, waitTimeSeconds: 1 },
        store: db.store,
        // Room for several messages at once, as a FIFO consumer running many groups has.
        concurrency: 10,
        maxAttempts: 10,
        backoff: { initialMs: 1000, maxMs: 1000 },
        logger: silentLogger,
        handler: async (message: Message, ctx) => {
          seen.push({ id: message.id, attempt: message.deliveryAttempt });
          // The head fails twice, then succeeds.
          if (message.id === 'f1' && failures++ < 2) throw new Error('head fails');
          await ctx.tx.query(`INSERT INTO ${db.effects}(message_id) VALUES ($1)`, [message.id]);
        },
      });
      const spy = new ConsumerSpy().attach(consumer);
      cleanups.push(() => consumer.stop());
      await consumer.start();
      await waitFor(() => ids.every((id) => spy.countFor('processed', id) === 1), {
        timeoutMs: 30_000,
        description: 'all four processed',
      });
      // In order, and every message behind the head handled on its first receive.
      expect(seen.filter((s) => s.id !== 'f1')).toEqual([
        { id: 'f2', attempt: 1 },
        { id: 'f3', attempt: 1 },
        { id: 'f4', attempt: 1 },
      ]);
      expect(seen.filter((s) => s.id === 'f1').map((s) => s.attempt)).toEqual([1, 2, 3]);
      expect(spy.count('released')).toBe(0);
    }, 40_000);

    it('with maxMessages 10, messages waiting behind their group do not starve the polls of other groups', async () => {
      const name = `starve-${Date.now()}-${Math.random().toString(36).slice(2, 8)}.fifo`;
      const { QueueUrl } = await client.send(
        new CreateQueueCommand({
          QueueName: name,
          Attributes: { FifoQueue: 'true', VisibilityTimeout: '10' },
        }),
      );
      const queueUrl = QueueUrl!;
      // Group a first: one receive takes a1 and a2 (a2 waits behind a1).
      await send(
        client,
        queueUrl,
        ['a1', 'a2'].map((id) => ({ id, body: '{}', group: 'a', dedup: id })),
      );
      await send(client, queueUrl, [{ id: 'b1', body: '{}', group: 'b', dedup: 'b1' }]);
      let spy: ConsumerSpy | undefined;
      const order: string[] = [];
      const consumer = createSqsConsumer({
        name: 'starve',
        broker: { queueUrl, client, waitTimeSeconds: 1, maxMessages: 10 },
        store: db.store,
        concurrency: 2,
        logger: silentLogger,
        handler: async (message) => {
          // a1 needs b1 done first: with a2 holding the second slot, b1 would never be polled.
          if (message.id === 'a1') {
            await spy!.waitFor('processed', (e) => e.event.messageId === 'b1', 8000).catch(() => {});
          }
          order.push(message.id);
        },
      });
      spy = new ConsumerSpy().attach(consumer);
      cleanups.push(() => consumer.stop());
      await consumer.start();
      await waitFor(() => ['a1', 'a2', 'b1'].every((id) => spy!.countFor('processed', id) === 1), {
        timeoutMs: 30_000,
        description: 'all three processed',
      });
      expect(order).toEqual(['b1', 'a1', 'a2']);
    }, 40_000);
  },
);
