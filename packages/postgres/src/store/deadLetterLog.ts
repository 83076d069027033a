import {
  type DeadLetterLedger,
  type DeadLetterLedgerEntry,
  type DeadLetterLog,
  type DiscardRow,
  toDiscardRecord,
} from '@oncely/core';
import type { StoreCore } from './StoreCore.js';

/** Names the key in the `(class, key)` advisory lock of a dead-letter pass: ASCII "odlq". */
const PASS_LOCK_CLASS = 0x6f646c71;

/**
 * PostgresStore.deadLetterLog: marker look-ups for `oncely dlq replay --dry-run` and the
 * discard log (`dead_letter_discards`, migration 0006).
 */
export function createDeadLetterLog(core: StoreCore): DeadLetterLog {
  const s = core.quotedSchema;
  const ledger = core.driver.sessionLock ? createLedger(core) : undefined;
  return {
    ...(ledger ? { ledger } : {}),
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

interface LedgerRow {
  partition: number;
  dlq_offset: string;
  fingerprint: string;
  state: DeadLetterLedgerEntry['state'];
  message_id: string | null;
  target_topic: string | null;
  target_partition: number | null;
  target_from: string | null;
  target_offset: string | null;
  at: Date | string;
}

/**
 * The dead-letter ledger (`dead_letter_ledger`, migration 0010) and its pass lock: a
 * session advisory lock on a connection of its own (PGlite: an in-process mutex), keyed by
 * schema, consumer and queue.
 */
function createLedger(core: StoreCore): DeadLetterLedger {
  const s = core.quotedSchema;
  const driver = core.driver;
  return {
    async tryLock(consumer, queue) {
      return driver.sessionLock!(PASS_LOCK_CLASS, `${core.schema}\x1f${consumer}\x1f${queue}`);
    },
    async entries(consumer, queue) {
      const rows = await core.run('deadLetterLog.ledger.entries()', async (client) => {
        const { rows } = await client.query<LedgerRow>(
          `SELECT partition, dlq_offset::text AS dlq_offset, fingerprint, state, message_id, target_topic,
                  target_partition, target_from::text AS target_from, target_offset::text AS target_offset, at
             FROM ${s}.dead_letter_ledger WHERE consumer = $1 AND queue = $2
            ORDER BY partition, dlq_offset`,
          [consumer, queue],
        );
        return rows;
      });
      return rows.map((row) => toLedgerEntry(consumer, queue, row));
    },
    async put(entries) {
      if (entries.length === 0) return;
      await core.run('deadLetterLog.ledger.put()', async (client) => {
        await client.query(
          `INSERT INTO ${s}.dead_letter_ledger (consumer, queue, partition, dlq_offset, fingerprint, state,
                  message_id, target_topic, target_partition, target_from, target_offset, at)
           SELECT * FROM unnest($1::text[], $2::text[], $3::integer[], $4::bigint[], $5::text[], $6::text[],
                  $7::text[], $8::text[], $9::integer[], $10::bigint[], $11::bigint[], $12::timestamptz[])
           ON CONFLICT (consumer, queue, partition, dlq_offset) DO UPDATE SET
             fingerprint = EXCLUDED.fingerprint, state = EXCLUDED.state, message_id = EXCLUDED.message_id,
             target_topic = EXCLUDED.target_topic, target_partition = EXCLUDED.target_partition,
             target_from = EXCLUDED.target_from, target_offset = EXCLUDED.target_offset, at = EXCLUDED.at`,
          [
            entries.map((e) => e.consumer),
            entries.map((e) => e.queue),
            entries.map((e) => e.partition),
            entries.map((e) => e.offset),
            entries.map((e) => e.fingerprint),
            entries.map((e) => e.state),
            entries.map((e) => e.messageId ?? null),
            entries.map((e) => e.target?.topic ?? null),
            entries.map((e) => e.target?.partition ?? null),
            entries.map((e) => e.target?.from ?? null),
            entries.map((e) => e.target?.offset ?? null),
            entries.map((e) => e.at),
          ],
        );
      });
    },
    async delete(consumer, queue, keys) {
      if (keys.length === 0) return;
      await core.run('deadLetterLog.ledger.delete()', async (client) => {
        await client.query(
          `DELETE FROM ${s}.dead_letter_ledger
            WHERE consumer = $1 AND queue = $2
              AND (partition, dlq_offset) IN (SELECT * FROM unnest($3::integer[], $4::bigint[]))`,
          [consumer, queue, keys.map((k) => k.partition), keys.map((k) => k.offset)],
        );
      });
    },
    async prune(consumer, queue, logStart) {
      const starts = [...logStart];
      return core.run('deadLetterLog.ledger.prune()', async (client) => {
        const { rowCount } = await client.query(
          `DELETE FROM ${s}.dead_letter_ledger AS l
            WHERE l.consumer = $1 AND l.queue = $2
              AND NOT EXISTS (SELECT 1 FROM unnest($3::integer[], $4::bigint[]) AS k(p, o)
                               WHERE k.p = l.partition AND l.dlq_offset >= k.o)`,
          [consumer, queue, starts.map(([p]) => p), starts.map(([, o]) => o)],
        );
        return rowCount ?? 0;
      });
    },
  };
}

function toLedgerEntry(consumer: string, queue: string, row: LedgerRow): DeadLetterLedgerEntry {
  const entry: DeadLetterLedgerEntry = {
    consumer,
    queue,
    partition: Number(row.partition),
    offset: String(row.dlq_offset),
    fingerprint: row.fingerprint,
    state: row.state,
    at: row.at instanceof Date ? row.at : new Date(row.at),
  };
  if (row.message_id !== null) entry.messageId = row.message_id;
  if (row.target_topic !== null && row.target_partition !== null && row.target_from !== null) {
    entry.target = {
      topic: row.target_topic,
      partition: Number(row.target_partition),
      from: String(row.target_from),
    };
    if (row.target_offset !== null) entry.target.offset = String(row.target_offset);
  }
  return entry;
}
