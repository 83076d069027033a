// PostgreSQL plumbing shared by the scenarios: a schema per run holding the business
// table, the bare-transaction baseline, and a pg.Pool built with the settings
// PostgresStore uses for its own pool (so baseline and candidate differ only in SQL).
import pg from 'pg';
import { DATABASE_URL } from './common.mjs';

/**
 * The pool settings of `new PostgresStore({ connectionString, poolMax })` (see
 * packages/postgres/src/drivers/PgDriver.ts createPool): the baseline gets the same.
 */
export function benchPool(max) {
  return new pg.Pool({
    connectionString: DATABASE_URL,
    max,
    connectionTimeoutMillis: 10_000,
    keepAlive: true,
  });
}

/** Creates `schema` with the business table every scenario writes one row into per message. */
export async function createBenchSchema(schema) {
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(`CREATE SCHEMA "${schema}"`);
    await admin.query(`CREATE TABLE "${schema}".payments (order_id text NOT NULL, amount integer NOT NULL)`);
  } finally {
    await admin.end();
  }
}

/** Drops a run's schema (and with it the store's tables, when they live there). */
export async function dropSchema(schema) {
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await admin.end();
  }
}

/** The one business statement: the same text on every side of every comparison. */
export function businessInsert(schema) {
  return `INSERT INTO "${schema}".payments (order_id, amount) VALUES ($1, $2)`;
}

/** The same rows for a whole batch in one statement ($1 order IDs, $2 amounts). */
export function businessInsertMany(schema) {
  return `INSERT INTO "${schema}".payments (order_id, amount) SELECT * FROM unnest($1::text[], $2::int[])`;
}

/**
 * A bench consumer's handler option: per message, the business INSERT; with `batch`,
 * `batchHandler` with one INSERT for the batch's rows (the batch path as documented).
 */
export function benchHandlers(schema, batch) {
  if (!batch) {
    const insert = businessInsert(schema);
    return {
      handler: async (message, ctx) => {
        await ctx.tx.query(insert, [message.body.orderId, message.body.amount]);
      },
    };
  }
  const insertMany = businessInsertMany(schema);
  return {
    batchHandler: async (entries, tx) => {
      await tx.query(insertMany, [
        entries.map((entry) => entry.message.body.orderId),
        entries.map((entry) => entry.message.body.amount),
      ]);
    },
  };
}

/**
 * The baseline a user without Oncely writes: BEGIN, the insert, COMMIT on a pooled
 * client (3 round trips), released even when a statement fails.
 */
export function bareTransaction(pool, schema) {
  const insert = businessInsert(schema);
  return async (orderId) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      try {
        await client.query(insert, [orderId, 40]);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      }
    } finally {
      client.release();
    }
  };
}

/** Opens `n` pooled connections up front, so no round pays for connection setup. */
export async function fillPool(pool, n) {
  const clients = await Promise.all(Array.from({ length: n }, () => pool.connect()));
  for (const client of clients) client.release();
}

/** `PostgreSQL 15.20 (Debian ...)` → `15.20`. */
export async function serverVersion() {
  const client = new pg.Client({ connectionString: DATABASE_URL });
  await client.connect();
  try {
    const { rows } = await client.query('SHOW server_version');
    const settings = await client.query(
      `SELECT name, setting FROM pg_settings
       WHERE name IN ('synchronous_commit', 'fsync', 'wal_sync_method', 'shared_buffers', 'max_connections')`,
    );
    return {
      version: String(rows[0].server_version).split(' ')[0],
      settings: Object.fromEntries(settings.rows.map((row) => [row.name, row.setting])),
    };
  } finally {
    await client.end();
  }
}

/** The table the hand-written marker loops write (the same key as the store's markers). */
export async function createHandMarkers(schema) {
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  try {
    await admin.query(handMarkersDdl(schema));
  } finally {
    await admin.end();
  }
}

/**
 * The statement that creates the hand-written loops' marker table, `hand_markers` in
 * `schema`: a copy of the shape of Oncely's `processed_messages` in `storeSchema` (migrated
 * there first), with its columns, defaults, CHECK and indexes (the `processed_at` one that
 * retention needs), taken from the migrations themselves. So a hand loop writes the same
 * marker row Oncely does, as the core scenario's seed pattern (which writes into
 * `processed_messages` itself). A bare `(consumer, message_id)` table, which these loops
 * used before, ran 6-13 % faster on this machine: a cheaper table, not a cheaper loop.
 */
export function handMarkersDdl(schema, storeSchema = schema) {
  return `CREATE TABLE IF NOT EXISTS "${schema}".hand_markers (LIKE "${storeSchema}".processed_messages INCLUDING ALL)`;
}

/**
 * The marker transaction a careful user writes by hand around a raw consume loop: BEGIN,
 * INSERT the marker ON CONFLICT DO NOTHING, the business INSERT when the marker is new,
 * COMMIT, on a pooled client (4 round trips). Returns `(messageId, orderId) => Promise`.
 */
export function markerTransaction(pool, schema, consumer) {
  const insert = businessInsert(schema);
  const mark = `INSERT INTO "${schema}".hand_markers (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`;
  return async (messageId, orderId) => {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      try {
        const claimed = await client.query(mark, [consumer, messageId]);
        if (claimed.rowCount === 1) await client.query(insert, [orderId, 40]);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      }
    } finally {
      client.release();
    }
  };
}

/**
 * Rows in the store's attempts table: the happy path writes none (issue 15 measures it:
 * an attempts row on the happy path would be a whole extra commit per message).
 */
export async function countAttempts(schema) {
  const admin = new pg.Client({ connectionString: DATABASE_URL });
  await admin.connect();
  try {
    const { rows } = await admin.query(`SELECT count(*)::int AS n FROM "${schema}".attempts`);
    return rows[0].n;
  } finally {
    await admin.end();
  }
}
