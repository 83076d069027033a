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
