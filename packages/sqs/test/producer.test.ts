import { publishInTransaction, silentLogger } from '@oncely/core';
import { createRelay, type PostgresStore } from '@oncely/postgres';
import { ConsumerSpy } from '@oncely/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSqsConsumer, createSqsProducer } from '../src/index.js';
import { drainVisible, type Emulator, startEmulator } from './fauxqs.js';
import { createTestDatabase, postgresAvailable, type TestDatabase } from './support.js';

// A relay sends rows below the cluster-wide snapshot xmin: any open transaction on the
// shared server (other suites run beside this one) holds new rows back while it lasts. So
// waits on the relay's sends are bounded against a hang only (CI of 5e3adf7: 0 of 12 rows
// arrived within the 10 s default, under load 15-30).
const RELAY_BOUND_MS = 150_000;

// The outbox producer on fauxqs: SendMessageBatch with the row's ID in the `message-id`
// attribute, so a consumer with default settings dedups the relay's duplicates.

const hasPostgres = await postgresAvailable();

describe.skipIf(!hasPostgres)('SQS outbox producer (fauxqs + PostgreSQL)', () => {
  let emulator: Emulator;
  let db: TestDatabase;
  let failed = false;

  beforeAll(async () => {
    emulator = await startEmulator();
    db = await createTestDatabase('producer');
  });
  afterAll(async () => {
    await db?.cleanup(failed);
    await emulator?.stop();
  });

  it('a default consumer reads the row ID; more than 10 rows go out in batches; a re-sent row is a duplicate', {
    timeout: RELAY_BOUND_MS + 60_000,
  }, async () => {
    try {
      const store = db.store as PostgresStore;
      const queue = await emulator.createQueue('outbox', { VisibilityTimeout: '5' });
      await store.transaction(async (tx) => {
        for (let i = 1; i <= 12; i++) {
          await publishInTransaction(
            store,
            tx,
            queue.name,
            { n: i },
            { id: `row-${i}`, attributes: { tenant: 't1' } },
          );
        }
      });
      const relay = createRelay({
        store,
        producers: createSqsProducer({ client: emulator.client }),
        logger: silentLogger,
      });
      const consumer = createSqsConsumer({
        name: 'outbox-receiver',
        broker: { queueUrl: queue.url, client: emulator.client, waitTimeSeconds: 1 },
        store,
        concurrency: 4,
        logger: silentLogger,
        handler: async (message, ctx) => {
          expect(message.attributes.tenant).toBe('t1');
          await ctx.tx.query(`INSERT INTO ${db.effects}(message_id, seq) VALUES ($1, $2)`, [
            message.id,
            (message.body as { n: number }).n,
          ]);
        },
      });
      const spy = new ConsumerSpy().attach(consumer);
      await consumer.start();
      await relay.start();
      try {
        await spy.waitForCount('processed', 12, undefined, RELAY_BOUND_MS);
        for (let i = 1; i <= 12; i++) expect(await db.countEffects(`row-${i}`)).toBe(1);
        // The relay's duplicate, as after a crash before its mark: the same ID again.
        await store.transaction((tx) =>
          tx.query(`UPDATE "${store.schema}".outbox SET status = 'pending' WHERE id = 'row-3'`),
        );
        await spy.waitFor('duplicate', (e) => e.event.messageId === 'row-3', RELAY_BOUND_MS);
        expect(await db.countEffects()).toBe(12);
      } finally {
        await relay.stop();
        await consumer.stop();
      }
    } catch (error) {
      failed = true;
      throw error;
    }
  });

  it('FIFO: the key is the group; a FIFO row without a key is dead-lettered', {
    timeout: RELAY_BOUND_MS + 60_000,
  }, async () => {
    try {
      const store = db.store as PostgresStore;
      const queue = await emulator.createQueue('outbox', {}, true);
      await store.transaction(async (tx) => {
        await publishInTransaction(store, tx, queue.url, 'a', { id: 'fifo-1', key: 'customer-1' });
        await publishInTransaction(store, tx, queue.url, 'b', { id: 'fifo-2' });
      });
      const dead: string[] = [];
      const relay = createRelay({
        store,
        producers: createSqsProducer({ client: emulator.client }),
        logger: silentLogger,
      });
      relay.on('deadLettered', (event) => dead.push(event.id));
      // fifo-2 is unkeyed (that is the point), so it waits for the cluster-wide xmin: bounded
      // against a hang only, like the waits above.
      const deadline = Date.now() + RELAY_BOUND_MS;
      while ((await store.outbox.stats()).pending > 0) {
        if (Date.now() > deadline) throw new Error(`rows still pending after ${RELAY_BOUND_MS / 1000} s`);
        const round = await relay.runOnce();
        if (round.claimed === 0) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(dead).toEqual(['fifo-2']);
      const copies = await drainVisible(emulator.client, queue.url);
      expect(
        copies.map((m) => [m.MessageAttributes?.['message-id']?.StringValue, m.Attributes?.MessageGroupId]),
      ).toEqual([['fifo-1', 'customer-1']]);
      expect((await store.outbox.stuck()).find((row) => row.id === 'fifo-2')?.lastError).toContain('groupId');
    } catch (error) {
      failed = true;
      throw error;
    }
  });
  it('a batch too large as a whole is split: 10 rows of 200 KiB that each fit alone are all sent', async () => {
    try {
      const queue = await emulator.createQueue('outbox-big', { VisibilityTimeout: '5' });
      const producer = createSqsProducer({ client: emulator.client });
      const body = new TextEncoder().encode('x'.repeat(200 * 1024));
      const messages = Array.from({ length: 10 }, (_, i) => ({
        id: `big-${i}`,
        destination: queue.url,
        body,
        attributes: {},
        attempt: 1,
      }));
      const results = await producer.send(messages);
      expect(results.map((r) => (r.ok ? 'ok' : String((r as { error: unknown }).error)))).toEqual(
        Array(10).fill('ok'),
      );
      const received = await drainVisible(emulator.client, queue.url);
      expect(received.length).toBe(10);
    } catch (error) {
      failed = true;
      throw error;
    }
  });
});
