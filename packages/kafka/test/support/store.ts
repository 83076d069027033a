/** A PostgresStore in a schema of its own plus an effect table, for the Kafka tests. */
import { randomBytes } from 'node:crypto';
import type { SqlClient } from '@oncely/core';
import { PostgresStore } from '@oncely/postgres';
import { DATABASE_URL } from './kafka.js';

export interface TestStore {
  store: PostgresStore;
  schema: string;
  /** Quoted effect table: one row per applied record (no unique key, so doubles show). */
  table: string;
  /** Inserts one effect row inside the handler's transaction. */
  insertEffect(
    tx: SqlClient,
    row: { id: string; consumer: string; partition?: number; offset?: string },
  ): Promise<void>;
  /** Committed effect rows per message ID. */
  effectCounts(): Promise<Map<string, number>>;
  rows(): Promise<
    Array<{ message_id: string; consumer: string; partition: number | null; record_offset: string | null }>
  >;
  close(passed: boolean): Promise<void>;
}

export async function createTestStore(prefix = 'oncely_kafka_test'): Promise<TestStore> {
  const schema = `${prefix}_${randomBytes(4).toString('hex')}`;
  const store = new PostgresStore({ connectionString: DATABASE_URL, schema });
  await store.migrate();
  const table = `"${schema}"."effects"`;
  await store.transaction(async (tx) => {
    await tx.query(
      `CREATE TABLE ${table} (ord bigserial PRIMARY KEY, message_id text NOT NULL, consumer text NOT NULL,
         partition integer, record_offset bigint, at timestamptz NOT NULL DEFAULT clock_timestamp())`,
    );
  });
  const rows = () =>
    store.transaction(
      async (tx) =>
        (
          await tx.query<{
            message_id: string;
            consumer: string;
            partition: number | null;
            record_offset: string | null;
          }>(`SELECT message_id, consumer, partition, record_offset FROM ${table} ORDER BY ord`)
        ).rows,
    );
  return {
    store,
    schema,
    table,
    async insertEffect(tx, row) {
      await tx.query(
        `INSERT INTO ${table} (message_id, consumer, partition, record_offset) VALUES ($1, $2, $3, $4)`,
        [row.id, row.consumer, row.partition ?? null, row.offset ?? null],
      );
    },
    async effectCounts() {
      const counts = new Map<string, number>();
      for (const row of await rows()) counts.set(row.message_id, (counts.get(row.message_id) ?? 0) + 1);
      return counts;
    },
    rows,
    async close(passed) {
      // A failing test keeps its schema as evidence.
      if (passed) {
        await store.transaction(async (tx) => {
          await tx.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        });
      }
      await store.close();
    },
  };
}

/** Waits until `check` is true, polling; throws with `what` after `timeoutMs`. */
export async function until(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
