import { type ConsumerEvent, payloadFingerprint, silentLogger } from '@oncely/core';
import { createRabbitMqConsumer, REASON_HEADER } from '@oncely/rabbitmq';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
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

// Payload fingerprints on a real broker (issue 14): the fingerprint covers the bytes
// RabbitMQ delivered (and the selected headers), stored with the marker in the real
// PostgreSQL; a reused message ID with another body is reported and, under the
// 'dead-letter' policy, lands in the DLQ with reason payload-mismatch. Without the
// feature both copies are silent duplicates and nothing reaches the DLQ.
const available = await servicesAvailable();

describe.skipIf(!available)('payload fingerprints on RabbitMQ (real RabbitMQ + PostgreSQL)', () => {
  let raw: RawBroker;
  let db: TestStore;
  const cleanups: Array<() => Promise<void>> = [];

  beforeAll(async () => {
    raw = await rawBroker();
    db = await createTestStore();
  });
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => {});
  });
  afterAll(async () => {
    await db?.cleanup();
    await raw?.close();
  });

  for (const policy of ['skip', 'dead-letter'] as const) {
    it(`a reused message ID with another body or tenant header is a payload mismatch (${policy})`, async () => {
      const queue = unique(`fp_${policy.replace('-', '')}`);
      cleanups.push(() => deleteTopology(raw, queue));
      const consumer = createRabbitMqConsumer<{ amount: number }>({
        name: `c-${queue}`,
        store: db.store,
        logger: silentLogger,
        concurrency: 1,
        payloadFingerprint: { attributes: ['tenant'] },
        onPayloadMismatch: policy,
        handler: async (message, ctx) => {
          await ctx.tx.query(`INSERT INTO "${db.schema}".effects(message_id) VALUES ($1)`, [message.id]);
        },
        broker: { url: RABBITMQ_URL, queue },
      });
      cleanups.push(() => consumer.stop());
      const events = { processed: 0, duplicate: 0, mismatch: [] as ConsumerEvent[], deadLettered: 0 };
      consumer.on('processed', () => events.processed++);
      consumer.on('duplicate', () => events.duplicate++);
      consumer.on('deadLettered', () => events.deadLettered++);
      consumer.on('payloadMismatch', (event) => events.mismatch.push(event));
      await consumer.start();

      const id = `${queue}-1`;
      const settled = () => events.processed + events.duplicate + events.deadLettered;
      await raw.publish(queue, [{ id, body: { amount: 40 }, headers: { tenant: 't-1' } }]);
      await waitFor(() => settled() === 1, 'the first copy');
      await raw.publish(queue, [
        // A true redelivery-like copy: same bytes, same tenant.
        { id, body: { amount: 40 }, headers: { tenant: 't-1' } },
        // Same ID, another amount.
        { id, body: { amount: 99 }, headers: { tenant: 't-1' } },
        // Same ID and body, another tenant.
        { id, body: { amount: 40 }, headers: { tenant: 't-2' } },
      ]);
      await waitFor(() => settled() === 4, 'the three later copies');
      await consumer.stop();

      expect(events.processed).toBe(1);
      expect((await db.effects()).get(id)).toBe(1);
      expect(events.mismatch).toHaveLength(2);
      expect(events.mismatch[0]!.payloadMismatch).toEqual({
        storedFingerprint: payloadFingerprint({ body: '{"amount":40}', attributes: { tenant: 't-1' } }, [
          'tenant',
        ]),
        fingerprint: payloadFingerprint({ body: '{"amount":99}', attributes: { tenant: 't-1' } }, ['tenant']),
      });
      const dead = await raw.drain(`${queue}.dlq`);
      if (policy === 'skip') {
        expect(events.duplicate).toBe(3);
        expect(dead).toHaveLength(0);
      } else {
        expect(events.duplicate).toBe(1);
        expect(
          dead.map((m) => [m.content.toString(), String(m.properties.headers?.[REASON_HEADER])]),
        ).toEqual([
          ['{"amount":99}', 'payload-mismatch'],
          ['{"amount":40}', 'payload-mismatch'],
        ]);
      }
      expect(await raw.ready(queue)).toBe(0);
    });
  }
});
