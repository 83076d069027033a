import type { SqlClient } from '@oncely/core';

/** `(class, key)` advisory lock taken by {@link migrateHttpSchema}: ASCII "http". */
const MIGRATION_LOCK_CLASS = 0x68747470;

/**
 * Forward-only migrations of this package's own tables, kept apart from the store's
 * (`<schema>.http_migrations`), so `@oncely/postgres` needs no change to host them.
 */
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
 * Creates the schema and applies pending migrations in the caller's transaction, under an
 * advisory lock (concurrent instances starting at once wait, then find nothing to do).
 * Each migration first inserts its own row, so a migrator that skipped the lock hits
 * 23505 instead of applying it twice.
 */
export async function migrateHttpSchema(tx: SqlClient, schema: string, quoted: string): Promise<string[]> {
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
export function buildHttpQueries(s: string) {
  const t = `${s}.http_idempotency_keys`;
  const response = 'response_status, response_headers, response_body';
  return {
    /**
     * $1 scope, $2 key, $3 lock name. Transactional mode, one round trip: tries the key's
     * transaction-scoped advisory lock (one request per key runs at a time; the others get
     * 409 at once) and reads the live row. The read's snapshot may predate a commit that
     * released the lock, so a request that got the lock reads again ({@link read}) before
     * deciding to run; a completed row seen here is a safe replay either way.
     */
    lockAndPeek: `SELECT pg_try_advisory_xact_lock(hashtextextended($3::text, 0)) AS locked,
        k.fingerprint, k.status, (k.locked_until IS NOT NULL AND k.locked_until > now()) AS live,
        k.response_status, k.response_headers, k.response_body
      FROM (SELECT 1) AS one
      LEFT JOIN ${t} AS k ON k.scope = $1 AND k.idempotency_key = $2 AND k.expires_at > now()`,
    /** $1 scope, $2 key. The live row (not past retention), locked. */
    read: `SELECT fingerprint, status, (locked_until IS NOT NULL AND locked_until > now()) AS live, ${response}
      FROM ${t} WHERE scope = $1 AND idempotency_key = $2 AND expires_at > now() FOR UPDATE`,
    /** $1 scope, $2 key, $3 fingerprint, $4 status, $5 headers json, $6 body, $7 retention ms. */
    saveCompleted: `INSERT INTO ${t} AS k (scope, idempotency_key, fingerprint, status, ${response}, expires_at)
      VALUES ($1, $2, $3, 'completed', $4, $5::text::jsonb, $6, now() + $7::double precision ${MS})
      ON CONFLICT (scope, idempotency_key) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, status = 'completed', owner = NULL, locked_until = NULL,
        response_status = EXCLUDED.response_status, response_headers = EXCLUDED.response_headers,
        response_body = EXCLUDED.response_body, created_at = now(), expires_at = EXCLUDED.expires_at`,
    /**
     * $1 scope, $2 key, $3 fingerprint, $4 owner, $5 lease ms, $6 retention ms. Inserts an
     * in-progress claim, or takes over one past its deadline (same fingerprint) or a row
     * past retention. Returns nothing when the row is completed, live, or another payload's.
     */
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

export type HttpQueries = ReturnType<typeof buildHttpQueries>;

/** Quotes a plain identifier (letters, digits, `_`); anything else is refused. */
export function quoteSchema(schema: string): string {
  if (typeof schema !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]{0,62}$/.test(schema)) {
    throw new Error(`schema must be a plain identifier (letters, digits, _); got ${JSON.stringify(schema)}`);
  }
  return `"${schema}"`;
}
