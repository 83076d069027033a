import { processOnce } from '@oncely/core';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { MySqlStore } from '../src/index.js';
import { admin, dropSchema, hasMySql, mysqlUrl, uniqueSchema } from './serverEnv.js';

/**
 * What one processOnce costs beyond the statements a hand-written transaction sends
 * (issue 31's bench: processOnce must reach 0.95× of them written by hand on a mysql2 pool).
 */
const schemas: string[] = [];
const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const close of closers) await close().catch(() => {});
  for (const schema of schemas) await dropSchema(schema);
});

async function migratedStore(options: { pool?: unknown } = {}) {
  const schema = uniqueSchema('cost');
  schemas.push(schema);
  await new MySqlStore({ url: mysqlUrl, schema }).migrate();
  await admin.query(
    `CREATE TABLE \`${schema}\`.payments (order_id VARCHAR(64) NOT NULL, amount INT NOT NULL)`,
  );
  const store = options.pool
    ? new MySqlStore({ pool: options.pool as never, schema })
    : new MySqlStore({ url: mysqlUrl, schema, poolMax: 2 });
  closers.push(() => store.close());
  return { store, payments: `\`${schema}\`.payments` };
}

describe.skipIf(!hasMySql)('the cost of one processOnce on the MySQL store', () => {
  it('sends exactly START TRANSACTION, the marker INSERT, the handler statement, COMMIT (no session SET per transaction)', async () => {
    const mysql = (await import('mysql2/promise')).default;
    const pool = mysql.createPool({ uri: mysqlUrl, connectionLimit: 1 });
    closers.push(() => pool.end());
    const sent: string[] = [];
    // The store's caller-pool path runs the same driver as its own pool: record what each
    // checked-out connection is asked to run, on the callback connection under the promise
    // one (mysql2's promise query() calls it; the store calls it directly).
    const recorded = new WeakSet<object>();
    const recording = {
      async getConnection() {
        const connection = await pool.getConnection();
        const core = connection.connection as unknown as { query(...args: unknown[]): unknown };
        if (!recorded.has(core)) {
          recorded.add(core);
          const query = core.query.bind(core);
          core.query = (sql: unknown, ...rest: unknown[]) => {
            sent.push(String(sql).trim().split(/\s+/).slice(0, 3).join(' '));
            return query(sql, ...rest);
          };
        }
        return connection;
      },
      end: () => pool.end(),
    };
    const { store, payments } = await migratedStore({ pool: recording });
    const pay = (id: string) =>
      processOnce(store, { consumer: 'cost', messageId: id }, (tx) =>
        tx.query(`INSERT INTO ${payments} (order_id, amount) VALUES (?, ?)`, [id, 40]),
      );
    await pay('warm-up'); // the first transaction also sets the session up and checks the schema
    sent.length = 0;
    expect((await pay('m-1')).status).toBe('processed');
    expect(sent).toEqual([
      'START TRANSACTION',
      `INSERT INTO \`${payments.split('`')[1]}\`.processed_messages`,
      `INSERT INTO ${payments}`,
      'COMMIT',
    ]);
    sent.length = 0;
    expect((await pay('m-1')).status).toBe('duplicate');
    expect(sent).toEqual([
      'START TRANSACTION',
      `INSERT INTO \`${payments.split('`')[1]}\`.processed_messages`,
      'COMMIT',
    ]);
  });

  it('arms no timer per transaction: the pool-wait and statement bounds share one timer each', async () => {
    const { store, payments } = await migratedStore();
    const pay = (id: string) =>
      processOnce(store, { consumer: 'cost', messageId: id }, (tx) =>
        tx.query(`INSERT INTO ${payments} (order_id, amount) VALUES (?, ?)`, [id, 40]),
      );
    for (let i = 0; i < 3; i++) await pay(`warm-${i}`);
    const timers = vi.spyOn(globalThis, 'setTimeout');
    try {
      for (let i = 0; i < 20; i++) expect((await pay(`m-${i}`)).status).toBe('processed');
      // Before: one per pool acquire and one per statement, 5 per transaction (100 here). A
      // shared timer is armed again only after it fired (once per bound at most, here).
      expect(timers.mock.calls.length).toBeLessThanOrEqual(2);
    } finally {
      timers.mockRestore();
    }
  });

  it("captures one stack per transaction, the handler statement's: none for START TRANSACTION, the marker INSERT, COMMIT", async () => {
    const { store, payments } = await migratedStore();
    const pay = (id: string) =>
      processOnce(store, { consumer: 'cost', messageId: id }, (tx) =>
        tx.query(`INSERT INTO ${payments} (order_id, amount) VALUES (?, ?)`, [id, 40]),
      );
    for (let i = 0; i < 3; i++) await pay(`warm-${i}`);
    const captures = vi.spyOn(Error, 'captureStackTrace');
    try {
      for (let i = 0; i < 20; i++) expect((await pay(`m-${i}`)).status).toBe('processed');
      // Before: mysql2's promise query() captured one per statement (trace), 4 per
      // transaction (80 here), each walking the store's call chain.
      expect(captures.mock.calls.length).toBe(20);
      captures.mockClear();
      for (let i = 0; i < 20; i++) expect((await pay(`m-${i}`)).status).toBe('duplicate');
      expect(captures.mock.calls.length).toBe(0);
    } finally {
      captures.mockRestore();
    }
  });

  it("still gives errors the caller's frames: a handler statement's at once, the marker INSERT's on its way out", async () => {
    const { store, payments } = await migratedStore();
    const schema = payments.split('`')[1]!;
    async function handlerOfTheCaller(tx: { query(sql: string): Promise<unknown> }) {
      await tx.query(`SELECT * FROM \`${schema}\`.no_such_table`);
    }
    async function callerOfProcessOnce(id: string) {
      return await processOnce(store, { consumer: 'cost', messageId: id }, handlerOfTheCaller);
    }
    const handlerError = await callerOfProcessOnce('m-1').catch((error: Error) => error);
    expect((handlerError as { errno?: number }).errno).toBe(1146);
    expect((handlerError as Error).stack).toContain('handlerOfTheCaller');
    expect((handlerError as Error).stack).toContain('callerOfProcessOnce');
    // The marker INSERT (the store's own statement, sent without a stack capture) fails.
    await admin.query(`DROP TABLE \`${schema}\`.processed_messages`);
    const markerError = await callerOfProcessOnce('m-2').catch((error: Error) => error);
    expect((markerError as { errno?: number }).errno).toBe(1146);
    expect((markerError as Error).stack).toMatch(/^Error: Table .*processed_messages' doesn't exist\n/);
    // Before: mysql2's capture held ten frames of the store's own and none of the caller's.
    expect((markerError as Error).stack).toContain('callerOfProcessOnce');
  });
});
