/**
 * MySQL's default isolation is REPEATABLE READ; the store runs its own transactions at
 * READ COMMITTED, and a caller's own transaction (the `transaction` option) runs at
 * whatever the caller chose. This measures what REPEATABLE READ changes for claims: gap
 * (next-key) locks on the marker's primary key. Eight transactions at once claim batches
 * of new IDs that interleave in the index (disjoint: no two claim the same ID), and then
 * batches that all share the same IDs (concurrent duplicates). Every transaction is
 * retried on a transient error (as the core does) until it commits; the checks are on
 * the outcome (each ID claimed exactly once), and the deadlocks and lock-wait timeouts
 * seen on the way are printed for the README, not asserted (they depend on timing).
 */
import { randomUUID } from 'node:crypto';
import type { SqlClient } from '@oncely/core';
import mysql from 'mysql2/promise';
import { afterAll, describe, expect, it } from 'vitest';
import { classifyMySqlError, MySqlStore } from '../src/index.js';
import { admin, dropSchema, hasMySql, mysqlUrl, uniqueSchema } from './serverEnv.js';

const schemas: string[] = [];
afterAll(async () => {
  for (const schema of schemas) await dropSchema(schema);
  await admin.end();
});

type Level = 'READ COMMITTED' | 'REPEATABLE READ';

/** A store whose transactions are the caller's own, at `level`. */
function storeAt(level: Level, schema: string, pool: mysql.Pool): MySqlStore {
  return new MySqlStore({
    schema,
    transaction: async (work) => {
      const connection = await pool.getConnection();
      try {
        await connection.query(`SET TRANSACTION ISOLATION LEVEL ${level}`);
        await connection.query('START TRANSACTION');
        const client: SqlClient = {
          query: async (text, params) => {
            const [result] = await connection.query(text, params as unknown[]);
            return Array.isArray(result)
              ? { rows: result as never[], rowCount: result.length }
              : { rows: [], rowCount: (result as { affectedRows: number }).affectedRows };
          },
        };
        const value = await work(client);
        await connection.query('COMMIT');
        return value;
      } catch (error) {
        await connection.query('ROLLBACK').catch(() => {});
        throw error;
      } finally {
        connection.release();
      }
    },
  });
}

async function race(level: Level, batches: string[][]) {
  const schema = uniqueSchema('isolation');
  schemas.push(schema);
  await new MySqlStore({ url: mysqlUrl, schema }).migrate();
  const pool = mysql.createPool({ uri: mysqlUrl, connectionLimit: batches.length });
  await Promise.all(
    Array.from({ length: batches.length }, async () => {
      const c = await pool.getConnection();
      await c.query('SET SESSION innodb_lock_wait_timeout = 5');
      c.release();
    }),
  );
  const store = storeAt(level, schema, pool);
  const consumer = `iso-${randomUUID()}`;
  const seen = { deadlocks: 0, lockWaitTimeouts: 0 };
  const claimedBy = new Map<string, number>();
  await Promise.all(
    batches.map(async (ids) => {
      for (;;) {
        try {
          const claimed = await store.transaction(async (tx) => {
            const fresh = await store.claim(tx, consumer, ids);
            // Hold the transaction a moment, as a handler would, so the claims overlap.
            await tx.query('DO SLEEP(0.02)');
            return fresh;
          });
          for (const id of claimed) claimedBy.set(id, (claimedBy.get(id) ?? 0) + 1);
          return;
        } catch (error) {
          if (classifyMySqlError(error) !== 'transient') throw error;
          if ((error as { errno?: number }).errno === 1213) seen.deadlocks++;
          else seen.lockWaitTimeouts++;
        }
      }
    }),
  );
  await pool.end();
  return { seen, claimedBy };
}

describe.skipIf(!hasMySql)('claims at READ COMMITTED and REPEATABLE READ (MariaDB)', () => {
  const interleaved = Array.from({ length: 8 }, (_, t) =>
    Array.from({ length: 10 }, (_, i) => `id-${String(i * 8 + t).padStart(3, '0')}`),
  );
  const shared = Array.from({ length: 8 }, () =>
    Array.from({ length: 10 }, (_, i) => `id-${String(i).padStart(3, '0')}`),
  );

  for (const level of ['READ COMMITTED', 'REPEATABLE READ'] as const) {
    it(`${level}: 8 batches of 10 new, interleaved IDs each claim theirs exactly once`, async () => {
      const { seen, claimedBy } = await race(level, interleaved);
      console.log(`[isolation] ${level}, interleaved new IDs: ${JSON.stringify(seen)}`);
      expect(claimedBy.size).toBe(80);
      expect([...claimedBy.values()].every((n) => n === 1)).toBe(true);
    });

    it(`${level}: 8 batches of the same 10 IDs (concurrent duplicates) claim each exactly once`, async () => {
      const { seen, claimedBy } = await race(level, shared);
      console.log(`[isolation] ${level}, concurrent duplicates: ${JSON.stringify(seen)}`);
      expect(claimedBy.size).toBe(10);
      expect([...claimedBy.values()].every((n) => n === 1)).toBe(true);
    });
  }
});
