import { ConfigError } from '@oncely/core';
import type { RunInTransaction } from './leases.js';
import type { MySqlPruneOptions } from './options.js';
import type { MySqlQueries } from './queries.js';

/** Retention: see `MySqlStore.prune`. */
export async function prune(
  run: RunInTransaction,
  q: MySqlQueries,
  options: MySqlPruneOptions,
): Promise<number> {
  const { olderThan, batchSize = 1000, consumer } = options;
  if (!Number.isInteger(batchSize) || batchSize < 1) {
    throw new ConfigError('batchSize', `must be a positive integer; got ${batchSize}`);
  }
  let cutoff: string;
  if (olderThan instanceof Date && !Number.isNaN(olderThan.getTime())) {
    cutoff = utcDateTime(olderThan);
  } else if (typeof olderThan === 'number' && Number.isFinite(olderThan) && olderThan >= 0) {
    cutoff = await run('prune()', async (connection) => {
      const { rows } = await connection.query<{ cutoff: string }>(q.cutoff, [Math.round(olderThan * 1000)]);
      return rows[0]!.cutoff;
    });
  } else {
    throw new ConfigError(
      'olderThan',
      `must be a Date or a non-negative number of ms; got ${String(olderThan)}`,
    );
  }
  const withConsumer = consumer !== undefined;
  const filter = withConsumer ? [cutoff, consumer] : [cutoff];
  if (options.dryRun) {
    return run('prune()', async (connection) => {
      const { rows } = await connection.query<{ n: number | string }>(
        q.countPrunableMarkers(withConsumer),
        filter,
      );
      return Number(rows[0]!.n);
    });
  }

  const markers = await deleteInBatches(
    run,
    q.prunableMarkers(withConsumer),
    q.deleteMarkers,
    [...filter, batchSize],
    batchSize,
    options.onProgress,
  );
  await deleteInBatches(
    run,
    q.prunableAttempts(withConsumer),
    q.deleteAttempts,
    [...filter, batchSize],
    batchSize,
  );
  return markers;
}

async function deleteInBatches(
  run: RunInTransaction,
  select: string,
  remove: (count: number) => string,
  params: unknown[],
  batchSize: number,
  onProgress?: (deleted: number) => void,
): Promise<number> {
  let total = 0;
  for (;;) {
    // One short transaction per batch: locks are held briefly and claims interleave.
    const deleted = await run('prune()', async (connection) => {
      const { rows } = await connection.query<{ consumer: Buffer; message_id: Buffer }>(select, params);
      if (rows.length > 0) {
        await connection.query(
          remove(rows.length),
          rows.flatMap((row) => [row.consumer, row.message_id]),
        );
      }
      return rows.length;
    });
    total += deleted;
    onProgress?.(total);
    if (deleted < batchSize) return total;
  }
}

/** A Date as a DATETIME(6) literal in UTC (the store's columns hold UTC). */
function utcDateTime(date: Date): string {
  return `${date.toISOString().replace('T', ' ').replace('Z', '')}000`;
}
