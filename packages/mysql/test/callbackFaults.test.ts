/**
 * Faults on issue 31's callback path (statements sent on mysql2's callback connection): a
 * handler statement answered only after queryTimeoutMs, and mysql2's connection closed
 * under the store mid-handler (its closed-state callback arrives synchronously).
 */
import { processOnce, StoreUnavailableError } from '@oncely/core';
import mysql from 'mysql2/promise';
import { afterAll, describe, expect, it } from 'vitest';
import { MySqlStore } from '../src/index.js';
import { admin, dropSchema, hasMySql, mysqlUrl, uniqueSchema } from './serverEnv.js';

const schemas: string[] = [];
const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const close of closers) await close().catch(() => {});
  for (const schema of schemas) await dropSchema(schema);
  await admin.end();
});

/** A store on a mysql2 pool of 2; `last()`: the connection it checked out last. */
async function storeOnPool(options: { queryTimeoutMs?: number } = {}) {
  const schema = uniqueSchema('callback');
  schemas.push(schema);
  await new MySqlStore({ url: mysqlUrl, schema }).migrate();
  await admin.query(`CREATE TABLE \`${schema}\`.effects (id VARCHAR(64) NOT NULL)`);
  const pool = mysql.createPool({ uri: mysqlUrl, connectionLimit: 2 });
  closers.push(() => pool.end());
  let last: mysql.PoolConnection | undefined;
  const store = new MySqlStore({
    pool: {
      getConnection: async () => {
        last = await pool.getConnection();
        return last;
      },
      end: () => pool.end(),
    },
    schema,
    ...options,
  });
  closers.push(() => store.close());
  const effects = `\`${schema}\`.effects`;
  const count = async (id: string) => {
    const [rows] = await admin.query(`SELECT COUNT(*) AS n FROM ${effects} WHERE id = ?`, [id]);
    return Number((rows as Array<{ n: number }>)[0]!.n);
  };
  return { store, pool, effects, count, last: () => last!, schema };
}

describe.skipIf(!hasMySql)("faults on the store's callback path", () => {
  it('a handler statement answered after queryTimeoutMs: unavailable, connection destroyed, the late answer changes nothing', async () => {
    const { store, pool, effects, count, schema } = await storeOnPool({ queryTimeoutMs: 400 });
    const lock = `${schema}_held`;
    const holder = await admin.getConnection();
    try {
      await holder.query('SELECT GET_LOCK(?, 0)', [lock]);
      let session = 0;
      const error = await processOnce(store, { consumer: 'late', messageId: 'm-1' }, async (tx) => {
        await tx.query(`INSERT INTO ${effects} VALUES ('m-1')`);
        session = Number((await tx.query<{ id: number }>('SELECT CONNECTION_ID() AS id')).rows[0]!.id);
        await tx.query('SELECT GET_LOCK(?, 10)', [lock]);
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect((error as Error).message).toMatch(/within 400 ms \(queryTimeoutMs\)/);
      // The answer arrives now, on the destroyed connection: nothing settles twice or lands.
      await holder.query('SELECT RELEASE_LOCK(?)', [lock]);
      await expect
        .poll(async () => {
          const [rows] = await admin.query(
            'SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID = ?',
            [session],
          );
          return Number((rows as Array<{ n: number }>)[0]!.n);
        })
        .toBe(0);
      expect(await count('m-1')).toBe(0);
      expect((pool.pool as unknown as { _allConnections: { length: number } })._allConnections.length).toBe(
        0,
      );
      expect(
        (
          await processOnce(store, { consumer: 'late', messageId: 'm-1' }, (tx) =>
            tx.query(`INSERT INTO ${effects} VALUES ('m-1')`),
          )
        ).status,
      ).toBe('processed');
      expect(await count('m-1')).toBe(1);
    } finally {
      holder.release();
    }
  });

  it("mysql2's connection closed under the store mid-handler or before COMMIT: unavailable, nothing lands, the retry processes", async () => {
    const { store, effects, count, last } = await storeOnPool();
    for (const when of ['before-statement', 'before-commit']) {
      const error = await processOnce(store, { consumer: 'closed', messageId: when }, async (tx) => {
        await tx.query(`INSERT INTO ${effects} VALUES (?)`, [when]);
        last().connection.destroy();
        if (when === 'before-statement') await tx.query('DO 1');
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect(store.classifyError(error)).toBe('unavailable');
      expect(await count(when)).toBe(0);
      expect(
        (
          await processOnce(store, { consumer: 'closed', messageId: when }, (tx) =>
            tx.query(`INSERT INTO ${effects} VALUES (?)`, [when]),
          )
        ).status,
      ).toBe('processed');
      expect(await count(when)).toBe(1);
    }
  });
});
