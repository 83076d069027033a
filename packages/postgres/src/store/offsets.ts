import type { OffsetStore, SqlClient } from '@oncely/core';
import type { StoreCore } from './StoreCore.js';

/** Kafka offsets kept in the same transaction as the output (`offsets` mode). */
export function createOffsetStore(this: StoreCore): OffsetStore<SqlClient> {
  return {
    advance: async (tx, consumer, topic, partition, offset) => {
      // All four as text (the statement casts them): only strings are inlined into BEGIN's message.
      const { rows } = await tx.query(this.queries.advanceOffset, [
        consumer,
        topic,
        String(partition),
        String(offset),
      ]);
      return rows.length === 1;
    },
    read: (consumer, topic) =>
      this.run('offsets.read()', async (client) => {
        const { rows } = await client.query<{ partition: number; next_offset: string }>(
          this.queries.readOffsets,
          [consumer, topic],
        );
        return new Map(rows.map((row) => [Number(row.partition), String(row.next_offset)]));
      }),
  };
}
