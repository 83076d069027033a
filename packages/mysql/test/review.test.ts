/**
 * The second hostile review on the real MariaDB: a session killed from another connection
 * mid-transaction (KILL and KILL QUERY), a lock wait timeout, 16 concurrent duplicates of
 * one message, and a user pool whose sessions default to REPEATABLE READ.
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

async function migrated(options: { lockTimeoutMs?: number; poolMax?: number } = {}) {
  const schema = uniqueSchema('review');
  schemas.push(schema);
  const store = new MySqlStore({ url: mysqlUrl, schema, ...options });
  closers.push(() => store.close());
  await store.migrate();
  await admin.query(`CREATE TABLE \`${schema}\`.effects (id VARCHAR(64) NOT NULL)`);
  return { store, schema, effects: `\`${schema}\`.effects` };
}

async function count(table: string): Promise<number> {
  const [rows] = await admin.query(`SELECT COUNT(*) AS n FROM ${table}`);
  return Number((rows as Array<{ n: number }>)[0]!.n);
}

describe.skipIf(!hasMySql)('MySqlStore on the real MariaDB: the second hostile review', () => {
  it('KILL <id> of the session from another connection mid-transaction: unavailable, nothing lands, the next run processes it', async () => {
    const { store, effects } = await migrated();
    const key = { consumer: 'kill', messageId: 'm-1' };
    const error = await processOnce(store, key, async (tx) => {
      await tx.query(`INSERT INTO ${effects} VALUES (?)`, ['m-1']);
      const { rows } = await tx.query<{ id: number }>('SELECT CONNECTION_ID() AS id');
      await admin.query(`KILL ${Number(rows[0]!.id)}`);
      await tx.query('DO 0');
    }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(store.classifyError(error)).toBe('unavailable');
    expect(await count(effects)).toBe(0);
    expect(
      (await processOnce(store, key, (tx) => tx.query(`INSERT INTO ${effects} VALUES (?)`, ['m-1']))).status,
    ).toBe('processed');
    expect(await count(effects)).toBe(1);
  });

  it('KILL QUERY of a statement mid-transaction: marker and effect land together or not at all, then exactly once', async () => {
    const { store, effects } = await migrated();
    const key = { consumer: 'killquery', messageId: 'm-1' };
    const error = await processOnce(store, key, async (tx) => {
      await tx.query(`INSERT INTO ${effects} VALUES (?)`, ['m-1']);
      const { rows } = await tx.query<{ id: number }>('SELECT CONNECTION_ID() AS id');
      const id = Number(rows[0]!.id);
      const sleeping = tx.query('SELECT SLEEP(30)');
      // Wait until the server shows the statement running, then kill only the statement.
      for (;;) {
        const [list] = await admin.query('SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = ?', [
          id,
        ]);
        if (String((list as Array<{ INFO: unknown }>)[0]?.INFO ?? '').includes('SLEEP')) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      await admin.query(`KILL QUERY ${id}`);
      await sleeping;
    }).catch((e: unknown) => e);
    // MariaDB answers SLEEP killed by KILL QUERY with 1 (no error): the handler returns and
    // commits; either way the marker and the effect land together or not at all.
    const landed = await count(effects);
    if (error === undefined) expect(landed).toBe(1);
    else expect(landed).toBe(0);
    expect(
      (await processOnce(store, key, (tx) => tx.query(`INSERT INTO ${effects} VALUES (?)`, ['m-1']))).status,
    ).toBe(landed === 1 ? 'duplicate' : 'processed');
    expect(await count(effects)).toBe(1);
  });

  it('a claim waiting on an open transaction past lockTimeoutMs fails with 1205, classified transient', async () => {
    const { store } = await migrated({ lockTimeoutMs: 1000 });
    const key = { consumer: 'wait', messageId: 'm-1' };
    let release!: () => void;
    const held = new Promise<void>((resolve) => {
      release = resolve;
    });
    let claimed!: () => void;
    const isClaimed = new Promise<void>((resolve) => {
      claimed = resolve;
    });
    const holder = processOnce(store, key, async () => {
      claimed();
      await held;
    });
    await isClaimed;
    const error = await processOnce(store, key, async () => {}).catch((e: unknown) => e);
    release();
    expect((await holder).status).toBe('processed');
    expect((error as { errno?: number }).errno).toBe(1205);
    expect(store.classifyError(error)).toBe('transient');
  });

  it('16 concurrent duplicates of one message: one effect, 15 duplicates (retrying transient errors)', async () => {
    const { store, effects } = await migrated({ poolMax: 16 });
    const key = { consumer: 'dup', messageId: 'm-1' };
    const statuses = await Promise.all(
      Array.from({ length: 16 }, async () => {
        for (;;) {
          try {
            return (
              await processOnce(store, key, (tx) => tx.query(`INSERT INTO ${effects} VALUES (?)`, ['m-1']))
            ).status;
          } catch (error) {
            if (store.classifyError(error) !== 'transient') throw error;
          }
        }
      }),
    );
    expect(statuses.filter((s) => s === 'processed')).toHaveLength(1);
    expect(statuses.filter((s) => s === 'duplicate')).toHaveLength(15);
    expect(await count(effects)).toBe(1);
  });

  it('a user pool whose sessions default to REPEATABLE READ: the store runs its transactions at READ COMMITTED', async () => {
    const schema = uniqueSchema('review');
    schemas.push(schema);
    const pool = mysql.createPool({ uri: mysqlUrl, connectionLimit: 2 });
    closers.push(() => pool.end());
    pool.on('connection', (connection) => {
      connection.query('SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ');
    });
    const store = new MySqlStore({ pool, schema });
    await store.migrate();
    const level = await store.transaction(async (tx) => {
      const { rows } = await tx.query<{ level: string }>('SELECT @@tx_isolation AS level');
      return rows[0]!.level;
    });
    expect(level).toBe('READ-COMMITTED');
  });
});
