/**
 * A caller's pool whose connections are wrappers around mysql2's (logging, tracing, fault
 * injection): the store sends its statements through the wrapper's `query()`, the method
 * MySqlPoolConnectionLike declares, and skips it for mysql2's callback connection only when
 * that `query()` is mysql2's own promise `query()` (issue 31's fast path).
 */
import { processOnce } from '@oncely/core';
import mysql from 'mysql2/promise';
import { afterAll, describe, expect, it } from 'vitest';
import type { MySqlPoolConnectionLike } from '../src/index.js';
import { MySqlStore } from '../src/index.js';
import { admin, dropSchema, hasMySql, mysqlUrl, uniqueSchema } from './serverEnv.js';

const schemas: string[] = [];
const closers: Array<() => Promise<unknown>> = [];
afterAll(async () => {
  for (const close of closers) await close().catch(() => {});
  for (const schema of schemas) await dropSchema(schema);
  await admin.end();
});

type Wrap = (connection: mysql.PoolConnection, seen: string[]) => MySqlPoolConnectionLike;

/** A store on a caller's pool whose checkouts are `wrap`ped; `seen`: what the wrappers were asked to run. */
async function storeOver(wrap: Wrap) {
  const schema = uniqueSchema('wrapped');
  schemas.push(schema);
  await new MySqlStore({ url: mysqlUrl, schema }).migrate();
  await admin.query(`CREATE TABLE \`${schema}\`.effects (id VARCHAR(64) NOT NULL)`);
  const pool = mysql.createPool({ uri: mysqlUrl, connectionLimit: 2 });
  closers.push(() => pool.end());
  const seen: string[] = [];
  const store = new MySqlStore({
    pool: { getConnection: async () => wrap(await pool.getConnection(), seen), end: () => pool.end() },
    schema,
  });
  closers.push(() => store.close());
  const run = (id: string) =>
    processOnce(store, { consumer: 'wrapped', messageId: id }, (tx) =>
      tx.query(`INSERT INTO \`${schema}\`.effects VALUES (?)`, [id]),
    );
  return { run, seen };
}

/** A wrapper that logs each statement, then runs it on mysql2's promise connection. */
function logging(connection: mysql.PoolConnection, seen: string[]) {
  return {
    query: (sql: string, values?: unknown) => {
      seen.push(sql.trim().split(/\s+/, 1)[0]!);
      return connection.query(sql, values as never) as Promise<[unknown, unknown]>;
    },
    release: () => connection.release(),
    destroy: () => connection.destroy(),
  };
}

describe.skipIf(!hasMySql)("a caller's pool of wrapped connections", () => {
  it("a wrapper that forwards mysql2's callback connection (for its status flags): its query() still runs every statement", async () => {
    // Before: the store found `connection.query` and sent everything there, past the
    // wrapper: it saw no statement at all.
    const { run, seen } = await storeOver((connection, seen) => ({
      ...logging(connection, seen),
      connection: connection.connection as unknown as MySqlPoolConnectionLike['connection'],
    }));
    expect((await run('m-1')).status).toBe('processed');
    expect(seen).toEqual(expect.arrayContaining(['START', 'INSERT', 'COMMIT']));
    expect(seen.filter((s) => s === 'INSERT')).toHaveLength(2);
  });

  it('a wrapper whose connection is the promise connection (as mysql2 types it): processes, through the wrapper', async () => {
    // Before: every transaction failed with mysql2's "Callback function is not available
    // with promise clients." (the store passed a callback to a promise query()).
    const { run, seen } = await storeOver((connection, seen) => ({
      ...logging(connection, seen),
      connection: connection as unknown as MySqlPoolConnectionLike['connection'],
    }));
    expect((await run('m-1')).status).toBe('processed');
    expect((await run('m-1')).status).toBe('duplicate');
    expect(seen).toContain('COMMIT');
  });

  it("a transparent Proxy of mysql2's connection keeps the callback path and processes once", async () => {
    const { run, seen } = await storeOver((connection) => new Proxy(connection, {}) as never);
    expect((await run('m-1')).status).toBe('processed');
    expect((await run('m-1')).status).toBe('duplicate');
    expect(seen).toEqual([]);
  });
});
