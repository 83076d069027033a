import { randomUUID } from 'node:crypto';
import type { PubSub } from '@google-cloud/pubsub';
import { publishInTransaction, silentLogger } from '@oncely/core';
import type { PubSubEmulator } from '@oncely/emulators/pubsub';
import { createRelay, PostgresStore } from '@oncely/postgres';
import { createPubSubProducer } from '@oncely/pubsub';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminClient, DATABASE_URL, postgresAvailable, startEmulator } from './support.js';

// The Pub/Sub outbox producer isolates each message (#26): the client batches a topic's
// messages into one Publish call, and the service refuses the whole call for one message
// it refuses (too large, > 100 attributes, an attribute value over 1,024 bytes). Such a
// message must fail alone, permanently; a row for a topic that does not exist fails alone
// too (retried: the topic may be created). Healthy rows of the same round are sent. On the
// Oncely Pub/Sub emulator with the real @google-cloud/pubsub client.

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

/**
 * Relay rounds until nothing is pending, bounded only against a hang: a relay sends rows
 * below the cluster-wide snapshot xmin, and a session of another suite cut off
 * mid-transaction on the shared server holds them back until its
 * idle_in_transaction_session_timeout (60 s) ends it. 200 rounds (~4 s) raced that.
 */
const RELAY_WAIT_MS = 150_000;

describe.skipIf(!hasPostgres)('Pub/Sub outbox producer: a refused message fails alone', () => {
  it(
    'bad messages and a missing topic fail by themselves; the rest of the round is sent',
    async () => {
      const tag = randomUUID().replaceAll('-', '').slice(0, 10);
      const schema = `oncely_pubsub_outbox_iso_${tag}`;
      const store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
      await store.migrate();
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
      const [topic] = await pubsub.createTopic(`iso-${tag}`);
      const [other] = await pubsub.createTopic(`iso-other-${tag}`);
      const [subscription] = await topic.createSubscription(`iso-sub-${tag}`);
      const [otherSubscription] = await other.createSubscription(`iso-other-sub-${tag}`);
      const topicName = `iso-${tag}`;
      const missing = `iso-missing-${tag}`;
      const relay = createRelay({
        store,
        producers: createPubSubProducer({ pubsub }),
        batchSize: 100,
        maxAttempts: 3,
        backoff: { initialMs: 10, maxMs: 10 },
        listen: false,
        logger: silentLogger,
      });
      const deadLettered = new Map<string, unknown>();
      relay.on('deadLettered', (event) => deadLettered.set(event.id, event.error));
      try {
        const healthy: string[] = [];
        const healthyOther: string[] = [];
        await store.transaction(async (tx) => {
          const write = (destination: string, id: string, body: unknown, options: object = {}) =>
            publishInTransaction(store, tx, destination, body, { id, ...options });
          for (let i = 0; i < 5; i++) {
            await write(topicName, `${tag}-ok-${i}`, { i });
            healthy.push(`${tag}-ok-${i}`);
          }
          await write(
            topicName,
            `${tag}-attributes`,
            { bad: 1 },
            {
              attributes: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`a${i}`, 'v'])),
            },
          );
          await write(topicName, `${tag}-long-value`, { bad: 2 }, { attributes: { note: 'v'.repeat(1025) } });
          await write(topicName, `${tag}-huge`, 'h'.repeat(10_000_001));
          await write(missing, `${tag}-missing`, { bad: 3 });
          for (let i = 5; i < 10; i++) {
            await write(topicName, `${tag}-ok-${i}`, { i });
            healthy.push(`${tag}-ok-${i}`);
          }
          for (let i = 0; i < 5; i++) {
            await write(`iso-other-${tag}`, `${tag}-other-${i}`, { i }, { key: `k-${i}` });
            healthyOther.push(`${tag}-other-${i}`);
          }
        });

        // Rounds until nothing is pending (observable state, not a sleep).
        for (const deadline = Date.now() + RELAY_WAIT_MS; Date.now() < deadline; ) {
          const { rows } = await pool.query(
            `SELECT count(*)::int AS n FROM "${schema}".outbox WHERE status = 'pending'`,
          );
          if (rows[0].n === 0) break;
          const { claimed } = await relay.runOnce();
          if (claimed === 0) await new Promise((resolve) => setTimeout(resolve, 20));
        }

        const { rows } = await pool.query(`SELECT id, status, attempts FROM "${schema}".outbox`);
        const status = Object.fromEntries(rows.map((row) => [row.id, row.status]));
        const attempts = Object.fromEntries(rows.map((row) => [row.id, Number(row.attempts)]));
        expect(
          [...healthy, ...healthyOther].filter((id) => status[id] !== 'sent'),
          'healthy rows not sent',
        ).toEqual([]);
        expect([...deadLettered.keys()].sort()).toEqual(
          [`${tag}-attributes`, `${tag}-long-value`, `${tag}-huge`, `${tag}-missing`].sort(),
        );
        // Refused for their content: dead-lettered at once, no retry can send them.
        for (const id of [`${tag}-attributes`, `${tag}-long-value`, `${tag}-huge`]) {
          expect(attempts[id], `${id} attempts`).toBe(1);
        }
        expect(String(deadLettered.get(`${tag}-attributes`))).toMatch(/attributes/);
        expect(String(deadLettered.get(`${tag}-long-value`))).toMatch(/1024|1,024/);
        expect(String(deadLettered.get(`${tag}-huge`))).toMatch(/bytes|large/);
        // A topic that does not exist yet is retried, up to maxAttempts.
        expect(attempts[`${tag}-missing`]).toBe(3);
        expect(String(deadLettered.get(`${tag}-missing`))).toMatch(/not found|NOT_FOUND/i);

        // Each healthy message is on its topic, once.
        const received = async (sub: typeof subscription, expected: number): Promise<string[]> => {
          const ids: string[] = [];
          await new Promise<void>((resolve, reject) => {
            const listener = sub.on('message', (message) => {
              ids.push(message.attributes['message-id'] ?? '');
              message.ack();
              if (ids.length >= expected) resolve();
            });
            listener.on('error', reject);
          });
          await sub.close();
          return ids;
        };
        expect((await received(subscription, healthy.length)).sort()).toEqual([...healthy].sort());
        expect((await received(otherSubscription, healthyOther.length)).sort()).toEqual(
          [...healthyOther].sort(),
        );
      } finally {
        await relay.stop();
        await store.close();
        await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
        await pool.end();
      }
    },
    RELAY_WAIT_MS + 30_000,
  );
  it(
    'a Publish call the service refuses for one message (a rule the client does not check) fails only that one',
    async () => {
      // The service side: this emulator refuses every Publish call that carries a message
      // with the attribute `poison`, for the whole call, as the service does for a message
      // it finds invalid (here by giving the emulator's own check that message 101
      // attributes). The client and the producer know nothing of that rule.
      type Publishing = {
        publish(req: { messages?: Array<{ attributes?: Record<string, string> }> }): unknown;
      };
      const service = emulator as unknown as Publishing;
      const original = service.publish;
      service.publish = function (this: Publishing, req) {
        const messages = (req.messages ?? []).map((message) =>
          message.attributes?.poison
            ? {
                ...message,
                attributes: Object.fromEntries(Array.from({ length: 101 }, (_, i) => [`p${i}`, 'x'])),
              }
            : message,
        );
        return original.call(this, { ...req, messages });
      };
      const tag = randomUUID().replaceAll('-', '').slice(0, 10);
      const schema = `oncely_pubsub_outbox_iso_${tag}`;
      const store = new PostgresStore({ connectionString: DATABASE_URL, schema, logger: silentLogger });
      await store.migrate();
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
      const topicName = `poison-${tag}`;
      const [topic] = await pubsub.createTopic(topicName);
      const [subscription] = await topic.createSubscription(`poison-sub-${tag}`);
      const relay = createRelay({
        store,
        producers: createPubSubProducer({ pubsub }),
        batchSize: 100,
        maxAttempts: 3,
        backoff: { initialMs: 10, maxMs: 10 },
        listen: false,
        logger: silentLogger,
      });
      const deadLettered = new Map<string, unknown>();
      relay.on('deadLettered', (event) => deadLettered.set(event.id, event.error));
      try {
        const healthy = Array.from({ length: 8 }, (_, i) => `${tag}-ok-${i}`);
        await store.transaction(async (tx) => {
          for (const id of healthy.slice(0, 4))
            await publishInTransaction(store, tx, topicName, { id }, { id });
          await publishInTransaction(
            store,
            tx,
            topicName,
            { bad: true },
            { id: `${tag}-poison`, attributes: { poison: 'yes' } },
          );
          for (const id of healthy.slice(4)) await publishInTransaction(store, tx, topicName, { id }, { id });
        });
        for (const deadline = Date.now() + RELAY_WAIT_MS; Date.now() < deadline; ) {
          const { rows } = await pool.query(
            `SELECT count(*)::int AS n FROM "${schema}".outbox WHERE status = 'pending'`,
          );
          if (rows[0].n === 0) break;
          const { claimed } = await relay.runOnce();
          if (claimed === 0) await new Promise((resolve) => setTimeout(resolve, 20));
        }
        const { rows } = await pool.query(`SELECT id, status, attempts FROM "${schema}".outbox`);
        const status = Object.fromEntries(rows.map((row) => [row.id, row.status]));
        expect(
          healthy.filter((id) => status[id] !== 'sent'),
          'healthy rows not sent',
        ).toEqual([]);
        expect([...deadLettered.keys()]).toEqual([`${tag}-poison`]);
        // Refused alone as well: permanent, dead-lettered on its first attempt.
        expect(rows.find((row) => row.id === `${tag}-poison`)?.attempts).toBe(1);
        const ids: string[] = [];
        await new Promise<void>((resolve, reject) => {
          subscription.on('message', (message) => {
            ids.push(message.attributes['message-id'] ?? '');
            message.ack();
            if (ids.length >= healthy.length) resolve();
          });
          subscription.on('error', reject);
        });
        await subscription.close();
        expect([...new Set(ids)].sort()).toEqual([...healthy].sort());
      } finally {
        service.publish = original;
        await relay.stop();
        await store.close();
        await pool.query(`DROP SCHEMA "${schema}" CASCADE`);
        await pool.end();
      }
    },
    RELAY_WAIT_MS + 30_000,
  );
});
