import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import { isOncelyError, processOnce, StoreReentrancyError } from '@oncely/core';
import { afterAll, describe, expect, it } from 'vitest';
import { applyIfNewer, PostgresStore, SchemaVersionError } from '../src/index.js';
import { MIGRATIONS } from '../src/migrations/index.js';

const pglite = await PGlite.create();
afterAll(() => pglite.close());

let created = 0;
async function freshStore(): Promise<PostgresStore> {
  const store = new PostgresStore({ pglite, schema: `pglite_${++created}` });
  await store.migrate();
  return store;
}

/** Fails instead of hanging when a promise never settles (the defect these tests catch). */
function settlesWithin<T>(promise: Promise<T>, ms = 5000): Promise<T> {
  return Promise.race([
    promise,
    new Promise<never>((_, reject) =>
      setTimeout(() => reject(new Error(`still pending after ${ms} ms: deadlock`)), ms),
    ),
  ]);
}

describe('PGlite: one transaction at a time', () => {
  // Catches: a nested call that waits on the single connection held by its own caller.
  it('store calls from inside a transaction throw StoreReentrancyError instead of hanging', async () => {
    const store = await freshStore();
    const key = { consumer: 'reentrant', messageId: 'm-1' };
    const errors = await settlesWithin(
      store.transaction(async (tx) => {
        const attempts = [
          () => store.recordAttempt(key),
          () => store.transaction(async () => 1),
          () => store.acquireLease(key, 1000),
          () => store.ping(),
          () => store.offsets.read('c', 't'),
          () => processOnce(store, { consumer: 'reentrant', messageId: 'm-2' }, async () => {}),
        ];
        const caught: unknown[] = [];
        for (const attempt of attempts)
          caught.push(
            await attempt().then(
              () => undefined,
              (error: unknown) => error,
            ),
          );
        // The transaction itself is still usable through tx.
        await tx.query('SELECT 1');
        return caught;
      }),
    );
    for (const error of errors) {
      expect(error).toBeInstanceOf(StoreReentrancyError);
      expect(isOncelyError(error, 'STORE_REENTRANCY')).toBe(true);
    }
    expect((errors[0] as Error).message).toMatch(/ctx\.tx/);
    // Nothing leaked: the store works after the transaction ended.
    expect(await store.recordAttempt(key)).toBe(1);
  });

  it('a handler run by processOnce gets the reentrancy error too, and the transaction rolls back', async () => {
    const store = await freshStore();
    const key = { consumer: 'nested', messageId: 'outer' };
    const failure = await settlesWithin(
      processOnce(store, key, async () => {
        await store.recordAttempt(key);
      }).catch((error: unknown) => error),
    );
    expect(failure).toBeInstanceOf(StoreReentrancyError);
    expect((await processOnce(store, key, async () => 'ok')).status).toBe('processed');
  });

  // Catches: a frame that stays active after its transaction, refusing later legitimate calls.
  it('work left running after the transaction ended is not refused', async () => {
    const store = await freshStore();
    let straggler: Promise<number> | undefined;
    let open!: () => void;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    await store.transaction(async () => {
      straggler = gate.then(() => store.recordAttempt({ consumer: 'late', messageId: 'x' }));
    });
    open();
    expect(await settlesWithin(straggler!)).toBe(1);
  });

  // Catches: concurrent callers outside any transaction being refused or interleaved.
  it('concurrent callers outside transactions queue and all complete', async () => {
    const store = await freshStore();
    await store.transaction((tx) => tx.query(`CREATE TABLE "${store.schema}".effects (id text)`));
    const ids = Array.from({ length: 20 }, (_, i) => `q-${i}`);
    const outcomes = await settlesWithin(
      Promise.all(
        [...ids, ...ids].map((messageId) =>
          processOnce(store, { consumer: 'queue', messageId }, async (tx) => {
            await tx.query(`INSERT INTO "${store.schema}".effects VALUES ($1)`, [messageId]);
          }),
        ),
      ),
      20_000,
    );
    expect(outcomes.filter((o) => o.status === 'processed')).toHaveLength(20);
    const { rows } = await store.transaction((tx) =>
      tx.query<{ n: number }>(
        `SELECT count(DISTINCT id)::int AS n, count(*)::int AS total FROM "${store.schema}".effects`,
      ),
    );
    expect(rows[0]).toEqual({ n: 20, total: 20 });
  });
});

describe('PostgresStore.embedded()', () => {
  // Catches: an embedded store that forgets its data on restart or is not closed.
  it('keeps markers in its data directory across restarts', async () => {
    const dataDir = mkdtempSync(join(tmpdir(), 'oncely-pglite-'));
    try {
      const key = { consumer: 'embedded', messageId: 'persisted' };
      const first = PostgresStore.embedded({ dataDir });
      expect((await first.migrate()).applied).toEqual(MIGRATIONS.map((m) => m.name));
      expect((await processOnce(first, key, async () => 'done')).status).toBe('processed');
      await first.close();

      const second = PostgresStore.embedded({ dataDir });
      expect((await second.migrate()).applied).toEqual([]);
      expect(await processOnce(second, key, async () => 'again')).toEqual({ status: 'duplicate' });
      await second.close();
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('refuses to run on a schema that was never migrated, with a clear error', async () => {
    const store = new PostgresStore({ pglite, schema: 'never_migrated' });
    const error = await store.transaction(async () => 1).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toMatch(/migrate\(\)/);
    expect(store.classifyError(error)).toBe('unavailable');
    await expect(store.ping()).rejects.toBeInstanceOf(SchemaVersionError);
  });
});

describe('applyIfNewer on PGlite', () => {
  // Catches: an older event overwriting newer state.
  it('writes only when the incoming version is newer', async () => {
    const store = await freshStore();
    const table = `${store.schema}.address`;
    await store.transaction((tx) =>
      tx.query(
        `CREATE TABLE "${store.schema}".address (customer text PRIMARY KEY, version bigint NOT NULL, city text)`,
      ),
    );
    const apply = (version: number, city: string) =>
      store.transaction((tx) =>
        applyIfNewer(tx, { table, key: { customer: 'c-1' }, version, values: { city } }),
      );
    expect(await apply(2, 'Berlin')).toBe(true);
    expect(await apply(1, 'Paris')).toBe(false);
    expect(await apply(2, 'Rome')).toBe(false);
    expect(await apply(3, 'Oslo')).toBe(true);
    const { rows } = await store.transaction((tx) =>
      tx.query(`SELECT version::int AS version, city FROM "${store.schema}".address`),
    );
    expect(rows).toEqual([{ version: 3, city: 'Oslo' }]);
  });
});
