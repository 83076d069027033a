import { isDeepStrictEqual } from 'node:util';
import type { DeadLetterSelection, OutboxStore, OutboxWrite, SqlClient } from '@oncely/core';
import { ConfigError, checkOutboxWrite, encodeOutboxBody, OutboxIdConflictError } from '@oncely/core';
import {
  type DiscardedOutboxRow,
  type OutboxDeadLetter,
  type OutboxDiscardReport,
  type OutboxFailureGroup,
  type OutboxRetryReport,
  readDeadLetters,
  selectDeadLetters,
} from './outboxDeadLetters.js';
import type { OutboxQueries } from './outboxQueries.js';
import { buildOutboxQueries } from './outboxQueries.js';

/**
 * The outbox's backlog, as {@link PostgresOutbox.stats} reports it.
 *
 * @example
 * ```ts
 * const { pending, failed, lagMs } = await store.outbox.stats();
 * ```
 */
export interface OutboxStats {
  /** Rows waiting to be sent (including rows waiting out a retry backoff). */
  pending: number;
  /** Dead-lettered rows: their sends kept failing; `retry()` sends them again. */
  failed: number;
  /** Age of the oldest pending row in ms, on the database clock: the relay's lag. Null when none is pending. */
  lagMs: number | null;
}

/**
 * A row that failed at least once, as {@link PostgresOutbox.stuck} lists it.
 *
 * @example
 * ```ts
 * for (const row of await store.outbox.stuck()) console.log(row.id, row.status, row.lastError);
 * ```
 */
export interface StuckOutboxRow {
  id: string;
  destination: string;
  key: string | null;
  /** `failed`: dead-lettered; `pending`: still being retried. */
  status: 'pending' | 'failed';
  attempts: number;
  lastError: string | null;
  createdAt: Date;
  nextAttemptAt: Date | null;
}

/**
 * The backlog counts, in `client`'s transaction. With `timeoutMs` the query is cut off by
 * the server after that long (`SET LOCAL statement_timeout`): what the relay's gauges use.
 */
export async function readOutboxStats(
  client: SqlClient,
  queries: OutboxQueries,
  timeoutMs?: number,
): Promise<OutboxStats> {
  if (timeoutMs !== undefined) await client.query(`SET LOCAL statement_timeout = ${Math.ceil(timeoutMs)}`);
  const { rows } = await client.query<{
    pending: number;
    failed: number;
    oldest_pending_ms: number | null;
  }>(queries.stats);
  const row = rows[0];
  return {
    pending: Number(row?.pending ?? 0),
    failed: Number(row?.failed ?? 0),
    lagMs: row?.oldest_pending_ms == null ? null : Number(row.oldest_pending_ms),
  };
}

/** How the store runs one short transaction of its own. */
export type OutboxTransactionRunner = <T>(
  operation: string,
  work: (client: SqlClient) => Promise<T>,
) => Promise<T>;

/**
 * The PostgreSQL outbox (`store.outbox`): writes rows in a caller's transaction (what
 * `ctx.publish` and `publishInTransaction` use) and the operator's view of the backlog.
 * The relay that sends the rows is {@link createRelay}.
 *
 * @example
 * ```ts
 * await store.transaction((tx) =>
 *   store.outbox.write(tx, { id: 'order-7:placed', destination: 'orders', body: { orderId: 7 }, attributes: {} }),
 * );
 * console.log(await store.outbox.stats());
 * ```
 */
export class PostgresOutbox implements OutboxStore<SqlClient> {
  /** @internal the relay's statements */
  readonly queries: OutboxQueries;

  constructor(
    quotedSchema: string,
    private readonly runTransaction: OutboxTransactionRunner,
  ) {
    this.queries = buildOutboxQueries(quotedSchema);
  }

  /**
   * Writes one row in `tx`. The same message twice under one `id` writes one row (the
   * first); another message (destination, key, body or attributes) under an `id` already
   * written raises `OutboxIdConflictError` rather than being dropped. The same input checks
   * as `ctx.publish` run first (`ConfigError`: empty or non-string destination, id or key,
   * a NUL character, attributes that are not a plain object of strings).
   *
   * @example
   * ```ts
   * await store.outbox.write(tx, { id: 'm-1', destination: 'receipts', body: { orderId: 1 }, key: 'customer-9', attributes: {} });
   * ```
   */
  async write(tx: SqlClient, message: OutboxWrite): Promise<void> {
    checkOutboxWrite(message);
    const body = Buffer.from(encodeOutboxBody(message.body));
    const key = message.key ?? null;
    const attributes = message.attributes ?? {};
    const { rows } = await tx.query(this.queries.write, [
      message.id,
      message.destination,
      key,
      body,
      JSON.stringify(attributes),
    ]);
    if (rows.length > 0) return;
    // The id was there already: a re-write of the same message is the idempotent case;
    // anything else would be dropped without a word, so it is refused.
    const { rows: stored } = await tx.query<{
      destination: string;
      key: string | null;
      body: Uint8Array;
      attributes: Record<string, string> | string;
    }>(this.queries.written, [message.id]);
    const row = stored[0];
    if (!row) return; // not visible to this transaction's snapshot: nothing to compare
    const storedAttributes = typeof row.attributes === 'string' ? JSON.parse(row.attributes) : row.attributes;
    const differences = [
      row.destination !== message.destination ? 'destination' : undefined,
      row.key !== key ? 'key' : undefined,
      sameBody(Buffer.from(row.body), body, message.body) ? undefined : 'body',
      !isDeepStrictEqual({ ...storedAttributes }, { ...attributes }) ? 'attributes' : undefined,
    ].filter((difference): difference is string => difference !== undefined);
    if (differences.length > 0) throw new OutboxIdConflictError(message.id, differences);
  }

  /**
   * Counts of pending and dead-lettered rows, and the lag (the oldest pending row's age).
   *
   * @example
   * ```ts
   * const { lagMs } = await store.outbox.stats();
   * if (lagMs !== null && lagMs > 60_000) alert('outbox relay is behind');
   * ```
   */
  stats(): Promise<OutboxStats> {
    return this.runTransaction('outbox.stats()', (client) => readOutboxStats(client, this.queries));
  }

  /**
   * Rows that failed at least once: dead-lettered ones and those still being retried,
   * oldest first.
   *
   * @example
   * ```ts
   * const rows = await store.outbox.stuck({ limit: 20 });
   * ```
   */
  stuck(options: { limit?: number } = {}): Promise<StuckOutboxRow[]> {
    const limit = options.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1)
      throw new ConfigError('limit', `must be a positive integer; got ${limit}`);
    return this.runTransaction('outbox.stuck()', async (client) => {
      const { rows } = await client.query<{
        id: string;
        destination: string;
        key: string | null;
        status: 'pending' | 'failed';
        attempts: number;
        last_error: string | null;
        created_at: Date | string;
        next_attempt_at: Date | string | null;
      }>(this.queries.stuck, [limit]);
      return rows.map((row) => ({
        id: row.id,
        destination: row.destination,
        key: row.key,
        status: row.status,
        attempts: Number(row.attempts),
        lastError: row.last_error,
        createdAt: new Date(row.created_at),
        nextAttemptAt: row.next_attempt_at == null ? null : new Date(row.next_attempt_at),
      }));
    });
  }

  /**
   * Puts dead-lettered rows back to pending with a fresh attempt count (all of them, or
   * those in `ids`); the relay sends them on its next round. Returns the IDs it reset. A
   * keyed row sent this way arrives after later rows of its key that were sent meanwhile.
   *
   * @example
   * ```ts
   * const retried = await store.outbox.retry(); // after fixing the missing queue
   * ```
   */
  retry(ids?: readonly string[]): Promise<string[]> {
    return this.runTransaction('outbox.retry()', async (client) => {
      const { rows } = await client.query<{ id: string }>(this.queries.retry, [ids ? [...ids] : null]);
      return rows.map((row) => row.id);
    });
  }

  /**
   * The dead-lettered rows, oldest first, and their failure groups (destination and last
   * error with numbers masked, core's `failureGroupId`), the largest group first.
   *
   * @example
   * ```ts
   * const { groups } = await store.outbox.deadLetters();
   * for (const g of groups) console.log(g.id, g.count, g.destination, g.error);
   * ```
   */
  deadLetters(): Promise<{ rows: OutboxDeadLetter[]; groups: OutboxFailureGroup[] }> {
    return this.runTransaction('outbox.deadLetters()', (client) =>
      readDeadLetters(client, this.queries, false),
    );
  }

  /**
   * Puts the selected dead-lettered rows back to pending with a fresh attempt count:
   * `{ ids }`, `{ group }` (a failure group's ID or a destination), `{ all: true }`; an
   * empty selection is all of them, as `retry()`. `dryRun` only reports. Retrying is
   * safe: consumers deduplicate by the row's ID. `notFound` names the IDs, or the group,
   * that are not dead-lettered.
   *
   * @example
   * ```ts
   * const { retried } = await store.outbox.retryDeadLetters({ group: 'receipts:c338c400' });
   * ```
   */
  retryDeadLetters(
    selection: DeadLetterSelection = {},
    options: { dryRun?: boolean } = {},
  ): Promise<OutboxRetryReport> {
    const dryRun = options.dryRun ?? false;
    return this.runTransaction('outbox.retryDeadLetters()', async (client) => {
      const { rows } = await readDeadLetters(client, this.queries, !dryRun);
      const { chosen, notFound } = selectDeadLetters(rows, selection, false);
      const ids = chosen.map((row) => row.id);
      if (!dryRun && ids.length > 0) await client.query(this.queries.retry, [ids]);
      return { dryRun, retried: ids, notFound };
    });
  }

  /**
   * Discards the selected dead-lettered rows for good: they become `discarded`, stamped
   * with `by` and the database's time, and are never sent. The selection is required
   * (`{ all: true }` for every row), so a forgotten one does not empty the dead letters.
   * The rows stay, body and last error included, as the record ({@link discarded}).
   *
   * @example
   * ```ts
   * await store.outbox.discard({ ids: ['order-7:placed'] }, { by: 'alice' });
   * ```
   */
  async discard(selection: DeadLetterSelection, options: { by: string }): Promise<OutboxDiscardReport> {
    if (typeof options?.by !== 'string' || options.by === '') {
      throw new ConfigError('by', 'must name who discards (a non-empty string)');
    }
    return this.runTransaction('outbox.discard()', async (client) => {
      const { rows } = await readDeadLetters(client, this.queries, true);
      const { chosen, notFound } = selectDeadLetters(rows, selection, true);
      const ids = chosen.map((row) => row.id);
      if (ids.length > 0) await client.query(this.queries.discard, [ids, options.by]);
      return { discarded: ids, notFound, by: options.by };
    });
  }

  /**
   * Discarded rows with who discarded them and when, the latest first.
   *
   * @example
   * ```ts
   * const [last] = await store.outbox.discarded({ limit: 1 });
   * ```
   */
  discarded(options: { limit?: number } = {}): Promise<DiscardedOutboxRow[]> {
    const limit = options.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1)
      throw new ConfigError('limit', `must be a positive integer; got ${limit}`);
    return this.runTransaction('outbox.discarded()', async (client) => {
      const { rows } = await client.query<{
        id: string;
        destination: string;
        key: string | null;
        attempts: number;
        last_error: string | null;
        discarded_by: string;
        discarded_at: Date | string;
      }>(this.queries.discarded, [limit]);
      return rows.map((row) => ({
        id: row.id,
        destination: row.destination,
        key: row.key,
        attempts: Number(row.attempts),
        lastError: row.last_error,
        discardedBy: row.discarded_by,
        discardedAt: new Date(row.discarded_at),
      }));
    });
  }
}

/**
 * Whether a re-write's body is the stored one. Bytes and strings are sent as they are, so
 * they must match byte for byte. A body the write encoded as JSON is the same message when
 * it decodes to the same value: object keys in another order give other bytes (a handler
 * that merges objects in arrival order, a re-run after its marker was pruned) but not
 * another message, and refusing it would fail that handler on every redelivery.
 */
function sameBody(stored: Buffer, encoded: Buffer, body: unknown): boolean {
  if (Buffer.compare(stored, encoded) === 0) return true;
  const bytesOrText =
    typeof body === 'string' ||
    ArrayBuffer.isView(body) ||
    body instanceof ArrayBuffer ||
    (typeof SharedArrayBuffer !== 'undefined' && body instanceof SharedArrayBuffer);
  if (bytesOrText) return false;
  try {
    return isDeepStrictEqual(JSON.parse(stored.toString('utf8')), JSON.parse(encoded.toString('utf8')));
  } catch {
    return false; // the stored body is not JSON: another message
  }
}
