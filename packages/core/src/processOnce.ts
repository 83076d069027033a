import { ConfigError } from './errors.js';
import type { FingerprintStore, IdempotencyStore, MessageKey, PayloadMismatch, SqlClient } from './types.js';

/**
 * Result of {@link processOnce}. A duplicate carries `payloadMismatch` when a fingerprint
 * was given and the marker holds a different one.
 */
export type ProcessOnceResult<T> =
  | { status: 'processed'; result: T }
  | { status: 'duplicate'; payloadMismatch?: PayloadMismatch };

/**
 * Options of {@link processOnce}.
 *
 * @example
 * ```ts
 * const options: ProcessOnceOptions = { fingerprint: payloadFingerprint({ body: event.body }) };
 * ```
 */
export interface ProcessOnceOptions {
  /**
   * Stored with the marker; a later call with the same key and another fingerprint gets
   * `{ status: 'duplicate', payloadMismatch }`. The store must keep fingerprints.
   * @default none (no fingerprint stored or compared)
   */
  fingerprint?: string;
}

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
  options: ProcessOnceOptions = {},
): Promise<ProcessOnceResult<T>> {
  const { fingerprint } = options;
  const fingerprints = fingerprint === undefined ? undefined : fingerprintStore(store);
  return retryTransient(store, () =>
    store.transaction(async (tx): Promise<ProcessOnceResult<T>> => {
      const claimed = fingerprints
        ? await fingerprints.claim(tx, key.consumer, new Map([[key.messageId, fingerprint!]]))
        : await store.claim(tx, key.consumer, [key.messageId]);
      // Not claimed: another transaction committed this marker, we skip (the empty
      // transaction commits nothing).
      if (!claimed.has(key.messageId)) {
        if (!fingerprints) return { status: 'duplicate' };
        const stored = (await fingerprints.read(key.consumer, [key.messageId], tx)).get(key.messageId);
        return { status: 'duplicate', ...mismatch(stored, fingerprint!) };
      }
      return { status: 'processed', result: await work(tx) };
    }),
  );
}

/** The store's fingerprint side, or a clear error for a store that keeps none. */
export function fingerprintStore<Tx>(store: IdempotencyStore<Tx>): FingerprintStore<Tx> {
  if (!store.fingerprints) {
    throw new ConfigError('fingerprint', 'this store keeps no payload fingerprints (use @oncely/postgres)');
  }
  return store.fingerprints;
}

/** `{ payloadMismatch }` when a stored fingerprint differs from ours; `{}` otherwise (none stored counts as a match). */
function mismatch(stored: string | undefined, fingerprint: string): { payloadMismatch?: PayloadMismatch } {
  return stored !== undefined && stored !== fingerprint
    ? { payloadMismatch: { storedFingerprint: stored, fingerprint } }
    : {};
}

/** Re-runs `attempt` while the store classifies its failure as transient. */
export function retryTransient<T>(store: IdempotencyStore<any>, attempt: () => Promise<T>): Promise<T> {
  // The usual case is the attempt's own promise with a handler for its failure: an async
  // function with its loop here cost a frame and an await on every transaction.
  try {
    // Promise.resolve hands a native promise back as it is; it adopts any other thenable.
    return Promise.resolve(attempt()).catch((error: unknown) => retryAfter(store, attempt, error));
  } catch (error) {
    return retryAfter(store, attempt, error);
  }
}

/** retryTransient after the first attempt failed with `error`. */
async function retryAfter<T>(
  store: IdempotencyStore<any>,
  attempt: () => Promise<T>,
  error: unknown,
): Promise<T> {
  for (let retry = 0; ; retry++) {
    if (retry >= MAX_TRANSIENT_RETRIES || store.classifyError(error) !== 'transient') throw error;
    // Small randomized pause so two deadlocked peers do not collide again in lockstep.
    await new Promise((resolve) => setTimeout(resolve, 5 + Math.random() * 20 * (retry + 1)));
    try {
      return await attempt();
    } catch (next) {
      error = next;
    }
  }
}

/** One item of {@link processBatchOnce}. */
export interface BatchItem<T, Tx = SqlClient> {
  messageId: string;
  work: (tx: Tx) => Promise<T>;
  /** Stored with the marker and compared on a duplicate, as in {@link ProcessOnceOptions}. */
  fingerprint?: string;
  /**
   * Items of one group must take effect in input order (a Kafka partition): once one
   * fails, the items after it in its group are `released` instead of committing ahead of
   * its retry.
   * @default none (the item is independent of the others)
   */
  orderingGroup?: string;
}

/** Outcome of one batch item: like {@link ProcessOnceResult}, or `failed` with the item's error. */
export type BatchItemResult<T> = ProcessOnceResult<T> | { status: 'failed'; error: unknown };

/**
 * Outcome of one item of a batch with ordering groups: a {@link BatchItemResult}, or
 * `released`: not run (or rolled back) because an earlier item of its group failed;
 * nothing of it committed and it was no failure of its own.
 */
export type OrderedBatchItemResult<T> = BatchItemResult<T> | { status: 'released' };

/**
 * The batch fast path: one transaction and one claim statement for many messages.
 * Results come back in input order; an ID that appears twice runs once (the second is a
 * `duplicate` when the first commits, and `failed` with the first's error when it fails).
 *
 * It first runs every new item's work with no savepoints (two round trips fewer per
 * item). If an item throws, that transaction is rolled back and the batch runs again
 * with each item under its own savepoint: the failing item is rolled back to its
 * savepoint and its marker removed (its retry must not look like a duplicate), the
 * others commit together. The failing item is not run again (its first error stands);
 * work before it runs twice in that case — inside the transaction that is invisible;
 * calls outside it must carry their idempotency key, as for any retry.
 *
 * Items with an `orderingGroup` keep prefix semantics: the items after a failing one in
 * its group do not run and come back `released` (their claims undone), so nothing of the
 * group commits ahead of the failed item's retry. Other groups are unaffected.
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
  items: readonly (BatchItem<T, Tx> & { orderingGroup?: undefined })[],
): Promise<BatchItemResult<T>[]>;
export async function processBatchOnce<T, Tx = SqlClient>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly BatchItem<T, Tx>[],
): Promise<OrderedBatchItemResult<T>[]>;
export async function processBatchOnce<T, Tx = SqlClient>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly BatchItem<T, Tx>[],
): Promise<OrderedBatchItemResult<T>[]> {
  if (items.length === 0) return [];
  if (items.some((item) => item.fingerprint !== undefined)) fingerprintStore(store);
  try {
    return await runBatch(store, consumer, items, false);
  } catch (error) {
    // An item threw, or the transaction failed as a whole for a reason of its own (an item
    // caught a statement error and left it aborted, a deferred constraint at COMMIT):
    // savepoints show which item is at fault. Outages and transient conflicts are not
    // an item's doing and propagate.
    if (!(error instanceof BatchItemFailed) && store.classifyError(error) !== 'other') throw error;
    return runBatch(store, consumer, items, true, error instanceof BatchItemFailed ? error : undefined);
  }
}

/**
 * Rolls back the savepoint-free attempt when one item fails. It carries the item and its
 * error: the rerun does not run that item again (a run is an attempt, and a handler the
 * stop deadline aborted must not start over).
 */
class BatchItemFailed extends Error {
  constructor(
    readonly index: number,
    readonly error: unknown,
  ) {
    super('a batch item failed');
  }
}

function runBatch<T, Tx>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly BatchItem<T, Tx>[],
  isolateItems: boolean,
  knownFailure?: BatchItemFailed,
): Promise<OrderedBatchItemResult<T>[]> {
  return retryTransient(store, () =>
    store.transaction(async (tx) => {
      const claimed = new Set(await claimAll(store, tx, consumer, items));
      const results: OrderedBatchItemResult<T>[] = [];
      /** Where each ID this batch claimed first ran, for its repeats further on. */
      const firstRun = new Map<string, number>();
      const repeats: Array<[repeat: number, first: number]> = [];
      /** Ordering groups with a failed item: what follows it in the group is released. */
      const stalled = new Set<string>();
      const released: string[] = [];
      for (const item of items) {
        if (item.orderingGroup !== undefined && stalled.has(item.orderingGroup)) {
          // Behind a failure in its group: committing it would overtake the failed item's retry.
          if (claimed.delete(item.messageId)) {
            firstRun.set(item.messageId, results.length);
            released.push(item.messageId);
          }
          results.push({ status: 'released' });
          continue;
        }
        // Taking the ID out makes a second occurrence in the same batch a duplicate.
        if (!claimed.delete(item.messageId)) {
          const first = firstRun.get(item.messageId);
          if (first !== undefined) repeats.push([results.length, first]);
          results.push({ status: 'duplicate' });
          continue;
        }
        const index = results.length;
        firstRun.set(item.messageId, index);
        try {
          if (knownFailure?.index === index) throw knownFailure.error;
          const result = isolateItems ? await store.savepoint(tx, () => item.work(tx)) : await item.work(tx);
          results.push({ status: 'processed', result });
        } catch (error) {
          // The transaction itself is in trouble: let the whole batch fail (and retry).
          if (store.classifyError(error) !== 'other') throw error;
          if (!isolateItems) throw new BatchItemFailed(index, error);
          await store.unclaim(tx, consumer, [item.messageId]);
          results.push({ status: 'failed', error });
          if (item.orderingGroup !== undefined) stalled.add(item.orderingGroup);
        }
      }
      if (released.length > 0) await store.unclaim(tx, consumer, released);
      // A repeat is a duplicate only of a copy that commits. When the first copy failed
      // (or was released), no marker exists and acking the repeat would lose the message:
      // it shares the first copy's outcome.
      for (const [repeat, first] of repeats) {
        const status = results[first]!.status;
        if (status === 'failed' || status === 'released') results[repeat] = results[first]!;
        else results[repeat] = { status: 'duplicate', ...repeatMismatch(items[first]!, items[repeat]!) };
      }
      await compareStoredFingerprints(store, tx, consumer, items, results, firstRun);
      return results;
    }),
  );
}

/** One claim statement for the batch: with fingerprints when any item carries one. */
function claimAll<T, Tx>(
  store: IdempotencyStore<Tx>,
  tx: Tx,
  consumer: string,
  items: readonly BatchItem<T, Tx>[],
): Promise<ReadonlySet<string>> {
  if (!items.some((item) => item.fingerprint !== undefined)) {
    return store.claim(
      tx,
      consumer,
      items.map((item) => item.messageId),
    );
  }
  const entries = new Map<string, string | null>();
  // The first copy's fingerprint goes on the marker: it is the copy that runs.
  for (const item of items) {
    if (!entries.has(item.messageId)) entries.set(item.messageId, item.fingerprint ?? null);
  }
  return fingerprintStore(store).claim(tx, consumer, entries);
}

/** A repeat inside the batch against the copy that ran: the same check as a stored marker. */
function repeatMismatch<T, Tx>(
  first: BatchItem<T, Tx>,
  repeat: BatchItem<T, Tx>,
): { payloadMismatch?: PayloadMismatch } {
  if (first.fingerprint === undefined || repeat.fingerprint === undefined) return {};
  return mismatch(first.fingerprint, repeat.fingerprint);
}

/**
 * Duplicates of markers committed before this batch: one read for all of them, only when
 * they carry fingerprints (a batch without duplicates pays nothing).
 */
async function compareStoredFingerprints<T, Tx>(
  store: IdempotencyStore<Tx>,
  tx: Tx,
  consumer: string,
  items: readonly BatchItem<T, Tx>[],
  results: OrderedBatchItemResult<T>[],
  firstRun: ReadonlyMap<string, number>,
): Promise<void> {
  const earlier = items
    .map((item, index) => ({ item, index }))
    .filter(
      ({ item, index }) =>
        // A released item behind a failure in its group stays released.
        item.fingerprint !== undefined &&
        !firstRun.has(item.messageId) &&
        results[index]!.status === 'duplicate',
    );
  if (earlier.length === 0) return;
  const stored = await fingerprintStore(store).read(
    consumer,
    earlier.map(({ item }) => item.messageId),
    tx,
  );
  for (const { item, index } of earlier) {
    results[index] = { status: 'duplicate', ...mismatch(stored.get(item.messageId), item.fingerprint!) };
  }
}
