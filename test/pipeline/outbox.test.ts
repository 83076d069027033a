import type { ConsumerConfig } from '@oncely/core';
import { Consumer, isOncelyError } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { placeholderBroker, ScriptedAdapter } from './ScriptedAdapter.js';

// ctx.publish through the core pipeline on the embedded store: the outbox row commits
// with the marker, rolls back with a failed run, and a re-run writes the same IDs.

let store: PostgresStore;
let consumers = 0;

beforeAll(async () => {
  store = PostgresStore.embedded({ schema: 'pipeline_outbox' });
  await store.migrate();
});
afterAll(async () => {
  await store.close();
});

async function startConsumer(
  patch: Partial<ConsumerConfig>,
): Promise<{ consumer: Consumer; adapter: ScriptedAdapter; name: string }> {
  const adapter = new ScriptedAdapter();
  const name = `outbox-${++consumers}`;
  const consumer = new Consumer(
    {
      name,
      broker: placeholderBroker(),
      store,
      handler: async () => {},
      backoff: { initialMs: 100, maxMs: 100 },
      ...patch,
    },
    adapter,
  );
  await consumer.start();
  return { consumer, adapter, name };
}

async function outboxRows(prefix: string) {
  const { rows } = await store.transaction((tx) =>
    tx.query<{
      id: string;
      destination: string;
      key: string | null;
      body: Uint8Array;
      attributes: Record<string, string>;
    }>(
      'SELECT id, destination, key, body, attributes FROM pipeline_outbox.outbox WHERE id LIKE $1 ORDER BY position',
      [`${prefix}%`],
    ),
  );
  return rows.map((row) => ({ ...row, body: Buffer.from(row.body).toString('utf8') }));
}

describe('ctx.publish', () => {
  it('writes rows with the marker; a failed run writes none; the re-run writes the same IDs', async () => {
    let runs = 0;
    const { consumer, adapter, name } = await startConsumer({
      handler: async (message, ctx) => {
        runs++;
        const first = await ctx.publish(
          'payments-made',
          { order: message.id },
          { key: 'customer-1', attributes: { kind: 'payment' } },
        );
        const second = await ctx.publish('audit', 'plain text');
        const explicit = await ctx.publish('audit', Buffer.from([1, 2]), { id: `explicit-${message.id}` });
        expect([first, second, explicit]).toEqual([
          `${name}:${message.id}:1`,
          `${name}:${message.id}:2`,
          `explicit-${message.id}`,
        ]);
        if (runs === 1) throw new Error('fails after publishing');
      },
    });
    try {
      expect(await adapter.deliver({ id: 'm-1' })).toMatchObject({ kind: 'retry' });
      expect(await outboxRows(name)).toEqual([]);
      expect(await adapter.deliver({ id: 'm-1' })).toEqual({ kind: 'ack' });
      expect(await outboxRows(name)).toEqual([
        {
          id: `${name}:m-1:1`,
          destination: 'payments-made',
          key: 'customer-1',
          body: '{"order":"m-1"}',
          attributes: { kind: 'payment' },
        },
        { id: `${name}:m-1:2`, destination: 'audit', key: null, body: 'plain text', attributes: {} },
      ]);
      expect(await outboxRows('explicit-m-1')).toEqual([
        { id: 'explicit-m-1', destination: 'audit', key: null, body: '\u0001\u0002', attributes: {} },
      ]);
      // A duplicate delivery runs nothing and writes nothing more.
      expect(await adapter.deliver({ id: 'm-1' })).toEqual({ kind: 'ack' });
      expect(runs).toBe(2);
      expect(await outboxRows(name)).toHaveLength(2);
    } finally {
      await consumer.stop();
    }
  });

  it("throws a clear error in 'leased' mode, where no transaction covers the handler", async () => {
    let caught: unknown;
    const { consumer, adapter } = await startConsumer({
      mode: 'leased',
      maxAttempts: 1,
      handler: async (_message, ctx) => {
        try {
          await ctx.publish('q', {});
        } catch (error) {
          caught = error;
          throw error;
        }
      },
    });
    try {
      await adapter.deliver({ id: 'leased-1' });
      expect(isOncelyError(caught, 'CONSUMER_STATE')).toBe(true);
      expect((caught as Error).message).toContain("'leased' mode");
    } finally {
      await consumer.stop();
    }
  });
});
