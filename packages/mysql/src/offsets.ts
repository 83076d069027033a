import type { OffsetStore, SqlClient } from '@oncely/core';
import { expecting } from './claims.js';
import { ER_DUP_ENTRY } from './classifyError.js';
import type { RunInTransaction } from './leases.js';
import type { MySqlQueries } from './queries.js';

/** Kafka offsets kept in the same transaction as the output (`offsets` mode). */
export function createOffsetStore(q: MySqlQueries, run: RunInTransaction): OffsetStore<SqlClient> {
  return {
    advance: async (tx, consumer, topic, partition, offset) => {
      const update = [offset, consumer, topic, partition, offset];
      if ((await tx.query(q.advanceOffset, update)).rowCount === 1) return true;
      try {
        await expecting(tx, q.insertOffset, [consumer, topic, partition, offset]);
        return true;
      } catch (error) {
        if ((error as { errno?: unknown }).errno !== ER_DUP_ENTRY) throw error;
      }
      // The partition's first row was inserted by another transaction meanwhile (we
      // waited for its commit): its offset decides.
      return (await tx.query(q.advanceOffset, update)).rowCount === 1;
    },
    read: (consumer, topic) =>
      run('offsets.read()', async (connection) => {
        const { rows } = await connection.query<{ partition_no: number; next_offset: string }>(
          q.readOffsets,
          [consumer, topic],
        );
        return new Map(rows.map((row) => [Number(row.partition_no), String(row.next_offset)]));
      }),
  };
}
