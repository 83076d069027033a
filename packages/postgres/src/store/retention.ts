import { ConfigError } from '@oncely/core';
import type { StoreCore } from './StoreCore.js';
import { toDate } from './values.js';

/**
 * What {@link PostgresStore.prune} deletes.
 *
 * @example
 * ```ts
 * await store.prune({ olderThan: 14 * 24 * 3600 * 1000, batchSize: 5000, consumer: 'payments' });
 * ```
 */
export interface PruneOptions {
  /**
   * Completed markers processed before this are deleted: a `Date`, or an age in ms
   * measured on the database clock (`86_400_000` = older than a day). Keep it longer than
   * the broker's redelivery horizon: a message redelivered after its marker was pruned
   * is processed again.
   */
  olderThan: Date | number;
  /** Rows deleted per transaction. @default 1000 */
  batchSize?: number;
  /** Only this consumer's markers. @default every consumer */
  consumer?: string;
  /** Count the markers that would go, delete nothing. @default false */
  dryRun?: boolean;
  /** Called after each batch of markers with the running total deleted (a progress bar). */
  onProgress?: (deleted: number) => void;
}

/** PostgresStore.prune(): see its documentation. */
export async function prune(this: StoreCore, options: PruneOptions): Promise<number> {
  const { olderThan, batchSize = 1000, consumer } = options;
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new ConfigError('batchSize', `must be a positive integer; got ${batchSize}`);
  }
  let cutoff: Date;
  if (olderThan instanceof Date) {
    cutoff = olderThan;
  } else if (typeof olderThan === 'number' && Number.isFinite(olderThan) && olderThan >= 0) {
    cutoff = await this.run('prune()', async (client) => {
      const { rows } = await client.query<{ cutoff: Date }>(
        `SELECT now() - $1::double precision * interval '1 millisecond' AS cutoff`,
        [olderThan],
      );
      return toDate(rows[0]!.cutoff);
    });
  } else {
    throw new ConfigError(
      'olderThan',
      `must be a Date or a non-negative number of ms; got ${String(olderThan)}`,
    );
  }
  const withConsumer = consumer !== undefined;
  if (options.dryRun) {
    return this.run('prune()', async (client) => {
      const { rows } = await client.query<{ n: number }>(
        this.queries.countPrunableMarkers(withConsumer),
        withConsumer ? [cutoff, consumer] : [cutoff],
      );
      return rows[0]!.n;
    });
  }
  const params = withConsumer ? [cutoff, batchSize, consumer] : [cutoff, batchSize];
  const markers = await deleteInBatches.call(
    this,
    this.queries.pruneMarkers(withConsumer),
    params,
    batchSize,
    options.onProgress,
  );
  await deleteInBatches.call(this, this.queries.pruneAttempts(withConsumer), params, batchSize);
  // Sent outbox rows age out with the markers (they belong to no one consumer).
  if (!withConsumer) {
    await deleteInBatches.call(this, this.outbox.queries.pruneSent, [cutoff, batchSize], batchSize);
    await deleteInBatches.call(this, this.outbox.queries.pruneKeys, [cutoff, batchSize], batchSize);
  }
  return markers;
}

async function deleteInBatches(
  this: StoreCore,
  sql: string,
  params: unknown[],
  batchSize: number,
  onProgress?: (deleted: number) => void,
): Promise<number> {
  let total = 0;
  for (;;) {
    // One short transaction per batch: locks are held briefly and other work interleaves.
    const deleted = await this.run(
      'prune()',
      async (client) => (await client.query(sql, params)).rows.length,
    );
    total += deleted;
    onProgress?.(total);
    if (deleted < batchSize) return total;
  }
}
