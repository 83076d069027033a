import { type DeadLetterLog, type DiscardRow, toDiscardRecord } from '@oncely/core';
import type { StoreCore } from './StoreCore.js';

/**
 * PostgresStore.deadLetterLog: marker look-ups for `oncely dlq replay --dry-run` and the
 * discard log (`dead_letter_discards`, migration 0006).
 */
export function createDeadLetterLog(core: StoreCore): DeadLetterLog {
  const s = core.quotedSchema;
  return {
    async processed(consumer, messageIds) {
      const rows = await core.run('deadLetterLog.processed()', async (client) => {
        const { rows } = await client.query<{ message_id: string }>(
          `SELECT message_id FROM ${s}.processed_messages
            WHERE consumer = $1 AND message_id = ANY($2::text[]) AND status = 'completed'`,
          [consumer, [...messageIds]],
        );
        return rows;
      });
      return new Set(rows.map((row) => row.message_id));
    },
    async recordDiscards(records) {
      if (records.length === 0) return;
      await core.run('deadLetterLog.recordDiscards()', async (client) => {
        await client.query(
          `INSERT INTO ${s}.dead_letter_discards (consumer, message_id, reason, error, discarded_by, discarded_at)
           SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[])`,
          [
            records.map((r) => r.consumer),
            records.map((r) => r.messageId ?? null),
            records.map((r) => r.reason),
            records.map((r) => r.error ?? null),
            records.map((r) => r.discardedBy),
            records.map((r) => r.discardedAt),
          ],
        );
      });
    },
    async discards(consumer, messageId) {
      const rows = await core.run('deadLetterLog.discards()', async (client) => {
        const { rows } = await client.query<DiscardRow>(
          `SELECT reason, error, discarded_by, discarded_at FROM ${s}.dead_letter_discards
            WHERE consumer = $1 AND message_id = $2 ORDER BY id`,
          [consumer, messageId],
        );
        return rows;
      });
      return rows.map((row) => toDiscardRecord(consumer, messageId, row));
    },
  };
}
