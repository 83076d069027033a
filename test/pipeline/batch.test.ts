import type { SqlClient } from '@oncely/core';
import { processBatchOnce, processOnce } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// The batch fast path on the real PostgreSQL: one transaction, one claim statement, a
// savepoint per item. Races need real connections, so no PGlite here.

const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const schema = `batch_${process.pid}_${Date.now()}`;
let store: PostgresStore;
let other: PostgresStore;

beforeAll(async () => {
  store = new PostgresStore({ connectionString: DATABASE_URL, schema });
  other = new PostgresStore({ connectionString: DATABASE_URL, schema });
  await store.migrate();
  await store.transaction((tx) => tx.query(`CREATE TABLE "${schema}".effects (message_id text NOT NULL)`));
});
afterAll(async () => {
  await store.transaction((tx) => tx.query(`DROP SCHEMA "${schema}" CASCADE`));
  await store.close();
  await other.close();
});

const insert = (id: string) => async (tx: SqlClient) => {
  await tx.query(`INSERT INTO "${schema}".effects(message_id) VALUES ($1)`, [id]);
  return id;
};

async function effects(prefix: string): Promise<Map<string, number>> {
  const { rows } = await store.transaction((tx) =>
    tx.query<{ message_id: string; n: number }>(
      `SELECT message_id, count(*)::int AS n FROM "${schema}".effects WHERE message_id LIKE $1 GROUP BY 1`,
      [`${prefix}%`],
    ),
  );
  return new Map(rows.map((r) => [r.message_id, r.n]));
}

describe('processBatchOnce', () => {
  it('applies new items, skips known and repeated IDs, and rolls back only the failing item', async () => {
    await processOnce(store, { consumer: 'c', messageId: 'a-known' }, insert('a-known'));
    const results = await processBatchOnce(store, 'c', [
      { messageId: 'a-1', work: insert('a-1') },
      { messageId: 'a-known', work: insert('a-known') },
      {
        messageId: 'a-bad',
        work: async (tx) => {
          await insert('a-bad')(tx);
          throw new Error('bad item');
        },
      },
      { messageId: 'a-1', work: insert('a-1') },
      { messageId: 'a-2', work: insert('a-2') },
    ]);
    expect(results.map((r) => r.status)).toEqual([
      'processed',
      'duplicate',
      'failed',
      'duplicate',
      'processed',
    ]);
    expect(Object.fromEntries(await effects('a-'))).toEqual({ 'a-known': 1, 'a-1': 1, 'a-2': 1 });
    // The failed item left no marker: its retry runs.
    expect((await processOnce(store, { consumer: 'c', messageId: 'a-bad' }, insert('a-bad'))).status).toBe(
      'processed',
    );
    expect((await effects('a-bad')).get('a-bad')).toBe(1);
  });

  it('runs each item once when none fails (no savepoints on the fast path)', async () => {
    const runs = new Map<string, number>();
    const counted = (id: string) => async (tx: SqlClient) => {
      runs.set(id, (runs.get(id) ?? 0) + 1);
      return insert(id)(tx);
    };
    const results = await processBatchOnce(
      store,
      'c',
      ['f-1', 'f-2', 'f-3'].map((id) => ({ messageId: id, work: counted(id) })),
    );
    expect(results.map((r) => r.status)).toEqual(['processed', 'processed', 'processed']);
    expect(Object.fromEntries(runs)).toEqual({ 'f-1': 1, 'f-2': 1, 'f-3': 1 });
    expect(Object.fromEntries(await effects('f-'))).toEqual({ 'f-1': 1, 'f-2': 1, 'f-3': 1 });
  });

  it('two stores racing overlapping batches in opposite orders: no deadlock, one effect per ID', async () => {
    const ids = Array.from({ length: 50 }, (_, i) => `r-${String(i).padStart(2, '0')}`);
    const batch = (order: string[]) => order.map((id) => ({ messageId: id, work: insert(id) }));
    const [forward, backward] = await Promise.all([
      processBatchOnce(store, 'c', batch(ids)),
      processBatchOnce(other, 'c', batch([...ids].reverse())),
    ]);
    const processed = [...forward, ...backward].filter((r) => r.status === 'processed').length;
    expect(processed).toBe(50);
    const counts = await effects('r-');
    expect(counts.size).toBe(50);
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
  });

  it('commits nothing when the whole transaction fails', async () => {
    const failing = processBatchOnce<unknown>(store, 'c', [
      { messageId: 'z-1', work: insert('z-1') },
      {
        messageId: 'z-2',
        work: async (tx) => {
          // The transaction itself dies (not just the item): nothing may commit.
          await tx.query('SELECT pg_terminate_backend(pg_backend_pid())');
        },
      },
    ]);
    await expect(failing).rejects.toThrow();
    expect((await effects('z-')).size).toBe(0);
    expect((await processOnce(store, { consumer: 'c', messageId: 'z-1' }, insert('z-1'))).status).toBe(
      'processed',
    );
  });

  it('stopStarting: the items not started when it aborts are released, what ran commits', async () => {
    const stop = new AbortController();
    const results = await processBatchOnce(
      store,
      'c',
      ['s-1', 's-2', 's-3', 's-4'].map((id) => ({
        messageId: id,
        work: async (tx: SqlClient) => {
          await insert(id)(tx);
          // Time runs out while s-2 runs: it finishes, s-3 and s-4 do not start.
          if (id === 's-2') stop.abort();
          return id;
        },
      })),
      { stopStarting: stop.signal },
    );
    expect(results.map((r) => r.status)).toEqual(['processed', 'processed', 'released', 'released']);
    expect(Object.fromEntries(await effects('s-'))).toEqual({ 's-1': 1, 's-2': 1 });
    // A released item left no marker: its retry runs.
    expect((await processOnce(store, { consumer: 'c', messageId: 's-3' }, insert('s-3'))).status).toBe(
      'processed',
    );
  });

  it('stopStarting: an item that fails after it aborted fails alone; the ones that ran are not run again', async () => {
    const stop = new AbortController();
    const runs = new Map<string, number>();
    const results = await processBatchOnce(
      store,
      'c',
      ['t-1', 't-2', 't-3'].map((id) => ({
        messageId: id,
        work: async (tx: SqlClient) => {
          runs.set(id, (runs.get(id) ?? 0) + 1);
          await insert(id)(tx);
          if (id === 't-2') {
            // A handler that honours the deadline: told to stop, it throws.
            stop.abort();
            throw new Error('deadline');
          }
          return id;
        },
      })),
      { stopStarting: stop.signal },
    );
    // t-1 ran in the rolled-back attempt; past the deadline it is not run again.
    expect(results.map((r) => r.status)).toEqual(['released', 'failed', 'released']);
    expect(Object.fromEntries(runs)).toEqual({ 't-1': 1, 't-2': 1 });
    expect(await effects('t-')).toEqual(new Map());
    for (const id of ['t-1', 't-2', 't-3']) {
      expect((await processOnce(store, { consumer: 'c', messageId: id }, insert(id))).status).toBe(
        'processed',
      );
    }
  });
});
