import type { FingerprintStore, MessageKey, SqlClient } from '@oncely/core';
import type { StoreConnection } from './StoreConnection.js';

/**
 * The payload-fingerprint statements. Kept apart from the plain claim statements: a
 * consumer without `payloadFingerprint` never runs them.
 */
export interface MySqlFingerprintQueries {
  /** consumer, message ID, fingerprint (or null). */
  readonly claimOne: string;
  /** (consumer, ID, fingerprint) × count. */
  claimMany(count: number): string;
  /** consumer, IDs (expanded): the fingerprints stored on their markers. */
  readonly read: string;
  /** result JSON, fingerprint, consumer, message ID, owner. */
  readonly completeLease: string;
}

/**
 * Builds the fingerprint statements for one database.
 *
 * @param s the database name, already validated and quoted
 */
export function buildFingerprintQueries(s: string): MySqlFingerprintQueries {
  const markers = `${s}.processed_messages`;
  const row = `(?, ?, 'completed', ?, UTC_TIMESTAMP(6))`;
  return {
    claimOne: `INSERT INTO ${markers} (consumer, message_id, status, fingerprint, processed_at) VALUES ${row}`,
    claimMany: (count) =>
      `INSERT INTO ${markers} (consumer, message_id, status, fingerprint, processed_at) VALUES ${Array.from(
        { length: count },
        () => row,
      ).join(', ')}`,
    read: `SELECT message_id, fingerprint FROM ${markers}
      WHERE consumer = ? AND message_id IN (?) AND fingerprint IS NOT NULL`,
    completeLease: `UPDATE ${markers}
      SET result = ?, fingerprint = ?, processed_at = UTC_TIMESTAMP(6), locked_until = NULL, status = 'completed'
      WHERE consumer = ? AND message_id = ? AND owner = ? AND status = 'in_progress'`,
  };
}

/** What the fingerprint side borrows from its `MySqlStore`. */
export interface MySqlFingerprintDeps {
  /** The store's own short transaction (schema check, error marking). */
  run<T>(operation: string, work: (connection: StoreConnection) => Promise<T>): Promise<T>;
  /**
   * The store's claim loop: inserts the rows of `ids` with `claimOne` / `claimMany` and
   * their parameters per ID, and returns the IDs it inserted.
   */
  claim(
    tx: SqlClient,
    consumer: string,
    ids: readonly string[],
    sql: { one: string; many(count: number): string },
    rowParams: (id: string) => unknown[],
  ): Promise<ReadonlySet<string>>;
  /** `completedBy` of the store's queries: whether `owner` already completed the claim. */
  completedBy(connection: StoreConnection, key: MessageKey, owner: string): Promise<boolean>;
  toJson(result: unknown): string;
}

/**
 * The `MySqlStore.fingerprints` side: claims that store a fingerprint, and the read a
 * duplicate compares against.
 *
 * @example
 * ```ts
 * const fingerprints = createMySqlFingerprintStore(buildFingerprintQueries('`oncely`'), deps);
 * ```
 */
export function createMySqlFingerprintStore(
  queries: MySqlFingerprintQueries,
  deps: MySqlFingerprintDeps,
): FingerprintStore<SqlClient> {
  return {
    claim(tx, consumer, entries) {
      const ids = [...entries.keys()].sort();
      return deps.claim(tx, consumer, ids, { one: queries.claimOne, many: queries.claimMany }, (id) => [
        consumer,
        id,
        entries.get(id) ?? null,
      ]);
    },
    async read(consumer, messageIds, tx) {
      if (messageIds.length === 0) return new Map();
      const select = async (client: SqlClient) => {
        const { rows } = await client.query<{ message_id: Buffer | string; fingerprint: string }>(
          queries.read,
          [consumer, [...new Set(messageIds)]],
        );
        return new Map(rows.map((row) => [text(row.message_id), row.fingerprint]));
      };
      return tx ? select(tx) : deps.run('fingerprints.read()', select);
    },
    completeLease(key: MessageKey, owner: string, result: unknown, fingerprint: string) {
      const json = deps.toJson(result);
      return deps.run('fingerprints.completeLease()', async (connection) => {
        const { rowCount } = await connection.query(queries.completeLease, [
          json,
          fingerprint,
          key.consumer,
          key.messageId,
          owner,
        ]);
        return rowCount === 1 || deps.completedBy(connection, key, owner);
      });
    },
  };
}

/** A VARBINARY key column as the string it was written from (UTF-8). */
export function text(value: Buffer | string): string {
  return typeof value === 'string' ? value : value.toString('utf8');
}
