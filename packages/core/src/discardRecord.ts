import type { DiscardRecord } from './types.js';

/** A `dead_letter_discards` row as the SQL stores select it (`reason, error, discarded_by, discarded_at`). */
export interface DiscardRow {
  reason: string;
  error: string | null;
  discarded_by: string;
  discarded_at: Date | string;
}

/**
 * The {@link DiscardRecord} of one `dead_letter_discards` row of `consumer`'s `messageId`:
 * one mapping for every SQL store's `deadLetterLog.discards()` (PostgreSQL, MySQL), so
 * they cannot drift apart. A NULL error is left out; `discardedAt` is a Date of its own.
 *
 * @example
 * ```ts
 * return rows.map((row) => toDiscardRecord(consumer, messageId, row));
 * ```
 */
export function toDiscardRecord(consumer: string, messageId: string, row: DiscardRow): DiscardRecord {
  return {
    consumer,
    messageId,
    reason: row.reason,
    ...(row.error === null ? {} : { error: row.error }),
    discardedBy: row.discarded_by,
    discardedAt: new Date(row.discarded_at),
  };
}
