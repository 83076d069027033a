import { randomUUID } from 'node:crypto';
import type { IdempotencyStore, SqlClient } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { requireService } from '@oncely/testkit';
import pg from 'pg';

export const DATABASE_URL = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** True when PostgreSQL answers; with CI=true a missing server throws (the suite fails). */
export async function postgresAvailable(): Promise<boolean> {
  return requireService('PostgreSQL', async () => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    await client.end();
  });
}

/**
 * A migrated store in a schema of its own plus an effects table in another schema.
 * Effects have no unique key: a doubled effect shows up as two rows.
 */
export interface TestDatabase {
  store: IdempotencyStore<SqlClient>;
  /** Qualified name of the effects table: (message_id text, group_key text, seq int, n bigserial). */
  effects: string;
  pool: pg.Pool;
  /** Effect rows per message ID. */
  countEffects(messageId?: string): Promise<number>;
  /** Drops the schemas unless `keep` (a failed test keeps its evidence). */
  cleanup(keep?: boolean): Promise<void>;
}

export async function createTestDatabase(label: string): Promise<TestDatabase> {
  const suffix = `${label}_${randomUUID().replaceAll('-', '').slice(0, 10)}`;
  const storeSchema = `oncely_sqs_${suffix}`;
  const effectsSchema = `fx_sqs_${suffix}`;
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema: storeSchema });
  await store.migrate();
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  await pool.query(`CREATE SCHEMA ${effectsSchema}`);
  const effects = `${effectsSchema}.effects`;
  await pool.query(
    `CREATE TABLE ${effects} (message_id text NOT NULL, group_key text, seq int, n bigserial, at timestamptz DEFAULT clock_timestamp())`,
  );
  return {
    store,
    effects,
    pool,
    async countEffects(messageId) {
      const result = messageId
        ? await pool.query(`SELECT count(*)::int AS n FROM ${effects} WHERE message_id = $1`, [messageId])
        : await pool.query(`SELECT count(*)::int AS n FROM ${effects}`);
      return result.rows[0].n as number;
    },
    async cleanup(keep = false) {
      await store.close();
      if (keep) {
        console.warn(`[sqs test] keeping schemas ${storeSchema} and ${effectsSchema} for inspection`);
      } else {
        await pool.query(`DROP SCHEMA IF EXISTS ${effectsSchema} CASCADE`);
        await pool.query(`DROP SCHEMA IF EXISTS ${storeSchema} CASCADE`);
      }
      await pool.end();
    },
  };
}
