import { type DeadLetterLog, type DiscardRow, type SqlClient, toDiscardRecord } from '@oncely/core';
import { text } from './fingerprints.js';

/**
 * MySqlStore.deadLetterLog: marker look-ups for `oncely dlq replay --dry-run` and the
 * discard log (`dead_letter_discards`, migration 0003), as PostgresStore's.
 *
 * @param s the database name, already validated and quoted
 * @param run the store's own short transaction
 */
export function createMySqlDeadLetterLog(
  s: string,
  run: <T>(operation: string, work: (client: SqlClient) => Promise<T>) => Promise<T>,
): DeadLetterLog {
  return {
    async processed(consumer, messageIds) {
      const rows = await run('deadLetterLog.processed()', async (client) => {
        const { rows } = await client.query<{ message_id: Buffer | string }>(
          `SELECT message_id FROM ${s}.processed_messages
            WHERE consumer = ? AND message_id IN (?) AND status = 'completed'`,
          [consumer, [...new Set(messageIds)]],
        );
        return rows;
      });
      return new Set(rows.map((row) => text(row.message_id)));
    },
    async recordDiscards(records) {
      if (records.length === 0) return;
      await run('deadLetterLog.recordDiscards()', async (client) => {
        await client.query(
          `INSERT INTO ${s}.dead_letter_discards (consumer, message_id, reason, error, discarded_by, discarded_at)
           VALUES ${records.map(() => '(?, ?, ?, ?, ?, ?)').join(', ')}`,
          records.flatMap((r) => [
            r.consumer,
            r.messageId ?? null,
            r.reason,
            r.error ?? null,
            r.discardedBy,
            r.discardedAt,
          ]),
        );
      });
    },
    async discards(consumer, messageId) {
      const rows = await run('deadLetterLog.discards()', async (client) => {
        const { rows } = await client.query<DiscardRow>(
          `SELECT reason, error, discarded_by, discarded_at FROM ${s}.dead_letter_discards
            WHERE consumer = ? AND message_id = ? ORDER BY id`,
          [consumer, messageId],
        );
        return rows;
      });
      return rows.map((row) => toDiscardRecord(consumer, messageId, row));
    },
  };
}
