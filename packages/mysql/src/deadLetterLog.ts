import { createHash } from 'node:crypto';
import {
  type DeadLetterLedger,
  type DeadLetterLedgerEntry,
  type DeadLetterLog,
  type DeadLetterPassLock,
  type DiscardRow,
  type SqlClient,
  toDiscardRecord,
} from '@oncely/core';
import { text } from './fingerprints.js';

/**
 * The `GET_LOCK` name of a dead-letter pass over (consumer, queue) in `schema`: hashed,
 * since lock names are at most 64 characters.
 */
export function passLockName(schema: string, consumer: string, queue: string): string {
  const hash = createHash('sha1').update(`${schema}\x1f${consumer}\x1f${queue}`).digest('hex');
  return `oncely-dlq:${hash}`;
}

/**
 * MySqlStore.deadLetterLog: marker look-ups for `oncely dlq replay --dry-run` and the
 * discard log (`dead_letter_discards`, migration 0003), as PostgresStore's.
 *
 * @param s the database name, already validated and quoted
 * @param run the store's own short transaction
 * @param tryLock the pass lock of the ledger; without it the store has no ledger
 */
export function createMySqlDeadLetterLog(
  s: string,
  run: <T>(operation: string, work: (client: SqlClient) => Promise<T>) => Promise<T>,
  tryLock?: (consumer: string, queue: string) => Promise<DeadLetterPassLock | undefined>,
): DeadLetterLog {
  const ledger = tryLock ? createLedger(s, run, tryLock) : undefined;
  return {
    ...(ledger ? { ledger } : {}),
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

interface LedgerRow {
  partition_no: number;
  dlq_offset: Buffer | string;
  fingerprint: string;
  state: DeadLetterLedgerEntry['state'];
  message_id: Buffer | string | null;
  target_topic: Buffer | string | null;
  target_partition: number | null;
  target_from: Buffer | string | null;
  target_offset: Buffer | string | null;
  at: Date | string;
}

/** The dead-letter ledger (`dead_letter_ledger`, migration 0004), as PostgresStore's. */
function createLedger(
  s: string,
  run: <T>(operation: string, work: (client: SqlClient) => Promise<T>) => Promise<T>,
  tryLock: (consumer: string, queue: string) => Promise<DeadLetterPassLock | undefined>,
): DeadLetterLedger {
  return {
    tryLock,
    async entries(consumer, queue) {
      const rows = await run('deadLetterLog.ledger.entries()', async (client) => {
        const { rows } = await client.query<LedgerRow>(
          `SELECT partition_no, CAST(dlq_offset AS CHAR) AS dlq_offset, fingerprint, state, message_id,
                  target_topic, target_partition, CAST(target_from AS CHAR) AS target_from,
                  CAST(target_offset AS CHAR) AS target_offset, at
             FROM ${s}.dead_letter_ledger WHERE consumer = ? AND queue = ?
            ORDER BY partition_no, dlq_offset`,
          [consumer, queue],
        );
        return rows;
      });
      return rows.map((row) => {
        const entry: DeadLetterLedgerEntry = {
          consumer,
          queue,
          partition: Number(row.partition_no),
          offset: text(row.dlq_offset),
          fingerprint: text(row.fingerprint),
          state: text(row.state) as DeadLetterLedgerEntry['state'],
          at: row.at instanceof Date ? row.at : new Date(`${text(row.at)}Z`),
        };
        if (row.message_id !== null) entry.messageId = text(row.message_id);
        if (row.target_topic !== null && row.target_partition !== null && row.target_from !== null) {
          entry.target = {
            topic: text(row.target_topic),
            partition: Number(row.target_partition),
            from: text(row.target_from),
          };
          if (row.target_offset !== null) entry.target.offset = text(row.target_offset);
        }
        return entry;
      });
    },
    async put(entries) {
      if (entries.length === 0) return;
      await run('deadLetterLog.ledger.put()', async (client) => {
        await client.query(
          `INSERT INTO ${s}.dead_letter_ledger (consumer, queue, partition_no, dlq_offset, fingerprint, state,
                  message_id, target_topic, target_partition, target_from, target_offset, at)
           VALUES ${entries.map(() => '(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)').join(', ')}
           ON DUPLICATE KEY UPDATE fingerprint = VALUES(fingerprint), state = VALUES(state),
             message_id = VALUES(message_id), target_topic = VALUES(target_topic),
             target_partition = VALUES(target_partition), target_from = VALUES(target_from),
             target_offset = VALUES(target_offset), at = VALUES(at)`,
          entries.flatMap((e) => [
            e.consumer,
            e.queue,
            e.partition,
            e.offset,
            e.fingerprint,
            e.state,
            e.messageId ?? null,
            e.target?.topic ?? null,
            e.target?.partition ?? null,
            e.target?.from ?? null,
            e.target?.offset ?? null,
            e.at,
          ]),
        );
      });
    },
    async delete(consumer, queue, keys) {
      if (keys.length === 0) return;
      await run('deadLetterLog.ledger.delete()', async (client) => {
        await client.query(
          `DELETE FROM ${s}.dead_letter_ledger
            WHERE consumer = ? AND queue = ? AND (${keys.map(() => '(partition_no = ? AND dlq_offset = ?)').join(' OR ')})`,
          [consumer, queue, ...keys.flatMap((k) => [k.partition, k.offset])],
        );
      });
    },
    async prune(consumer, queue, logStart) {
      const starts = [...logStart];
      const kept = starts.map(() => '(partition_no = ? AND dlq_offset >= ?)').join(' OR ');
      return run('deadLetterLog.ledger.prune()', async (client) => {
        const { rowCount } = await client.query(
          `DELETE FROM ${s}.dead_letter_ledger
            WHERE consumer = ? AND queue = ?${starts.length > 0 ? ` AND NOT (${kept})` : ''}`,
          [consumer, queue, ...starts.flat()],
        );
        return rowCount ?? 0;
      });
    },
  };
}
