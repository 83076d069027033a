import type { SqlClient } from '@oncely/core';
import { ER_DUP_ENTRY } from './classifyError.js';
import { KeyTooLongError } from './errors.js';
import { text } from './fingerprints.js';
import { StoreConnection } from './StoreConnection.js';

/** Byte limits of the VARBINARY key columns (migration 0001). */
const MAX_MESSAGE_ID_BYTES = 2048;
const MAX_CONSUMER_BYTES = 800;

/** Error numbers a store statement expects as an answer: a claim's duplicate key. */
export const DUPLICATE: ReadonlySet<number> = new Set([ER_DUP_ENTRY]);

/** The SQL of one kind of claim: one row, or `count` rows in one statement. */
export interface ClaimSql {
  one: string;
  many(count: number): string;
}

/**
 * The claim loop shared by plain and fingerprint claims; `ids` sorted and unique.
 * `existingSql` is the locking read of the markers that exist among `ids`.
 */
export async function claimRows(
  tx: SqlClient,
  existingSql: string,
  consumer: string,
  ids: readonly string[],
  sql: ClaimSql,
  rowParams: (id: string) => unknown[],
): Promise<ReadonlySet<string>> {
  if (ids.length === 0) return new Set();
  for (const id of ids) checkKey(consumer, id);
  if (ids.length === 1) {
    try {
      await expecting(tx, sql.one, rowParams(ids[0]!));
      return new Set(ids);
    } catch (error) {
      if ((error as { errno?: unknown }).errno === ER_DUP_ENTRY) return new Set();
      throw error;
    }
  }
  // Each round either inserts the rest or finds one more ID committed by a competing
  // transaction (the locking read then sees it): at most ids.length + 1 rounds.
  for (let round = 0; round <= ids.length; round++) {
    const { rows } = await tx.query<{ message_id: Buffer | string }>(existingSql, [consumer, [...ids]]);
    const existing = new Set(rows.map((row) => text(row.message_id)));
    const fresh = ids.filter((id) => !existing.has(id));
    if (fresh.length === 0) return new Set();
    try {
      await expecting(tx, sql.many(fresh.length), fresh.flatMap(rowParams));
      return new Set(fresh);
    } catch (error) {
      if ((error as { errno?: unknown }).errno !== ER_DUP_ENTRY) throw error;
    }
  }
  throw new Error(`claim: the markers of ${ids.length} IDs kept changing`);
}

/** Refuses keys the VARBINARY columns cannot hold: never truncated into another key. */
export function checkKey(consumer: string, messageId: string): void {
  const consumerBytes = Buffer.byteLength(consumer, 'utf8');
  if (consumerBytes > MAX_CONSUMER_BYTES)
    throw new KeyTooLongError('consumer', consumerBytes, MAX_CONSUMER_BYTES);
  const idBytes = Buffer.byteLength(messageId, 'utf8');
  if (idBytes > MAX_MESSAGE_ID_BYTES) throw new KeyTooLongError('messageId', idBytes, MAX_MESSAGE_ID_BYTES);
}

/** A store statement whose duplicate-key error is the answer, not a failure of the transaction. */
export function expecting(tx: SqlClient, sql: string, params: unknown[]) {
  return tx instanceof StoreConnection ? tx.queryExpecting(sql, params, DUPLICATE) : tx.query(sql, params);
}
