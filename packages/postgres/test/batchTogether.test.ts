import { processBatchTogether, type SqlClient, StoreUnavailableError } from '@oncely/core';
import { describe, expect, it } from 'vitest';
import { PostgresStore } from '../src/index.js';
import { admin, cleanupAfterFile, connectionString, hasPostgres, uniqueSchema } from './serverEnv.js';

/**
 * processBatchTogether (issue #15, goal 2): one handler for the whole batch, whose effects
 * are one multi-row statement, in the transaction holding the batch's claims. A handler
 * that throws makes the batch run again item by item under savepoints: the item at fault
 * fails alone (its marker removed), the others commit. Nothing may be lost or doubled.
 */
const { schemas, stores } = cleanupAfterFile();

interface Payment {
  messageId: string;
  /** A negative amount breaks the table's CHECK: the poison message. */
  amount: number;
  fingerprint?: string;
  orderingGroup?: string;
}

async function paymentsStore() {
  const schema = uniqueSchema('batch_together');
  schemas.push(schema);
  const open = async () => {
    const store = new PostgresStore({ connectionString, schema });
    stores.push(store);
    return store;
  };
  const store = await open();
  await store.migrate();
  await admin.query(
    `CREATE TABLE "${schema}".payments (seq bigserial PRIMARY KEY, message_id text NOT NULL, amount integer NOT NULL CHECK (amount >= 0))`,
  );
  const calls: string[][] = [];
  /** The handler under test: every new payment in one INSERT, each call's IDs recorded. */
  const insertAll = async (fresh: readonly Payment[], tx: SqlClient) => {
    calls.push(fresh.map((payment) => payment.messageId));
    await tx.query(
      `INSERT INTO "${schema}".payments (message_id, amount) SELECT * FROM unnest($1::text[], $2::int[])`,
      [fresh.map((payment) => payment.messageId), fresh.map((payment) => payment.amount)],
    );
  };
  const effects = async () =>
    (
      await admin.query<{ message_id: string }>(`SELECT message_id FROM "${schema}".payments ORDER BY seq`)
    ).rows.map((row) => row.message_id);
  const markers = async () =>
    (
      await admin.query<{ message_id: string }>(
        `SELECT message_id FROM "${schema}".processed_messages WHERE consumer = 'c' ORDER BY message_id`,
      )
    ).rows.map((row) => row.message_id);
  return { store, schema, open, calls, insertAll, effects, markers };
}

const payments = (...ids: string[]): Payment[] => ids.map((id) => ({ messageId: id, amount: 1 }));

describe.skipIf(!hasPostgres)('processBatchTogether on PostgreSQL', () => {
  it('runs the handler once with every new item; effects and markers commit together', async () => {
    const { store, calls, insertAll, effects, markers } = await paymentsStore();
    const ids = Array.from({ length: 50 }, (_, i) => `m-${String(i).padStart(2, '0')}`);
    const results = await processBatchTogether(store, 'c', payments(...ids), insertAll);
    expect(results.map((r) => r.status)).toEqual(ids.map(() => 'processed'));
    expect(calls).toEqual([ids]);
    expect(await effects()).toEqual(ids);
    expect(await markers()).toEqual(ids);

    const again = await processBatchTogether(store, 'c', payments(...ids), insertAll);
    expect(again.map((r) => r.status)).toEqual(ids.map(() => 'duplicate'));
    expect(calls, 'no handler call for a batch of duplicates').toHaveLength(1);
    expect(await effects()).toEqual(ids);
  });

  it('passes neither duplicates of committed markers nor repeats inside the batch; fingerprints are compared', async () => {
    const { store, calls, insertAll, effects } = await paymentsStore();
    await processBatchTogether(
      store,
      'c',
      [{ messageId: 'old', amount: 1, fingerprint: 'f-old' }],
      insertAll,
    );
    const results = await processBatchTogether(
      store,
      'c',
      [
        { messageId: 'a', amount: 1, fingerprint: 'f-a' },
        { messageId: 'old', amount: 1, fingerprint: 'f-changed' },
        { messageId: 'a', amount: 1, fingerprint: 'f-a2' },
        { messageId: 'b', amount: 1 },
        { messageId: 'b', amount: 1 },
      ],
      insertAll,
    );
    expect(results).toEqual([
      { status: 'processed', result: undefined },
      { status: 'duplicate', payloadMismatch: { storedFingerprint: 'f-old', fingerprint: 'f-changed' } },
      { status: 'duplicate', payloadMismatch: { storedFingerprint: 'f-a', fingerprint: 'f-a2' } },
      { status: 'processed', result: undefined },
      { status: 'duplicate' },
    ]);
    expect(calls).toEqual([['old'], ['a', 'b']]);
    expect(await effects()).toEqual(['old', 'a', 'b']);
  });

  it('one poison item among many fails alone: the others commit, its marker is absent and its retry runs', async () => {
    const { store, calls, insertAll, effects, markers } = await paymentsStore();
    const distinct = payments(...Array.from({ length: 10 }, (_, i) => `m-${i}`));
    distinct[6] = { messageId: 'm-6', amount: -1 };
    // Repeats of a good item and of the poison: each ID runs once per pass.
    const batch = [...distinct, { messageId: 'm-2', amount: 1 }, { messageId: 'm-6', amount: -1 }];
    const results = await processBatchTogether(store, 'c', batch, insertAll);
    expect(results.map((r) => r.status)).toEqual([
      ...Array(6).fill('processed'),
      'failed',
      ...Array(3).fill('processed'),
      'duplicate',
      'failed',
    ]);
    expect((results[6] as { error: { code?: string } }).error.code, 'the CHECK violation').toBe('23514');
    expect(results[11], "the poison's repeat shares its outcome (no marker: acking it would lose it)").toBe(
      results[6],
    );
    // The batch call, then each item alone in the isolation pass.
    expect(calls).toEqual([distinct.map((p) => p.messageId), ...distinct.map((p) => [p.messageId])]);
    const others = distinct.filter((p) => p.messageId !== 'm-6').map((p) => p.messageId);
    expect(await effects()).toEqual(others);
    expect(await markers()).toEqual(others);

    const retry = await processBatchTogether(store, 'c', [{ messageId: 'm-6', amount: 6 }], insertAll);
    expect(
      retry.map((r) => r.status),
      'the retry is no duplicate',
    ).toEqual(['processed']);
    expect(await effects()).toEqual([...others, 'm-6']);
  });

  it('in the isolation pass, what follows a failed item in its group is released; other groups commit', async () => {
    const { store, insertAll, effects, markers } = await paymentsStore();
    const batch: Payment[] = [
      { messageId: 'p0-1', orderingGroup: 'p0', amount: 1 },
      { messageId: 'p1-1', orderingGroup: 'p1', amount: 1 },
      { messageId: 'p0-2', orderingGroup: 'p0', amount: -1 },
      { messageId: 'p0-3', orderingGroup: 'p0', amount: 1 },
      { messageId: 'free', amount: 1 },
      { messageId: 'p1-2', orderingGroup: 'p1', amount: 1 },
      { messageId: 'p0-4', orderingGroup: 'p0', amount: 1 },
    ];
    const results = await processBatchTogether(store, 'c', batch, insertAll);
    expect(results.map((r) => r.status)).toEqual([
      'processed',
      'processed',
      'failed',
      'released',
      'processed',
      'processed',
      'released',
    ]);
    expect(await effects()).toEqual(['p0-1', 'p1-1', 'free', 'p1-2']);
    expect(await markers()).toEqual(['free', 'p0-1', 'p1-1', 'p1-2']);
    // Fetched again after the failed one is fixed, the released ones run: no marker held them.
    const again = await processBatchTogether(
      store,
      'c',
      [
        { messageId: 'p0-2', orderingGroup: 'p0', amount: 2 },
        { messageId: 'p0-3', orderingGroup: 'p0', amount: 3 },
        { messageId: 'p0-4', orderingGroup: 'p0', amount: 4 },
      ],
      insertAll,
    );
    expect(again.map((r) => r.status)).toEqual(['processed', 'processed', 'processed']);
    expect(await effects()).toEqual(['p0-1', 'p1-1', 'free', 'p1-2', 'p0-2', 'p0-3', 'p0-4']);
  });

  it('a transient conflict reruns the whole batch together, applied once', async () => {
    const { store, calls, insertAll, effects } = await paymentsStore();
    let conflicts = 1;
    const results = await processBatchTogether(store, 'c', payments('a', 'b', 'c'), async (fresh, tx) => {
      await insertAll(fresh, tx);
      if (conflicts-- > 0) {
        await tx.query(`DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`);
      }
    });
    expect(results.map((r) => r.status)).toEqual(['processed', 'processed', 'processed']);
    expect(calls, 'no isolation pass for a transient error').toEqual([
      ['a', 'b', 'c'],
      ['a', 'b', 'c'],
    ]);
    expect(await effects()).toEqual(['a', 'b', 'c']);
  });

  it('a connection killed before commit leaves no marker and no effect; the batch then runs whole', async () => {
    const { store, calls, insertAll, effects, markers } = await paymentsStore();
    const batch = payments('a', 'b', 'c');
    const error = await processBatchTogether(store, 'c', batch, async (fresh, tx) => {
      await insertAll(fresh, tx);
      await tx.query('SELECT pg_terminate_backend(pg_backend_pid())');
    }).catch((e: unknown) => e);
    expect(store.classifyError(error)).toBe('unavailable');
    expect(calls, 'no isolation pass for an outage').toHaveLength(1);
    expect(await effects()).toEqual([]);
    expect(await markers()).toEqual([]);

    const results = await processBatchTogether(store, 'c', batch, insertAll);
    expect(results.map((r) => r.status)).toEqual(['processed', 'processed', 'processed']);
    expect(await effects()).toEqual(['a', 'b', 'c']);
  });

  it('a thrown store outage aborts the batch: nothing commits and the error propagates', async () => {
    const { store, calls, insertAll, effects, markers } = await paymentsStore();
    const outage = new StoreUnavailableError('store gone');
    await expect(
      processBatchTogether(store, 'c', payments('a', 'b'), async (fresh, tx) => {
        await insertAll(fresh, tx);
        throw outage;
      }),
    ).rejects.toBe(outage);
    expect(calls).toHaveLength(1);
    expect(await effects()).toEqual([]);
    expect(await markers()).toEqual([]);
  });

  it('two concurrent batches with overlapping IDs apply each ID exactly once', async () => {
    const { store, open, effects, schema } = await paymentsStore();
    const other = await open();
    const ids = Array.from({ length: 60 }, (_, i) => `m-${String(i).padStart(2, '0')}`);
    const slowInsert = async (fresh: readonly Payment[], tx: SqlClient) => {
      await tx.query(
        `INSERT INTO "${schema}".payments (message_id, amount) SELECT * FROM unnest($1::text[], $2::int[])`,
        [fresh.map((payment) => payment.messageId), fresh.map((payment) => payment.amount)],
      );
      // Hold the claims so the other batch really meets an open transaction.
      await tx.query('SELECT pg_sleep(0.02)');
    };
    for (let round = 0; round < 3; round++) {
      const roundIds = ids.map((id) => `${round}-${id}`);
      const [first, second] = await Promise.all([
        processBatchTogether(store, 'c', payments(...roundIds.slice(0, 40)), slowInsert),
        processBatchTogether(other, 'c', payments(...roundIds.slice(20).reverse()), slowInsert),
      ]);
      const processed = [...first, ...second].filter((r) => r.status === 'processed').length;
      expect(processed, `round ${round}: processed across both batches`).toBe(60);
      expect([...first, ...second].every((r) => r.status === 'processed' || r.status === 'duplicate')).toBe(
        true,
      );
    }
    const perId = new Map<string, number>();
    for (const id of await effects()) perId.set(id, (perId.get(id) ?? 0) + 1);
    expect(perId.size).toBe(180);
    expect([...perId.values()].every((count) => count === 1)).toBe(true);
  });
});
