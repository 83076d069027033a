import { describe, expect, it } from 'vitest';
import type { IdempotencyStore, StoreErrorKind } from '../src/index.js';
import { processBatchTogether } from '../src/index.js';

/**
 * processBatchTogether's state machine against a store kept in memory that logs every
 * call: which statements a batch costs, when the handler runs and with what. The same
 * guarantees on real PostgreSQL: packages/postgres/test/batchTogether.test.ts.
 */
interface MemoryTx {
  markers: Set<string>;
  effects: string[];
}

/** An error the store classifies as `kind`. */
class KindError extends Error {
  constructor(readonly kind: StoreErrorKind) {
    super(kind);
  }
}

function memoryStore() {
  const committed: MemoryTx = { markers: new Set(), effects: [] };
  const log: string[] = [];
  const store = {
    async transaction<T>(work: (tx: MemoryTx) => Promise<T>): Promise<T> {
      log.push('begin');
      const tx: MemoryTx = { markers: new Set(committed.markers), effects: [...committed.effects] };
      try {
        const result = await work(tx);
        committed.markers = tx.markers;
        committed.effects = tx.effects;
        log.push('commit');
        return result;
      } catch (error) {
        log.push('rollback');
        throw error;
      }
    },
    async claim(tx: MemoryTx, _consumer: string, ids: readonly string[]) {
      log.push(`claim ${ids.join(',')}`);
      const claimed = new Set<string>();
      for (const id of ids) {
        if (tx.markers.has(id)) continue;
        tx.markers.add(id);
        claimed.add(id);
      }
      return claimed;
    },
    async unclaim(tx: MemoryTx, _consumer: string, ids: readonly string[]) {
      log.push(`unclaim ${ids.join(',')}`);
      for (const id of ids) tx.markers.delete(id);
    },
    async savepoint<T>(tx: MemoryTx, work: () => Promise<T>): Promise<T> {
      log.push('savepoint');
      const markers = new Set(tx.markers);
      const effects = [...tx.effects];
      try {
        return await work();
      } catch (error) {
        tx.markers = markers;
        tx.effects = effects;
        throw error;
      }
    },
    classifyError: (error: unknown): StoreErrorKind => (error instanceof KindError ? error.kind : 'other'),
  } as unknown as IdempotencyStore<MemoryTx>;
  return { store, committed, log };
}

interface Order {
  messageId: string;
  orderingGroup?: string;
  amount: number;
}

/** Records each call's IDs; an order with a negative amount is rejected. */
function handler(calls: string[][]) {
  return async (fresh: readonly Order[], tx: MemoryTx) => {
    calls.push(fresh.map((order) => order.messageId));
    for (const order of fresh) {
      if (order.amount < 0) throw new Error(`${order.messageId}: negative amount`);
      tx.effects.push(order.messageId);
    }
  };
}

const orders = (...ids: string[]): Order[] => ids.map((id) => ({ messageId: id, amount: 1 }));

describe('processBatchTogether', () => {
  it('one claim, one handler call with the new items, one commit: no savepoints', async () => {
    const { store, committed, log } = memoryStore();
    const calls: string[][] = [];
    const results = await processBatchTogether(store, 'c', orders('a', 'b', 'c'), handler(calls));
    expect(results.map((r) => r.status)).toEqual(['processed', 'processed', 'processed']);
    expect(calls).toEqual([['a', 'b', 'c']]);
    expect(log).toEqual(['begin', 'claim a,b,c', 'commit']);
    expect(committed.effects).toEqual(['a', 'b', 'c']);
    expect([...committed.markers]).toEqual(['a', 'b', 'c']);
  });

  it('passes neither duplicates of committed markers nor repeats, and skips the handler when nothing is new', async () => {
    const { store, committed } = memoryStore();
    const calls: string[][] = [];
    await processBatchTogether(store, 'c', orders('a'), handler(calls));
    const results = await processBatchTogether(store, 'c', orders('b', 'a', 'b', 'c'), handler(calls));
    expect(results.map((r) => r.status)).toEqual(['processed', 'duplicate', 'duplicate', 'processed']);
    expect(calls).toEqual([['a'], ['b', 'c']]);
    await processBatchTogether(store, 'c', orders('a', 'c'), handler(calls));
    expect(calls).toHaveLength(2);
    expect(committed.effects).toEqual(['a', 'b', 'c']);
  });

  it('a poison item: the batch reruns item by item under savepoints, the poison fails alone and is unclaimed', async () => {
    const { store, committed, log } = memoryStore();
    const calls: string[][] = [];
    const batch = [...orders('a'), { messageId: 'bad', amount: -1 }, ...orders('c')];
    const results = await processBatchTogether(store, 'c', batch, handler(calls));
    expect(results.map((r) => r.status)).toEqual(['processed', 'failed', 'processed']);
    expect((results[1] as { error: Error }).error.message).toBe('bad: negative amount');
    expect(calls).toEqual([['a', 'bad', 'c'], ['a'], ['bad'], ['c']]);
    expect(log).toEqual([
      'begin',
      'claim a,bad,c',
      'rollback',
      'begin',
      'claim a,bad,c',
      'savepoint',
      'savepoint',
      'unclaim bad',
      'savepoint',
      'commit',
    ]);
    expect(committed.effects).toEqual(['a', 'c']);
    expect([...committed.markers]).toEqual(['a', 'c']);
  });

  it('in the isolation pass, what follows a failed item in its group is released, unclaimed and not run', async () => {
    const { store, committed } = memoryStore();
    const calls: string[][] = [];
    const batch: Order[] = [
      { messageId: 'p0-1', orderingGroup: 'p0', amount: 1 },
      { messageId: 'p0-2', orderingGroup: 'p0', amount: -1 },
      { messageId: 'p1-1', orderingGroup: 'p1', amount: 1 },
      { messageId: 'p0-3', orderingGroup: 'p0', amount: 1 },
    ];
    const results = await processBatchTogether(store, 'c', batch, handler(calls));
    expect(results.map((r) => r.status)).toEqual(['processed', 'failed', 'processed', 'released']);
    expect(calls.slice(1)).toEqual([['p0-1'], ['p0-2'], ['p1-1']]);
    expect(committed.effects).toEqual(['p0-1', 'p1-1']);
    expect([...committed.markers]).toEqual(['p0-1', 'p1-1']);
  });

  it('a transient error reruns the whole batch together; an unavailable store is thrown with nothing kept', async () => {
    const { store, committed, log } = memoryStore();
    const calls: string[][] = [];
    let conflicts = 1;
    const results = await processBatchTogether(store, 'c', orders('a', 'b'), async (fresh, tx) => {
      if (conflicts-- > 0) throw new KindError('transient');
      await handler(calls)(fresh, tx);
    });
    expect(results.map((r) => r.status)).toEqual(['processed', 'processed']);
    expect(calls).toEqual([['a', 'b']]);
    expect(log).not.toContain('savepoint');

    const outage = new KindError('unavailable');
    await expect(
      processBatchTogether(store, 'c', orders('x', 'y'), async (fresh, tx) => {
        tx.effects.push(...fresh.map((order) => order.messageId));
        throw outage;
      }),
    ).rejects.toBe(outage);
    expect(committed.effects).toEqual(['a', 'b']);
    expect([...committed.markers]).toEqual(['a', 'b']);
  });
});
