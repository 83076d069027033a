import { createConsumer, DeadLetters, silentLogger } from '@oncely/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type Cleanups, effectsPerId, newBroker, storeWithEffects } from './support.js';

const cleanups: Cleanups = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

describe('DeadLetters on the memory broker with the embedded store', () => {
  it('lists two failure groups, replays one once, no-ops the second replay, discards the other', async () => {
    const broker = newBroker(cleanups);
    const store = await storeWithEffects(cleanups);
    const broken = { on: true };
    const config = {
      name: 'dlq-memory',
      broker: { type: 'memory' as const, broker, queue: 'orders' },
      store,
      maxAttempts: 2,
      backoff: { initialMs: 5, maxMs: 10 },
      concurrency: 4,
      logger: silentLogger,
      handler: async (
        message: { id: string },
        ctx: { tx: { query(sql: string, p: unknown[]): Promise<unknown> } },
      ) => {
        if (broken.on) throw new Error('payment service down');
        await ctx.tx.query('INSERT INTO effects (message_id) VALUES ($1)', [message.id]);
      },
    };
    const consumer = await createConsumer<{ id: string }>(config);
    cleanups.push(() => consumer.stop());
    await consumer.start();
    const failing = Array.from({ length: 25 }, (_, i) => `fail-${i}`);
    const garbled = Array.from({ length: 25 }, (_, i) => `bad-${i}`);
    for (const id of failing) await broker.send('orders', { id, body: { id } });
    for (const [i, id] of garbled.entries())
      await broker.send('orders', { id, body: `{"id": "${id}", broken ${i}` });
    expect(await broker.waitForIdle('orders', { timeoutMs: 60_000 })).toBe(true);

    const dlq = await DeadLetters.open(config);
    const { letters, groups } = await dlq.list();
    expect(letters).toHaveLength(50);
    expect(groups.map((g) => [g.reason, g.count]).sort()).toEqual([
      ['invalid-body', 25],
      ['max-attempts', 25],
    ]);

    const dry = await dlq.replay({ group: 'max-attempts' }, { dryRun: true });
    expect(dry.replayed.sort()).toEqual([...failing].sort());
    expect(broker.deadLetters('orders')).toHaveLength(50);

    broken.on = false;
    const replayed = await dlq.replay({ group: 'max-attempts' });
    expect(replayed.replayed).toHaveLength(25);
    expect(await broker.waitForIdle('orders', { timeoutMs: 60_000 })).toBe(true);
    const effects = await effectsPerId(store);
    expect([...effects.keys()].sort()).toEqual([...failing].sort());
    expect([...effects.values()].every((n) => n === 1)).toBe(true);

    expect(await dlq.replay({ group: 'max-attempts' })).toMatchObject({ replayed: [], alreadyProcessed: [] });
    const discarded = await dlq.discard({ group: 'invalid-body' }, { by: 'tester' });
    expect(discarded.discarded).toHaveLength(25);
    expect(broker.deadLetters('orders')).toEqual([]);
    expect(await store.deadLetterLog.discards('dlq-memory', 'bad-7')).toMatchObject([
      { reason: 'invalid-body', discardedBy: 'tester' },
    ]);
    expect((await effectsPerId(store)).size).toBe(25);
  });
});
