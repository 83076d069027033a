import { randomUUID } from 'node:crypto';
import { ServiceBusClient } from '@azure/service-bus';
import { publishInTransaction, silentLogger } from '@oncely/core';
import { type ServiceBusEmulator, startServiceBusEmulator } from '@oncely/emulators/servicebus';
import { createRelay, PostgresStore } from '@oncely/postgres';
import { ConsumerSpy } from '@oncely/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServiceBusConsumer, createServiceBusProducer } from '../src/index.js';
import { DATABASE_URL, postgresAvailable } from './support.js';

// A relay sends rows below the cluster-wide snapshot xmin: any open transaction on the
// shared server (other suites run beside this one) holds new rows back while it lasts. So
// waits on the relay's sends are bounded against a hang only (CI of 5e3adf7: 0 of 12 rows
// arrived within the 10 s default, under load 15-30).
const RELAY_BOUND_MS = 150_000;

// The outbox producer on the Oncely Service Bus emulator: the row's ID as messageId (the
// default 'producer' ID strategy), so a consumer with default settings skips the relay's
// duplicates.

const hasPostgres = await postgresAvailable();
let emulator: ServiceBusEmulator;
let client: ServiceBusClient;

beforeAll(async () => {
  emulator = await startServiceBusEmulator({ port: 0 });
  client = new ServiceBusClient(emulator.connectionString);
});
afterAll(async () => {
  await client?.close();
  await emulator?.stop();
});

describe.skipIf(!hasPostgres)('Service Bus outbox producer (emulator + PostgreSQL)', () => {
  it('a default consumer reads the row ID; a re-sent row is a duplicate', {
    timeout: RELAY_BOUND_MS + 60_000,
  }, async () => {
    const tag = randomUUID().replaceAll('-', '').slice(0, 10);
    const schema = `oncely_sb_outbox_${tag}`;
    const queue = `outbox-${tag}`;
    emulator.createQueue(queue, { LockDuration: 'PT5S' });
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    await pool.query(`CREATE TABLE "${schema}".effects (id text, body text, kind text)`);
    const consumer = createServiceBusConsumer({
      name: 'receiver',
      broker: { connectionString: emulator.connectionString, queueName: queue, maxWaitTimeMs: 300 },
      store,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await ctx.tx.query(`INSERT INTO "${schema}".effects (id, body, kind) VALUES ($1, $2, $3)`, [
          message.id,
          JSON.stringify(message.body),
          message.attributes.kind ?? null,
        ]);
      },
    });
    const spy = new ConsumerSpy().attach(consumer);
    const producer = createServiceBusProducer({ client });
    const relay = createRelay({ store, producers: producer, pollIntervalMs: 100, logger: silentLogger });
    try {
      await store.transaction(async (tx) => {
        await publishInTransaction(
          store,
          tx,
          queue,
          { n: 1 },
          { id: `${tag}-1`, attributes: { kind: 'payment' } },
        );
        await publishInTransaction(store, tx, queue, { n: 2 }, { id: `${tag}-2` });
      });
      await consumer.start();
      await relay.start();
      await spy.waitForCount('processed', 2, undefined, RELAY_BOUND_MS);
      const { rows } = await pool.query(`SELECT id, body, kind FROM "${schema}".effects ORDER BY id`);
      expect(rows).toEqual([
        { id: `${tag}-1`, body: '{"n":1}', kind: 'payment' },
        { id: `${tag}-2`, body: '{"n":2}', kind: null },
      ]);
      await store.transaction((tx) =>
        tx.query(`UPDATE "${schema}".outbox SET status = 'pending' WHERE id = $1`, [`${tag}-1`]),
      );
      await spy.waitFor('duplicate', (e) => e.event.messageId === `${tag}-1`, RELAY_BOUND_MS);
      expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".effects`)).rows[0].n).toBe(2);
    } finally {
      await relay.stop();
      await producer.close();
      await consumer.stop();
      await store.close();
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
      await pool.end();
    }
  });
  it('a batch too large as a whole is split: 60 rows of 10 KiB that each fit alone are all sent', async () => {
    const queue = `outbox-big-${randomUUID().replaceAll('-', '').slice(0, 10)}`;
    emulator.createQueue(queue, { LockDuration: 'PT5S' });
    const producer = createServiceBusProducer({ client });
    try {
      const body = new TextEncoder().encode('x'.repeat(10 * 1024));
      const messages = Array.from({ length: 60 }, (_, i) => ({
        id: `big-${i}`,
        destination: queue,
        body,
        attributes: {},
        attempt: 1,
      }));
      const results = await producer.send(messages);
      expect(results.map((r) => (r.ok ? 'ok' : String((r as { error: unknown }).error)))).toEqual(
        Array(60).fill('ok'),
      );
      const receiver = client.createReceiver(queue, { receiveMode: 'receiveAndDelete' });
      const ids = new Set<string>();
      const deadline = Date.now() + 20_000;
      while (ids.size < 60 && Date.now() < deadline) {
        for (const m of await receiver.receiveMessages(60, { maxWaitTimeInMs: 500 }))
          ids.add(String(m.messageId));
      }
      await receiver.close();
      expect(ids.size).toBe(60);
    } finally {
      await producer.close();
    }
  });
});
