import { publishInTransaction, silentLogger } from '@oncely/core';
import { createRelay } from '@oncely/postgres';
import { createRabbitMqConsumer, createRabbitMqProducer } from '@oncely/rabbitmq';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  connectionCount,
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
// A relay sends unkeyed rows only once below the cluster-wide snapshot xmin: any open write
// transaction on the shared server (other suites run beside this one; the consumer_timeout
// run holds one about 60 s by design) holds them back while it lasts. So the wait on the
// relay's sends is bounded against a hang only (it was the helpers' 15 s default).
const RELAY_BOUND_MS = 150_000;

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

  it('a default consumer receives the row ID; a re-sent row is a duplicate; an unroutable one fails', {
    timeout: RELAY_BOUND_MS + 60_000,
  }, async () => {
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
        RELAY_BOUND_MS,
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
  it('a missing exchange fails only its own rows; the channel reopens on the same connection', async () => {
    const queue = unique('outbox-healthy');
    const name = unique('producer-conn');
    const ch = await raw.freshChannel();
    await ch.assertQueue(queue, { durable: false });
    await ch.close();
    const producer = createRabbitMqProducer({
      url: RABBITMQ_URL,
      connectionName: name,
      target: (m) =>
        m.destination === 'missing' ? { exchange: unique('no-such-exchange'), routingKey: 'x' } : { queue },
    });
    try {
      const message = (id: string, destination: string) => ({
        id,
        destination,
        body: Buffer.from('{}'),
        attributes: {},
        attempt: 1,
      });
      for (let round = 0; round < 3; round++) {
        const batch = [
          message(`bad-${round}`, 'missing'),
          ...Array.from({ length: 10 }, (_, i) => message(`ok-${round}-${i}`, queue)),
        ];
        const results = await producer.send(batch);
        expect(results[0]!.ok).toBe(false);
        expect(results.slice(1).map((r) => r.ok)).toEqual(Array(10).fill(true));
      }
      expect(await raw.ready(queue)).toBe(30);
      expect(await connectionCount(name)).toBe(1);
      await producer.close();
      await waitFor(async () => (await connectionCount(name)) === 0, 'the producer connection to close');
    } finally {
      await producer.close();
      await raw.deleteQueues(queue);
    }
  });
  // #26 D7 and D8: what a row's last error says, and whether it is retried.
  const message = (id: string, destination: string) => ({
    id,
    destination,
    body: Buffer.from('{}'),
    attributes: {},
    attempt: 1,
  });

  it("a missing exchange's failure keeps the broker's 404 NOT_FOUND reason", async () => {
    const exchange = unique('no-such-exchange');
    const producer = createRabbitMqProducer({
      url: RABBITMQ_URL,
      target: () => ({ exchange, routingKey: 'x' }),
    });
    try {
      const [missing] = await producer.send([message('to-missing', 'missing')]);
      expect(missing!.ok).toBe(false);
      const reason = String((missing as { error: unknown }).error);
      expect(reason).toMatch(/404/);
      expect(reason).toMatch(/NOT_FOUND/);
      expect(reason).toContain(exchange);
    } finally {
      await producer.close();
    }
  });

  it('an ID over 255 bytes (the AMQP cap on messageId) fails permanently at once; 255 bytes is sent', async () => {
    const queue = unique('outbox-limits');
    const ch = await raw.freshChannel();
    await ch.assertQueue(queue, { durable: false });
    await ch.close();
    const producer = createRabbitMqProducer({ url: RABBITMQ_URL });
    try {
      // 'é' is two bytes in UTF-8: 128 of them are 256 bytes in 128 characters.
      const [tooLong, tooLongBytes, fits] = await producer.send([
        message('x'.repeat(256), queue),
        message('é'.repeat(128), queue),
        message('y'.repeat(255), queue),
      ]);
      expect(tooLong).toMatchObject({ ok: false, permanent: true });
      expect(String((tooLong as { error: unknown }).error)).toMatch(/255 bytes/);
      expect(tooLongBytes).toMatchObject({ ok: false, permanent: true });
      expect(fits).toEqual({ ok: true });
      expect(await raw.ready(queue)).toBe(1);
    } finally {
      await producer.close();
      await raw.deleteQueues(queue);
    }
  });

  it('a queue or routing key over 255 bytes fails permanently at once, alone', async () => {
    const queue = unique('outbox-limits');
    const ch = await raw.freshChannel();
    await ch.assertQueue(queue, { durable: false });
    await ch.close();
    const producer = createRabbitMqProducer({ url: RABBITMQ_URL });
    try {
      // The routing key is an AMQP short string too: amqplib refuses the frame on every
      // attempt, so it was retried maxAttempts times before being dead-lettered.
      const [longQueue, fits] = await producer.send([
        message('long-q', 'q'.repeat(256)),
        message('fits', queue),
      ]);
      expect(longQueue).toMatchObject({ ok: false, permanent: true });
      expect(String((longQueue as { error: unknown }).error)).toMatch(/255 bytes/);
      expect(fits).toEqual({ ok: true });
      expect(await raw.ready(queue)).toBe(1);
    } finally {
      await producer.close();
      await raw.deleteQueues(queue);
    }
  });

  it("a message over the broker's max size fails alone, permanently; the rows beside it on its channel are sent", async () => {
    const queues = [unique('outbox-size'), unique('outbox-size'), unique('outbox-size')];
    const ch = await raw.freshChannel();
    for (const queue of queues) await ch.assertQueue(queue, { durable: false });
    await ch.close();
    const producer = createRabbitMqProducer({ url: RABBITMQ_URL });
    try {
      // 130 MiB: over RabbitMQ's default max_message_size (128 MiB in 3.x, 16 MiB in 4.x).
      // The broker closes the whole channel (406 PRECONDITION_FAILED): every queue sent
      // through the default exchange shares it, so the rows beside the big one failed
      // with it on every retry of the big one, until they were dead-lettered.
      const big = { ...message('big', queues[1]!), body: Buffer.alloc(130 * 1024 * 1024) };
      const results = await producer.send([message('a', queues[0]!), big, message('c', queues[2]!)]);
      expect(results[1]).toMatchObject({ ok: false, permanent: true });
      expect(String((results[1] as { error: unknown }).error)).toMatch(/PRECONDITION_FAILED/);
      expect([results[0], results[2]]).toEqual([{ ok: true }, { ok: true }]);
      expect(await raw.ready(queues[0]!)).toBe(1);
      expect(await raw.ready(queues[2]!)).toBe(1);
      // Known now: the next one over it fails before publishing, and costs no channel.
      const [again, beside] = await producer.send([{ ...big, id: 'big-2' }, message('d', queues[0]!)]);
      expect(again).toMatchObject({ ok: false, permanent: true });
      expect(beside).toEqual({ ok: true });
    } finally {
      await producer.close();
      await raw.deleteQueues(...queues);
    }
  });
});
