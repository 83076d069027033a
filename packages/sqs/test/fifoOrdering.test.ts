import { CreateQueueCommand, GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import { silentLogger } from '@oncely/core';
import { ConsumerSpy, waitFor } from '@oncely/testkit';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer } from '../src/index.js';
import { CREDENTIALS, type Emulator, send, startEmulator } from './fauxqs.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// FIFO ordering per MessageGroupId with several groups in parallel, and one retry in the
// middle of a group.
//
// Emulator limit: fauxqs keeps ONE in-flight message per group (real SQS can return
// several messages of one group in one receive). On fauxqs the adapter's per-group
// serialisation of several in-flight messages of one group is therefore not reached; it
// is covered by the GroupSequencer unit test (test/GroupSequencer.test.ts), by the memory
// broker's conformance run, and here on ElasticMQ (which, like SQS, returns several
// messages of a group at once) when SQS_ELASTICMQ_ENDPOINT is set.

const GROUPS = ['g1', 'g2', 'g3', 'g4'];
const PER_GROUP = 8;

const hasPostgres = await postgresAvailable();

const elasticMqEndpoint = process.env.SQS_ELASTICMQ_ENDPOINT;

/** A FIFO queue on one SQS implementation, and a client for it. */
interface Backend {
  client: SQSClient;
  createFifoQueue(): Promise<string>;
  /** The implementation hands out several messages of one group at once (like SQS). */
  batchesGroups: boolean;
  close(): Promise<void>;
}

// SQS_ELASTICMQ_ONLY (the test command's ElasticMQ run): the fauxqs half ran in the main run.
const backends: Array<[string, () => Promise<Backend>]> = [];
if (!process.env.SQS_ELASTICMQ_ONLY) {
  backends.push([
    'fauxqs',
    async () => {
      const emulator: Emulator = await startEmulator();
      return {
        client: emulator.client,
        createFifoQueue: async () =>
          (await emulator.createQueue('order', { VisibilityTimeout: '10' }, true)).url,
        batchesGroups: false,
        close: () => emulator.stop(),
      };
    },
  ]);
}
if (elasticMqEndpoint) {
  backends.push([
    'ElasticMQ',
    async () => {
      const client = new SQSClient({
        endpoint: elasticMqEndpoint,
        region: 'us-east-1',
        credentials: CREDENTIALS,
      });
      return {
        client,
        createFifoQueue: async () => {
          const name = `order-${Date.now()}-${Math.random().toString(36).slice(2, 8)}.fifo`;
          const out = await client.send(
            new CreateQueueCommand({
              QueueName: name,
              Attributes: { FifoQueue: 'true', VisibilityTimeout: '10' },
            }),
          );
          return out.QueueUrl!;
        },
        batchesGroups: true,
        close: async () => client.destroy(),
      };
    },
  ]);
}

describe.skipIf(!hasPostgres).each(backends)(
  'SQS FIFO ordering (%s + PostgreSQL)',
  (_name, createBackend) => {
    let backend: Backend;
    let db: TestDatabase;
    let failed = false;

    beforeAll(async () => {
      backend = await createBackend();
      db = await createTestDatabase('fifo');
    });
    afterEach((ctx) => {
      if (ctx.task.result?.state === 'fail') failed = true;
    });
    afterAll(async () => {
      await db?.cleanup(failed);
      await backend?.close();
    });

    it('applies each group in publish order, one at a time, groups in parallel, across a retry', async () => {
      const queueUrl = await backend.createFifoQueue();
      // Notes receives that returned several messages of one group (the sequencer's case).
      let sameGroupBatches = 0;
      const middleware = `same-group-${queueUrl}`;
      backend.client.middlewareStack.add(
        (next, context) => async (args) => {
          const result = await next(args);
          if (context.commandName === 'ReceiveMessageCommand') {
            const groups = (
              (result.output as { Messages?: Array<{ Attributes?: Record<string, string> }> }).Messages ?? []
            ).map((m) => m.Attributes?.MessageGroupId);
            if (new Set(groups).size < groups.length) sameGroupBatches++;
          }
          return result;
        },
        { step: 'initialize', name: middleware },
      );
      const running = new Map<string, number>();
      let maxPerGroup = 0;
      let inFlight = 0;
      let maxInFlight = 0;
      let failedOnce = false;
      const consumer = createSqsConsumer({
        name: 'fifo-order',
        // Several messages per receive (the FIFO default is 1): on an implementation that
        // batches a group, the sequencer then holds the later ones of a group.
        broker: { queueUrl, client: backend.client, waitTimeSeconds: 1, maxMessages: 10 },
        store: db.store,
        concurrency: 8,
        backoff: { initialMs: 200, maxMs: 200 },
        logger: silentLogger,
        handler: async (message, ctx) => {
          const group = message.orderingKey!;
          running.set(group, (running.get(group) ?? 0) + 1);
          maxPerGroup = Math.max(maxPerGroup, running.get(group)!);
          maxInFlight = Math.max(maxInFlight, ++inFlight);
          try {
            await new Promise((resolve) => setTimeout(resolve, 20 + Math.random() * 30));
            const { seq } = message.body as { seq: number };
            await ctx.tx.query(`INSERT INTO ${db.effects}(message_id, group_key, seq) VALUES ($1, $2, $3)`, [
              message.id,
              group,
              seq,
            ]);
            // One failure in the middle of g2: the transaction rolls back and the message is
            // retried later; g2's later messages must not overtake it.
            if (group === 'g2' && seq === 3 && !failedOnce) {
              failedOnce = true;
              throw new Error('transient failure');
            }
          } finally {
            running.set(group, running.get(group)! - 1);
            inFlight--;
          }
        },
      });
      const spy = new ConsumerSpy().attach(consumer);
      const messages = [];
      for (let seq = 0; seq < PER_GROUP; seq++) {
        for (const group of GROUPS) {
          const id = `${group}-${seq}`;
          messages.push({ id, body: JSON.stringify({ seq }), group, dedup: id });
        }
      }
      await send(backend.client, queueUrl, messages);
      await consumer.start();
      try {
        await spy.waitForCount('processed', GROUPS.length * PER_GROUP, undefined, 60_000);
        const { rows } = await db.pool.query<{ group_key: string; seq: number }>(
          `SELECT group_key, seq FROM ${db.effects} ORDER BY n`,
        );
        for (const group of GROUPS) {
          const applied = rows.filter((r) => r.group_key === group).map((r) => r.seq);
          expect(applied, `order of ${group}`).toEqual(Array.from({ length: PER_GROUP }, (_, i) => i));
        }
        expect(spy.count('retried')).toBe(1);
        expect(spy.countFor('received', 'g2-3')).toBe(2);
        expect(maxPerGroup).toBe(1);
        // Groups ran in parallel.
        expect(maxInFlight).toBeGreaterThanOrEqual(2);
        // On an implementation that batches a group, the path under test was really taken.
        if (backend.batchesGroups) expect(sameGroupBatches).toBeGreaterThan(0);
        await waitFor(
          async () => {
            const out = await backend.client.send(
              new GetQueueAttributesCommand({
                QueueUrl: queueUrl,
                AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
              }),
            );
            return (
              Number(out.Attributes?.ApproximateNumberOfMessages) +
                Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible) ===
              0
            );
          },
          { description: 'every message deleted' },
        );
      } finally {
        backend.client.middlewareStack.remove(middleware);
        await consumer.stop();
      }
    }, 90_000);
  },
);
