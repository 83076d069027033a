import type { IdempotencyStore, SqlClient } from '@oncely/core';
import { openStore } from '@oncely/core';
import { LATEST_VERSION, PostgresStore, quoteIdentifier } from '@oncely/postgres';
import type { CliIo } from './main.js';

/** What the CLI needs of a store, whichever database it is on. */
export interface CliStore extends IdempotencyStore<SqlClient> {
  migrate(): Promise<{ applied: string[]; version: number }>;
  prune(options: {
    olderThan: Date | number;
    batchSize?: number;
    consumer?: string;
    dryRun?: boolean;
    onProgress?: (deleted: number) => void;
  }): Promise<number>;
}

/** A marker row as `inspect` shows it. */
export interface MarkerRow {
  status: 'completed' | 'in_progress';
  processed_at: Date;
  locked_until: Date | null;
  owner: string | null;
  result: unknown;
  expired: boolean;
}

/**
 * The CLI's own read-only SQL (`stats`, `inspect`), in the store's dialect. Everything
 * else goes through the store's methods.
 */
export interface CliQueries {
  /** [consumer]: markers per consumer and status (consumer, status, n, oldest, newest). */
  markerStats(withConsumer: boolean): string;
  /** [consumer]: attempt counters per consumer (consumer, n, retried). */
  attemptStats(withConsumer: boolean): string;
  /** consumer, message ID. */
  readonly marker: string;
  /** consumer, message ID. */
  readonly attempts: string;
  /** Turns a marker row of this database into a {@link MarkerRow}. */
  markerRow(row: Record<string, unknown>): MarkerRow;
}

/** An opened store with its dialect. */
export interface OpenedStore {
  store: CliStore;
  kind: 'postgres' | 'mysql';
  queries: CliQueries;
  /** The schema version this CLI's store package works with, where it tells. */
  latestVersion?: number;
}

/**
 * Closes the store at the end of a command and returns the command's exit code: a close
 * that fails is printed (`<prefix>: closing the store failed: ...`) and turns a success
 * into exit 1 (a script must not read "done" when the connections did not end cleanly);
 * a command that failed keeps its own code. Never rejects: main() answers an exit code.
 *
 * @example
 * ```ts
 * return closeCliStore(store, code, 'oncely prune', io);
 * ```
 */
export async function closeCliStore(
  store: { close(): Promise<void> },
  code: number,
  prefix: string,
  io: CliIo,
): Promise<number> {
  try {
    await store.close();
    return code;
  } catch (error) {
    io.err.write(
      `${prefix}: closing the store failed: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    return code === 0 ? 1 : code;
  }
}

/**
 * Opens the store a database URL names: `mysql://` / `mariadb://` load `@oncely/mysql`
 * from the application (an optional package: a missing one is a clear error naming it),
 * anything else is PostgreSQL.
 */
export async function openCliStore(url: string, schema: string): Promise<OpenedStore> {
  if (/^(mysql|mariadb):/i.test(url)) {
    const store = (await openStore({ url, schema }, '--database-url')) as unknown as CliStore;
    return { store, kind: 'mysql', queries: mysqlQueries(schema) };
  }
  return {
    store: new PostgresStore({ connectionString: url, schema }),
    kind: 'postgres',
    queries: postgresQueries(schema),
    latestVersion: LATEST_VERSION,
  };
}

function postgresQueries(schema: string): CliQueries {
  const s = quoteIdentifier(schema, 'schema');
  const where = (withConsumer: boolean) => (withConsumer ? 'WHERE consumer = $1' : '');
  return {
    markerStats: (c) =>
      `SELECT consumer, status, count(*)::int AS n, min(processed_at) AS oldest, max(processed_at) AS newest
         FROM ${s}.processed_messages ${where(c)} GROUP BY consumer, status ORDER BY consumer, status`,
    attemptStats: (c) =>
      `SELECT consumer, count(*)::int AS n, count(*) FILTER (WHERE attempts > 1)::int AS retried
         FROM ${s}.attempts ${where(c)} GROUP BY consumer ORDER BY consumer`,
    marker: `SELECT status, processed_at, locked_until, owner, result, coalesce(locked_until < now(), false) AS expired
           FROM ${s}.processed_messages WHERE consumer = $1 AND message_id = $2`,
    attempts: `SELECT attempts, updated_at FROM ${s}.attempts WHERE consumer = $1 AND message_id = $2`,
    markerRow: (row) => row as unknown as MarkerRow,
  };
}

function mysqlQueries(schema: string): CliQueries {
  if (!/^[A-Za-z_][A-Za-z0-9_]{0,63}$/.test(schema)) {
    throw new Error(`--schema must be a plain identifier; got ${JSON.stringify(schema)}`);
  }
  const s = `\`${schema}\``;
  const where = (withConsumer: boolean) => (withConsumer ? 'WHERE consumer = ?' : '');
  // Keys are VARBINARY (compared byte by byte): shown as text. Times are UTC.
  return {
    markerStats: (c) =>
      `SELECT CAST(consumer AS CHAR) AS consumer, status, COUNT(*) AS n, MIN(processed_at) AS oldest, MAX(processed_at) AS newest
         FROM ${s}.processed_messages ${where(c)} GROUP BY consumer, status ORDER BY consumer, status`,
    attemptStats: (c) =>
      `SELECT CAST(consumer AS CHAR) AS consumer, COUNT(*) AS n, CAST(SUM(attempts > 1) AS SIGNED) AS retried
         FROM ${s}.attempts ${where(c)} GROUP BY consumer ORDER BY consumer`,
    marker: `SELECT status, processed_at, locked_until, owner, result,
           COALESCE(locked_until < UTC_TIMESTAMP(6), 0) AS expired
         FROM ${s}.processed_messages WHERE consumer = ? AND message_id = ?`,
    attempts: `SELECT attempts, updated_at FROM ${s}.attempts WHERE consumer = ? AND message_id = ?`,
    markerRow: (row) => ({
      ...(row as unknown as MarkerRow),
      result: parseJson(row.result),
      expired: Number(row.expired) === 1,
    }),
  };
}

function parseJson(value: unknown): unknown {
  if (typeof value !== 'string') return value ?? null;
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}
