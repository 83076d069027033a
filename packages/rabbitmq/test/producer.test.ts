import { publishInTransaction, silentLogger } from '@oncely/core';
import { createRelay } from '@oncely/postgres';
import { createRabbitMqConsumer, createRabbitMqProducer } from '@oncely/rabbitmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createTestStore,
  deleteTopology,
  RABBITMQ_URL,
  type RawBroker,
  rawBroker,
  servicesAvailable,
  type TestStore,
  unique,
  waitFor,
} from './helpers.js';

// The outbox producer against the real broker: the relay publishes each row with its ID
// where a consumer with default settings reads it, so the relay's duplicates are skipped.
const available = await servicesAvailable();

describe.skipIf(!available)('RabbitMQ outbox producer (real RabbitMQ + PostgreSQL)', () => {
  let raw: RawBroker;
  let db: TestStore;

  beforeAll(async () => {
    raw = await rawBroker();
    db = await createTestStore();
  });
  afterAll(async () => {
    await db?.cleanup();
    await raw?.close();
  });

  it('a default consumer receives the row ID; a re-sent row is a duplicate; an unroutable one fails', async () => {
    const queue = unique('outbox');
    const seen: Array<{ id: string; body: unknown; attributes: Record<string, string> }> = [];
    const consumer = createRabbitMqConsumer({
      name: `c-${queue}`,
      store: db.store,
      logger: silentLogger,
      broker: { url: RABBITMQ_URL, queue },
      handler: async (message, ctx) => {
        seen.push({ id: message.id, body: message.body, attributes: { ...message.attributes } });
        await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
      },
    });
    let duplicates = 0;
    consumer.on('duplicate', () => duplicates++);
    await consumer.start();
    const producer = createRabbitMqProducer({ url: RABBITMQ_URL });
    const relay = createRelay({
      store: db.store,
      producers: producer,
      pollIntervalMs: 100,
      logger: silentLogger,
    });
    try {
      await db.store.transaction(async (tx) => {
        await publishInTransaction(
          db.store,
          tx,
          queue,
          { n: 1 },
          { id: `${queue}-1`, attributes: { kind: 'payment' } },
        );
        await publishInTransaction(db.store, tx, queue, { n: 2 }, { id: `${queue}-2`, key: 'k' });
        await publishInTransaction(db.store, tx, `${queue}-missing`, { n: 3 }, { id: `${queue}-unroutable` });
      });
      const failed: string[] = [];
      relay.on('failed', (event) => failed.push(event.id));
      await relay.start();
      await waitFor(
        async () => (await db.effectCount()) === 2 && failed.length > 0,
        'two effects and one failed send',
      );
      expect(seen.map((m) => m.id).sort()).toEqual([`${queue}-1`, `${queue}-2`]);
      expect(seen.find((m) => m.id === `${queue}-1`)).toMatchObject({
        body: { n: 1 },
        attributes: { kind: 'payment' },
      });
      expect(failed[0]).toBe(`${queue}-unroutable`);

      // The relay's duplicate (a crash before its mark looks like this): the same ID again.
      await db.store.transaction((tx) =>
        tx.query(`UPDATE "${db.schema}".outbox SET status = 'pending' WHERE id = $1`, [`${queue}-1`]),
      );
      await waitFor(async () => duplicates === 1, 'the re-sent row to arrive as a duplicate');
      expect(await db.effects()).toEqual(
        new Map([
          [`${queue}-1`, 1],
          [`${queue}-2`, 1],
        ]),
      );
    } finally {
      await relay.stop();
      await producer.close();
      await consumer.stop();
      await deleteTopology(raw, queue);
    }
  });
});
