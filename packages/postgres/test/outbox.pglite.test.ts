import { PGlite } from '@electric-sql/pglite';
import type { OutboxMessage, OutboxProducer } from '@oncely/core';
import { processOnce, publishInTransaction } from '@oncely/core';
import { afterAll, describe, expect, it } from 'vitest';
import { createRelay, PostgresStore } from '../src/index.js';

// The embedded case: PGlite has one connection, the relay runs in the same process as
// the writers and wakes on PGlite's own LISTEN.

const pglite = await PGlite.create();
afterAll(() => pglite.close());

class RecordingProducer implements OutboxProducer {
  readonly sent: OutboxMessage[] = [];
  async send(messages: readonly OutboxMessage[]) {
    this.sent.push(...messages);
    return messages.map(() => ({ ok: true as const }));
  }
}

describe('outbox on PGlite (embedded)', () => {
  it('the relay runs in-process, wakes on NOTIFY, and shares the one connection with writers', async () => {
    const store = new PostgresStore({ pglite, schema: 'outbox_embedded' });
    await store.migrate();
    await store.transaction((tx) =>
      tx.query('CREATE TABLE outbox_embedded.payments (order_id text PRIMARY KEY)'),
    );
    const producer = new RecordingProducer();
    // A poll interval no test waits out: only a notification can wake it in time.
    const relay = createRelay({ store, producers: producer, pollIntervalMs: 600_000 });
    await relay.start();
    try {
      const sent = new Set<string>();
      const allSent = new Promise<void>((resolve) =>
        relay.on('sent', (event) => {
          sent.add(event.id);
          if (sent.size === 20) resolve();
        }),
      );
      await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          processOnce(store, { consumer: 'payments', messageId: `order-${i}` }, async (tx) => {
            await tx.query('INSERT INTO outbox_embedded.payments (order_id) VALUES ($1)', [`order-${i}`]);
            await publishInTransaction(
              store,
              tx,
              'payments-made',
              { orderId: i },
              { id: `payments:order-${i}:1`, key: `c-${i % 3}` },
            );
          }),
        ),
      );
      // A rolled-back publish is never sent.
      await expect(
        store.transaction(async (tx) => {
          await publishInTransaction(store, tx, 'payments-made', { orderId: 'x' }, { id: 'rolled-back' });
          throw new Error('abort');
        }),
      ).rejects.toThrow('abort');
      await allSent;
      expect(producer.sent.map((m) => m.id).sort()).toEqual(
        Array.from({ length: 20 }, (_, i) => `payments:order-${i}:1`).sort(),
      );
      for (let k = 0; k < 3; k++) {
        const order = producer.sent
          .filter((m) => m.key === `c-${k}`)
          .map((m) => JSON.parse(Buffer.from(m.body).toString()).orderId);
        expect(order).toEqual([...order].sort((a, b) => a - b));
      }
      expect(await store.outbox.stats()).toEqual({ pending: 0, failed: 0, lagMs: null });
    } finally {
      await relay.stop();
    }
  });
});
