import type { HttpKeyRecord, HttpKeyStore, SqlClient } from '@oncely/core';
import { quoteSchemaName } from '../identifiers.js';

/**
 * `@oncely/http`'s idempotency keys on PostgreSQL: the table `<schema>.http_idempotency_keys`
 * with its own forward-only migrations (`<schema>.http_migrations`, apart from the store's,
 * as they were when `@oncely/http` held this SQL: existing databases carry on unchanged).
 */

/** `(class, key)` advisory lock taken by the migration: ASCII "http". */
const MIGRATION_LOCK_CLASS = 0x68747470;

const MIGRATIONS: ReadonlyArray<{ version: number; name: string; statements: readonly string[] }> = [
  {
    version: 1,
    name: '0001_http_idempotency_keys',
    statements: [
      `CREATE TABLE {{schema}}.http_idempotency_keys (
        scope            text        NOT NULL,
        idempotency_key  text        NOT NULL,
        fingerprint      text        NOT NULL,
        status           text        NOT NULL CHECK (status IN ('in_progress', 'completed')),
        owner            text,
        locked_until     timestamptz,
        response_status  integer,
        response_headers jsonb,
        response_body    bytea,
        created_at       timestamptz NOT NULL DEFAULT now(),
        expires_at       timestamptz NOT NULL,
        PRIMARY KEY (scope, idempotency_key)
      )`,
      'CREATE INDEX http_idempotency_keys_expires_at ON {{schema}}.http_idempotency_keys (expires_at)',
    ],
  },
];

/**
 * Creates the schema and applies pending migrations in `tx`, under an advisory lock
 * (concurrent instances starting at once wait, then find nothing to do). Each migration
 * first inserts its own row, so a migrator that skipped the lock hits 23505 instead of
 * applying it twice.
 */
async function migrateHttpSchema(tx: SqlClient, schema: string, quoted: string): Promise<string[]> {
  await tx.query('SELECT pg_advisory_xact_lock($1::integer, hashtext($2::text))', [
    MIGRATION_LOCK_CLASS,
    schema,
  ]);
  await tx.query(`CREATE SCHEMA IF NOT EXISTS ${quoted}`);
  await tx.query(`CREATE TABLE IF NOT EXISTS ${quoted}.http_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
  )`);
  const { rows } = await tx.query<{ version: number }>(
    `SELECT coalesce(max(version), 0)::integer AS version FROM ${quoted}.http_migrations`,
  );
  const current = Number(rows[0]?.version ?? 0);
  const pending = MIGRATIONS.filter((migration) => migration.version > current);
  for (const migration of pending) {
    await tx.query(`INSERT INTO ${quoted}.http_migrations (version, name) VALUES ($1, $2)`, [
      migration.version,
      migration.name,
    ]);
    for (const statement of migration.statements) await tx.query(statement.replaceAll('{{schema}}', quoted));
  }
  return pending.map((migration) => migration.name);
}

const MS = `* interval '1 millisecond'`;

/** Every runtime statement, built once per schema; values always travel as parameters. */
function buildHttpQueries(s: string) {
  const t = `${s}.http_idempotency_keys`;
  const response = 'response_status, response_headers::text AS response_headers, response_body';
  const responseColumns = 'response_status, response_headers, response_body';
  return {
    /**
     * $1 scope, $2 key, $3 lock name. One round trip: tries the key's transaction-scoped
     * advisory lock and reads the live row.
     */
    lockAndPeek: `SELECT pg_try_advisory_xact_lock(hashtextextended($3::text, 0)) AS locked,
        k.fingerprint, k.status, (k.locked_until IS NOT NULL AND k.locked_until > now()) AS live,
        k.response_status, k.response_headers::text AS response_headers, k.response_body
      FROM (SELECT 1) AS one
      LEFT JOIN ${t} AS k ON k.scope = $1 AND k.idempotency_key = $2 AND k.expires_at > now()`,
    /** $1 scope, $2 key. The live row (not past retention), locked. */
    read: `SELECT fingerprint, status, (locked_until IS NOT NULL AND locked_until > now()) AS live, ${response}
      FROM ${t} WHERE scope = $1 AND idempotency_key = $2 AND expires_at > now() FOR UPDATE`,
    /** $1 scope, $2 key, $3 fingerprint, $4 status, $5 headers json, $6 body, $7 retention ms. */
    saveCompleted: `INSERT INTO ${t} AS k (scope, idempotency_key, fingerprint, status, ${responseColumns}, expires_at)
      VALUES ($1, $2, $3, 'completed', $4, $5::text::jsonb, $6, now() + $7::double precision ${MS})
      ON CONFLICT (scope, idempotency_key) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, status = 'completed', owner = NULL, locked_until = NULL,
        response_status = EXCLUDED.response_status, response_headers = EXCLUDED.response_headers,
        response_body = EXCLUDED.response_body, created_at = now(), expires_at = EXCLUDED.expires_at`,
    /** $1 scope, $2 key, $3 fingerprint, $4 owner, $5 lease ms, $6 retention ms. */
    acquire: `INSERT INTO ${t} AS k (scope, idempotency_key, fingerprint, status, owner, locked_until, expires_at)
      VALUES ($1, $2, $3, 'in_progress', $4, now() + $5::double precision ${MS}, now() + $6::double precision ${MS})
      ON CONFLICT (scope, idempotency_key) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, status = 'in_progress', owner = EXCLUDED.owner,
        locked_until = EXCLUDED.locked_until, response_status = NULL, response_headers = NULL,
        response_body = NULL, created_at = now(), expires_at = EXCLUDED.expires_at
        WHERE k.expires_at <= now()
          OR (k.status = 'in_progress' AND k.locked_until <= now() AND k.fingerprint = EXCLUDED.fingerprint)
      RETURNING (k.xmax = 0) AS inserted`,
    /** $1 scope, $2 key, $3 owner, $4 lease ms. */
    renew: `UPDATE ${t} SET locked_until = now() + $4::double precision ${MS}
      WHERE scope = $1 AND idempotency_key = $2 AND owner = $3 AND status = 'in_progress' RETURNING 1 AS renewed`,
    /** $1 scope, $2 key, $3 owner, $4 status, $5 headers json, $6 body, $7 retention ms. */
    complete: `UPDATE ${t} SET status = 'completed', locked_until = NULL, response_status = $4,
        response_headers = $5::text::jsonb, response_body = $6, expires_at = now() + $7::double precision ${MS}
      WHERE scope = $1 AND idempotency_key = $2 AND owner = $3 AND status = 'in_progress' RETURNING 1 AS completed`,
    /** $1 scope, $2 key, $3 owner. */
    release: `DELETE FROM ${t} WHERE scope = $1 AND idempotency_key = $2 AND owner = $3 AND status = 'in_progress'
      RETURNING 1 AS released`,
    /** $1 batch size. Rows past retention, oldest first; claims still held are kept. */
    prune: `WITH doomed AS (
        SELECT scope, idempotency_key FROM ${t}
        WHERE expires_at <= now() AND NOT (status = 'in_progress' AND locked_until > now())
        ORDER BY expires_at LIMIT $1 FOR UPDATE SKIP LOCKED
      )
      DELETE FROM ${t} AS k USING doomed
      WHERE k.scope = doomed.scope AND k.idempotency_key = doomed.idempotency_key
      RETURNING 1 AS pruned`,
  };
}

interface KeyRow {
  fingerprint: string;
  status: 'in_progress' | 'completed';
  live: boolean;
  response_status: number | null;
  response_headers: string | null;
  response_body: Uint8Array | null;
}

function toRecord(row: KeyRow): HttpKeyRecord {
  return {
    fingerprint: row.fingerprint,
    status: row.status,
    live: row.live === true,
    responseStatus: row.response_status,
    responseHeaders: row.response_headers,
    responseBody: row.response_body,
  };
}

/**
 * The HTTP keys of a PostgresStore in `schema`.
 *
 * @param transaction the store's own `transaction()`, for `migrate()`
 */
export function createPostgresHttpKeys(
  schema: string,
  transaction: <T>(work: (tx: SqlClient) => Promise<T>) => Promise<T>,
): HttpKeyStore<SqlClient> {
  const quoted = quoteSchemaName(schema, 'schema');
  const q = buildHttpQueries(quoted);
  return {
    migrate: () => transaction((tx) => migrateHttpSchema(tx, schema, quoted)),
    async tryLock(tx, scope, key) {
      const { rows } = await tx.query<KeyRow & { locked: boolean }>(q.lockAndPeek, [
        scope,
        key,
        `${schema}:${scope.length}:${scope}:${key}`,
      ]);
      const row = rows[0];
      return { locked: row?.locked === true, record: row?.status ? toRecord(row) : undefined };
    },
    async read(tx, scope, key) {
      const row = (await tx.query<KeyRow>(q.read, [scope, key])).rows[0];
      return row ? toRecord(row) : undefined;
    },
    async saveCompleted(tx, { scope, key, fingerprint, response, retentionMs }) {
      await tx.query(q.saveCompleted, [
        scope,
        key,
        fingerprint,
        response.status,
        response.headers,
        response.body,
        retentionMs,
      ]);
    },
    async acquire(tx, { scope, key, fingerprint, owner, leaseMs, retentionMs }) {
      const { rows } = await tx.query(q.acquire, [scope, key, fingerprint, owner, leaseMs, retentionMs]);
      return rows.length === 1;
    },
    async renew(tx, { scope, key, owner, leaseMs }) {
      return (await tx.query(q.renew, [scope, key, owner, leaseMs])).rows.length === 1;
    },
    async complete(tx, { scope, key, owner, response, retentionMs }) {
      const { rows } = await tx.query(q.complete, [
        scope,
        key,
        owner,
        response.status,
        response.headers,
        response.body,
        retentionMs,
      ]);
      return rows.length === 1;
    },
    async release(tx, { scope, key, owner }) {
      return (await tx.query(q.release, [scope, key, owner])).rows.length === 1;
    },
    async prune(tx, batchSize) {
      return (await tx.query(q.prune, [batchSize])).rows.length;
    },
  };
}
