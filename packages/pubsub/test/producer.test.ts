import { randomUUID } from 'node:crypto';
import type { PubSub } from '@google-cloud/pubsub';
import { createConsumer, publishInTransaction, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { createRelay, PostgresStore } from '@oncely/postgres';
import { createPubSubProducer } from '@oncely/pubsub';
import { ConsumerSpy } from '@oncely/testkit';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClient, DATABASE_URL, PROJECT, postgresAvailable, startEmulator } from './support.js';

// A relay sends rows below the cluster-wide snapshot xmin: any open transaction on the
// shared server (other suites run beside this one) holds new rows back while it lasts. So
// waits on the relay's sends are bounded against a hang only (CI of 5e3adf7: 0 of 12 rows
// arrived within the 10 s default, under load 15-30).
const RELAY_BOUND_MS = 150_000;

// The outbox producer on the Oncely Pub/Sub emulator: the row's ID in the `message-id`
// attribute (the default ID strategy), the key as the ordering key.

const hasPostgres = await postgresAvailable();
let emulator: PubSubEmulator;
let pubsub: PubSub;

beforeAll(async () => {
  emulator = await startEmulator();
  pubsub = adminClient(emulator);
});
afterAll(async () => {
  await pubsub.close();
  await emulator.stop();
});

describe.skipIf(!hasPostgres)('Pub/Sub outbox producer (emulator + PostgreSQL)', () => {
  it('a default consumer reads the row ID and the ordering key; a re-sent row is a duplicate', {
    timeout: RELAY_BOUND_MS + 60_000,
  }, async () => {
    const tag = randomUUID().replaceAll('-', '').slice(0, 10);
    const schema = `oncely_pubsub_outbox_${tag}`;
    const store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
    await store.migrate();
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    await pool.query(`CREATE TABLE "${schema}".effects (id text, ordering_key text)`);
    const [topic] = await pubsub.createTopic(`outbox-${tag}`);
    const [subscription] = await topic.createSubscription(`outbox-sub-${tag}`, {
      ackDeadlineSeconds: 10,
      enableMessageOrdering: true,
    });
    const consumer = await createConsumer({
      name: 'receiver',
      broker: {
        type: 'pubsub',
        projectId: PROJECT,
        apiEndpoint: emulator.address,
        subscription: subscription.name,
      },
      store,
      logger: silentLogger,
      handler: async (message, ctx) => {
        await ctx.tx.query(`INSERT INTO "${schema}".effects (id, ordering_key) VALUES ($1, $2)`, [
          message.id,
          message.orderingKey ?? null,
        ]);
      },
    });
    const spy = new ConsumerSpy().attach(consumer);
    const relay = createRelay({
      store,
      producers: createPubSubProducer({ pubsub }),
      pollIntervalMs: 100,
      logger: silentLogger,
    });
    try {
      await store.transaction(async (tx) => {
        await publishInTransaction(
          store,
          tx,
          topic.name.split('/').pop()!,
          { n: 1 },
          { id: `${tag}-1`, key: 'customer-1' },
        );
        await publishInTransaction(store, tx, topic.name.split('/').pop()!, { n: 2 }, { id: `${tag}-2` });
      });
      await consumer.start();
      await relay.start();
      await spy.waitForCount('processed', 2, undefined, RELAY_BOUND_MS);
      const { rows } = await pool.query(`SELECT id, ordering_key FROM "${schema}".effects ORDER BY id`);
      expect(rows).toEqual([
        { id: `${tag}-1`, ordering_key: 'customer-1' },
        { id: `${tag}-2`, ordering_key: null },
      ]);
      await store.transaction((tx) =>
        tx.query(`UPDATE "${schema}".outbox SET status = 'pending' WHERE id = $1`, [`${tag}-2`]),
      );
      await spy.waitFor('duplicate', (e) => e.event.messageId === `${tag}-2`, RELAY_BOUND_MS);
      expect((await pool.query(`SELECT count(*)::int AS n FROM "${schema}".effects`)).rows[0].n).toBe(2);
    } finally {
      await relay.stop();
      await consumer.stop();
      await store.close();
      await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
      await pool.end();
    }
  });
});
