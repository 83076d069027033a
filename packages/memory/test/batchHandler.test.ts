/**
 * `batchHandler`: one call per batch with its new messages, inside the transaction of
 * their markers. What must hold is what holds for `handler`: each message's effect once
 * (duplicates never reach it), a message at fault fails alone and is retried, then
 * dead-lettered, and the rest of its batch commits.
 */
import { type BatchEntry, ConfigError, createConsumer, type SqlClient, silentLogger } from '@oncely/core';
import { createMemoryConsumer } from '@oncely/memory';
import { PostgresStore } from '@oncely/postgres';
import { afterEach, describe, expect, it } from 'vitest';
import { type Cleanups, effectsPerId, newBroker, storeWithEffects } from './support.js';

const cleanups: Cleanups = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

/** The handler's effect for every entry, as one statement. */
async function insertAll(entries: readonly BatchEntry<unknown, SqlClient>[], tx: SqlClient): Promise<void> {
  await tx.query('INSERT INTO effects (message_id) SELECT unnest($1::text[])', [
    entries.map((entry) => entry.message.id),
  ]);
}

describe('batchHandler on the memory broker', () => {
  it('gets each batch’s new messages in one call, in the transaction of their markers', async () => {
    const broker = newBroker(cleanups);
    const store = await storeWithEffects(cleanups);
    const calls: Array<{ ids: string[]; sameTx: boolean; keys: string[] }> = [];
    const consumer = createMemoryConsumer<{ n: number }>({
      name: 'together',
      broker: { broker, queue: 'orders' },
      store,
      concurrency: 8,
      batch: { size: 8, maxWaitMs: 50 },
      logger: silentLogger,
      batchHandler: async (entries, tx) => {
        calls.push({
          ids: entries.map((entry) => entry.message.id),
          sameTx: entries.every((entry) => entry.ctx.tx === tx),
          keys: entries.map((entry) => entry.ctx.idempotencyKey('charge')),
        });
        await insertAll(entries, tx);
      },
    });
    cleanups.push(() => consumer.stop());
    let duplicates = 0;
    consumer.on('duplicate', () => duplicates++);

    // Every message is in the queue before the consumer starts, so batches fill.
    for (let i = 0; i < 40; i++) await broker.send('orders', { id: `order-${i}`, body: { n: i } });
    // Producer duplicates of the first ten: their copies must never reach the handler.
    for (let i = 0; i < 10; i++) await broker.send('orders', { id: `order-${i}`, body: { n: i } });
    await consumer.start();
    expect(await broker.waitForIdle('orders', { timeoutMs: 60_000 })).toBe(true);

    const effects = await effectsPerId(store);
    expect(effects.size).toBe(40);
    expect([...effects.values()].every((n) => n === 1)).toBe(true);
    expect(duplicates).toBe(10);
    const passed = calls.flatMap((call) => call.ids);
    expect([...passed].sort()).toEqual([...effects.keys()].sort());
    expect(Math.max(...calls.map((call) => call.ids.length)), 'entries in the largest call').toBeGreaterThan(
      1,
    );
    expect(calls.every((call) => call.sameTx)).toBe(true);
    // Each entry's context is its own message's.
    expect(calls.flatMap((call) => call.keys)).toEqual(passed.map((id) => `together:${id}:charge`));
    expect(broker.deadLetters('orders')).toEqual([]);
  });

  it('commits the rest of a batch when one message fails, retries that one alone, then dead-letters it', async () => {
    const broker = newBroker(cleanups);
    const store = await storeWithEffects(cleanups);
    const poisonRuns: number[] = [];
    const consumer = createMemoryConsumer<{ poison?: boolean }>({
      name: 'isolate',
      broker: { broker, queue: 'work' },
      store,
      concurrency: 8,
      batch: { size: 8, maxWaitMs: 50 },
      maxAttempts: 3,
      backoff: { initialMs: 20, maxMs: 20 },
      logger: silentLogger,
      batchHandler: async (entries, tx) => {
        await insertAll(entries, tx);
        const poison = entries.find((entry) => entry.message.body.poison);
        if (poison) {
          poisonRuns.push(poison.ctx.attempt);
          throw new Error('this message is rejected');
        }
      },
    });
    cleanups.push(() => consumer.stop());
    for (let i = 0; i < 12; i++) {
      await broker.send('work', { id: `m-${i}`, body: i === 5 ? { poison: true } : {} });
    }
    await consumer.start();
    expect(await broker.waitForIdle('work', { timeoutMs: 60_000 })).toBe(true);

    // The joint call's rows rolled back, the isolation pass committed the healthy ones.
    const effects = await effectsPerId(store);
    expect([...effects.keys()].sort()).toEqual(
      Array.from({ length: 12 }, (_, i) => `m-${i}`)
        .filter((id) => id !== 'm-5')
        .sort(),
    );
    expect([...effects.values()].every((n) => n === 1)).toBe(true);
    const dead = broker.deadLetters('work').map((d) => [d.producerMessageId, d.reason]);
    expect(dead).toEqual([['m-5', 'max-attempts']]);
    // Attempts 1..3 ran (the first twice: in the joint call and alone); the 4th never runs.
    expect(Math.max(...poisonRuns)).toBe(3);
  });

  it('dead-letters a message whose attempts are used up without running it, and commits the rest', async () => {
    const broker = newBroker(cleanups);
    const store = await storeWithEffects(cleanups);
    // 'worn' crashed three consumers already: its count is at maxAttempts, and its next
    // delivery is a redelivery (received once, lease ended), so the run is counted up front.
    for (let i = 0; i < 3; i++) await store.recordAttempt({ consumer: 'worn-out', messageId: 'worn' });
    await broker.send('work', { id: 'worn', body: {} });
    for (let i = 0; i < 7; i++) await broker.send('work', { id: `m-${i}`, body: {} });
    expect(await broker.receive('work', { max: 1 })).toHaveLength(1);
    expect(broker.forceRedelivery('work', 'worn')).toBe(1);
    const seen: string[] = [];
    const consumer = createMemoryConsumer({
      name: 'worn-out',
      broker: { broker, queue: 'work' },
      store,
      concurrency: 8,
      batch: { size: 8, maxWaitMs: 50 },
      maxAttempts: 3,
      logger: silentLogger,
      batchHandler: async (entries, tx) => {
        seen.push(...entries.map((entry) => entry.message.id));
        await insertAll(entries, tx);
      },
    });
    cleanups.push(() => consumer.stop());
    await consumer.start();
    expect(await broker.waitForIdle('work', { timeoutMs: 60_000 })).toBe(true);

    expect(seen, 'messages the handler ran').not.toContain('worn');
    expect([...(await effectsPerId(store)).keys()].sort()).toEqual(
      Array.from({ length: 7 }, (_, i) => `m-${i}`),
    );
    expect(broker.deadLetters('work').map((d) => [d.producerMessageId, d.reason])).toEqual([
      ['worn', 'max-attempts'],
    ]);
  });

  it('is refused without batch, next to handler, or when neither is given', async () => {
    const broker = newBroker(cleanups);
    const store = PostgresStore.embedded();
    cleanups.push(() => store.close());
    const base = {
      name: 'config',
      broker: { type: 'memory' as const, broker, queue: 'q' },
      store,
      logger: silentLogger,
    };
    const batchHandler = async () => {};
    const handler = async () => {};
    await expect(createConsumer({ ...base, batchHandler })).rejects.toThrow(
      /batchHandler.*needs batch: \{ size \}/,
    );
    await expect(
      createConsumer({ ...base, batchHandler, handler, concurrency: 4, batch: { size: 4 } }),
    ).rejects.toThrow(/batchHandler.*cannot be given with handler/);
    await expect(createConsumer(base)).rejects.toThrow(ConfigError);
    await expect(createConsumer(base)).rejects.toThrow(/handler.*must be an async function/);
  });
});
