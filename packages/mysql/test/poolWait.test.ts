import { isOncelyError, StoreUnavailableError } from '@oncely/core';
import { afterAll, describe, expect, it } from 'vitest';
import { MySqlStore } from '../src/index.js';
import { admin, dropSchema, hasMySql, mysqlUrl, uniqueSchema } from './serverEnv.js';

const schemas: string[] = [];
const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const close of closers) await close().catch(() => {});
  for (const schema of schemas) await dropSchema(schema);
});

/** Resolves with what `work` settled with, or 'still waiting' once `ms` passed (an outer limit). */
function within<T>(ms: number, work: Promise<T>): Promise<{ value?: T; error?: unknown } | 'still waiting'> {
  return Promise.race([
    work.then(
      (value) => ({ value }),
      (error: unknown) => ({ error }),
    ),
    new Promise<'still waiting'>((resolve) => setTimeout(() => resolve('still waiting'), ms).unref()),
  ]);
}

describe.skipIf(!hasMySql)('waiting for a pooled connection is bounded (poolWaitTimeoutMs)', () => {
  it('a pool of 1 held by a transaction: a second transaction fails unavailable within the bound, and the pool recovers', async () => {
    const schema = uniqueSchema('poolwait');
    schemas.push(schema);
    const store = new MySqlStore({ url: mysqlUrl, schema, poolMax: 1, poolWaitTimeoutMs: 500 });
    closers.push(() => store.close());
    await store.migrate();
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let entered!: () => void;
    const inside = new Promise<void>((resolve) => {
      entered = resolve;
    });
    const holder = store.transaction(async (tx) => {
      await tx.query('DO 0');
      entered();
      await held;
    });
    await inside;
    const started = Date.now();
    const second = await within(
      15_000,
      store.transaction((tx) => tx.query('DO 1')),
    );
    const waited = Date.now() - started;
    release();
    await holder;
    expect(second).not.toBe('still waiting');
    const { error } = second as { error?: unknown };
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(store.classifyError(error)).toBe('unavailable');
    expect((error as Error).message).toMatch(/poolWaitTimeoutMs/);
    // At least the bound (it waited), and well under the outer limit.
    expect(waited).toBeGreaterThanOrEqual(450);
    // The connection the timed-out wait would have got is given back: the pool still serves.
    await expect(store.transaction((tx) => tx.query('DO 2'))).resolves.toBeDefined();
    await expect(store.transaction((tx) => tx.query('DO 3'))).resolves.toBeDefined();
  });

  it('a caller pool (the pool option) is bounded the same way', async () => {
    const mysql = (await import('mysql2/promise')).default;
    const pool = mysql.createPool({ uri: mysqlUrl, connectionLimit: 1 });
    closers.push(() => pool.end());
    const schema = uniqueSchema('poolwait');
    schemas.push(schema);
    const store = new MySqlStore({ pool, schema, poolWaitTimeoutMs: 300 });
    await store.migrate();
    const taken = await pool.getConnection();
    const second = await within(
      15_000,
      store.transaction((tx) => tx.query('DO 1')),
    );
    taken.release();
    expect(second).not.toBe('still waiting');
    expect(isOncelyError((second as { error?: unknown }).error, 'STORE_UNAVAILABLE')).toBe(true);
    await expect(store.transaction((tx) => tx.query('DO 2'))).resolves.toBeDefined();
  });

  it('refuses a poolWaitTimeoutMs that is not a positive integer', () => {
    expect(() => new MySqlStore({ url: mysqlUrl, poolWaitTimeoutMs: 0 })).toThrow(/poolWaitTimeoutMs/);
    expect(() => new MySqlStore({ url: mysqlUrl, poolWaitTimeoutMs: -1 })).toThrow(/poolWaitTimeoutMs/);
  });
});

void admin;
