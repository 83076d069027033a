import type { IdempotencyStore, MessageKey, SqlClient } from './types.js';

/** Result of {@link processOnce}. */
export type ProcessOnceResult<T> = { status: 'processed'; result: T } | { status: 'duplicate' };

/** Transient store conflicts (40001, 40P01, 55P03) are retried this many times before giving up. */
export const MAX_TRANSIENT_RETRIES = 10;

/**
 * Runs `work` at most once per `(consumer, messageId)`: the processed marker and
 * everything `work` writes through `tx` commit in one transaction. A second call with the
 * same key — concurrent or later — returns `{ status: 'duplicate' }` without running
 * `work`. If `work` throws, nothing is kept and the error propagates: call again to retry.
 *
 * Serialization failures, deadlocks and lock timeouts are retried here and do not count
 * as failures.
 *
 * @example
 * ```ts
 * const outcome = await processOnce(store, { consumer: 'payments', messageId: event.id }, async (tx) => {
 *   await tx.query('INSERT INTO payments(order_id, amount) VALUES ($1, $2)', [event.orderId, event.amount]);
 * });
 * if (outcome.status === 'duplicate') console.log('already applied');
 * ```
 */
export async function processOnce<T, Tx = SqlClient>(
  store: IdempotencyStore<Tx>,
  key: MessageKey,
  work: (tx: Tx) => Promise<T>,
): Promise<ProcessOnceResult<T>> {
  return retryTransient(store, () =>
    store.transaction(async (tx): Promise<ProcessOnceResult<T>> => {
      const claimed = await store.claim(tx, key.consumer, [key.messageId]);
      // Not claimed: another transaction committed this marker, we skip (the empty
      // transaction commits nothing).
      if (!claimed.has(key.messageId)) return { status: 'duplicate' };
      return { status: 'processed', result: await work(tx) };
    }),
  );
}

/** Re-runs `attempt` while the store classifies its failure as transient. */
export async function retryTransient<T>(store: IdempotencyStore<any>, attempt: () => Promise<T>): Promise<T> {
  for (let retry = 0; ; retry++) {
    try {
      return await attempt();
    } catch (error) {
      if (retry >= MAX_TRANSIENT_RETRIES || store.classifyError(error) !== 'transient') throw error;
      // Small randomized pause so two deadlocked peers do not collide again in lockstep.
      await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 20 * (retry + 1)));
    }
  }
}

/** One item of {@link processBatchOnce}. */
export interface BatchItem<T, Tx = SqlClient> {
  messageId: string;
  work: (tx: Tx) => Promise<T>;
}

/** Outcome of one batch item: like {@link ProcessOnceResult}, or `failed` with the item's error. */
export type BatchItemResult<T> = ProcessOnceResult<T> | { status: 'failed'; error: unknown };

/**
 * The batch fast path: one transaction and one claim statement for many messages.
 * Results come back in input order; an ID that appears twice runs once (the second is a
 * `duplicate` when the first commits, and `failed` with the first's error when it fails).
 *
 * It first runs every new item's work with no savepoints (two round trips fewer per
 * item). If an item throws, that transaction is rolled back and the batch runs again
 * with each item under its own savepoint: the failing item is rolled back to its
 * savepoint and its marker removed (its retry must not look like a duplicate), the
 * others commit together. Work before the failing item therefore runs twice in that
 * case — inside the transaction that is invisible; calls outside it must carry their
 * idempotency key, as for any retry.
 *
 * Errors the store classifies as transient or unavailable abort the whole batch (nothing
 * commits): transient ones are retried here, unavailable ones are thrown.
 *
 * @example
 * ```ts
 * const results = await processBatchOnce(store, 'payments', events.map((e) => ({
 *   messageId: e.id,
 *   work: (tx) => tx.query('INSERT INTO payments(order_id, amount) VALUES ($1, $2)', [e.orderId, e.amount]),
 * })));
 * ```
 */
export async function processBatchOnce<T, Tx = SqlClient>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly BatchItem<T, Tx>[],
): Promise<BatchItemResult<T>[]> {
  if (items.length === 0) return [];
  try {
    return await runBatch(store, consumer, items, false);
  } catch (error) {
    // An item threw, or the transaction failed as a whole for a reason of its own (an item
    // caught a statement error and left it aborted, a deferred constraint at COMMIT):
    // savepoints show which item is at fault. Outages and transient conflicts are not
    // an item's doing and propagate.
    if (!(error instanceof BatchItemFailed) && store.classifyError(error) !== 'other') throw error;
    return runBatch(store, consumer, items, true);
  }
}

/** Rolls back the savepoint-free attempt when one item fails. */
class BatchItemFailed extends Error {}

function runBatch<T, Tx>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly BatchItem<T, Tx>[],
  isolateItems: boolean,
): Promise<BatchItemResult<T>[]> {
  return retryTransient(store, () =>
    store.transaction(async (tx) => {
      const ids = items.map((item) => item.messageId);
      const claimed = new Set(await store.claim(tx, consumer, ids));
      const results: BatchItemResult<T>[] = [];
      /** Where each ID this batch claimed first ran, for its repeats further on. */
      const firstRun = new Map<string, number>();
      const repeats: Array<[repeat: number, first: number]> = [];
      for (const item of items) {
        // Taking the ID out makes a second occurrence in the same batch a duplicate.
        if (!claimed.delete(item.messageId)) {
          const first = firstRun.get(item.messageId);
          if (first !== undefined) repeats.push([results.length, first]);
          results.push({ status: 'duplicate' });
          continue;
        }
        firstRun.set(item.messageId, results.length);
        try {
          const result = isolateItems ? await store.savepoint(tx, () => item.work(tx)) : await item.work(tx);
          results.push({ status: 'processed', result });
        } catch (error) {
          // The transaction itself is in trouble: let the whole batch fail (and retry).
          if (store.classifyError(error) !== 'other') throw error;
          if (!isolateItems) throw new BatchItemFailed();
          await store.unclaim(tx, consumer, [item.messageId]);
          results.push({ status: 'failed', error });
        }
      }
      // A repeat is a duplicate only of a copy that commits. When the first copy failed,
      // no marker exists and acking the repeat would lose the message: it fails with it.
      for (const [repeat, first] of repeats) {
        if (results[first]!.status === 'failed') results[repeat] = results[first]!;
      }
      return results;
    }),
  );
}
