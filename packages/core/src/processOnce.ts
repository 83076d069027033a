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
export function processOnce<T, Tx = SqlClient>(
  store: IdempotencyStore<Tx>,
  key: MessageKey,
  work: (tx: Tx) => Promise<T>,
  options: ProcessOnceOptions = {},
): Promise<ProcessOnceResult<T>> {
  // Not async: retryTransient's promise is returned as it is (an async function returning
  // a promise adds a promise of its own and a turn of the microtask queue per call; see
  // test/processOnce.test.ts). A throw here still comes back as a rejection, never
  // synchronously.
  let fingerprint: string | undefined;
  let fingerprints: FingerprintStore<Tx> | undefined;
  try {
    fingerprint = options.fingerprint;
    fingerprints = fingerprint === undefined ? undefined : fingerprintStore(store);
  } catch (error) {
    return Promise.reject(error);
  }
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

/**
 * What a batch needs of each message: its ID, and what decides how a copy of it is
 * compared and ordered. {@link processBatchTogether} takes items of any type with these
 * fields; the rest (the payload) rides along to the handler.
 *
 * @example
 * ```ts
 * const item: BatchMessage & { payment: Payment } = { messageId: event.id, payment: event.body };
 * ```
 */
export interface BatchMessage {
  messageId: string;
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

/** One item of {@link processBatchOnce}: a message and its own work. */
export interface BatchItem<T, Tx = SqlClient> extends BatchMessage {
  work: (tx: Tx) => Promise<T>;
}

/**
 * Options of {@link processBatchOnce}.
 *
 * @example
 * ```ts
 * const options: BatchOptions = { stopStarting: AbortSignal.timeout(5000) };
 * ```
 */
export interface BatchOptions {
  /**
   * Once it aborts, no further item starts: the items not started come back `released`
   * (their claims undone, nothing of them committed) and what ran commits as usual. An item
   * already running is not interrupted by it. For callers with a deadline (a Lambda
   * invocation): the batch commits what fits instead of rolling back as a whole. In the
   * isolation pass (after an item failed) it applies the same way, so items that already
   * ran are not run again once it has aborted.
   * @default none (every item runs)
   */
  stopStarting?: AbortSignal;
}

/** Outcome of one batch item: like {@link ProcessOnceResult}, or `failed` with the item's error. */
export type BatchItemResult<T> = ProcessOnceResult<T> | { status: 'failed'; error: unknown };

/**
 * Outcome of one item of a batch with ordering groups or a `stopStarting` signal: a
 * {@link BatchItemResult}, or `released`: not run (or rolled back) because an earlier item
 * of its group failed, or not started before `stopStarting` aborted; nothing of it
 * committed and it was no failure of its own.
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
 * With `options.stopStarting`, no item starts once that signal has aborted: the items not
 * started come back `released` (claims undone) and what ran commits, so a caller with a
 * deadline keeps the work that fitted. When an item fails after it aborted (a handler told
 * to stop), the isolation pass does not run the earlier items again: they are released too.
 *
 * Errors the store classifies as transient or unavailable abort the whole batch (nothing
 * commits): transient ones are retried here, unavailable ones are thrown.
 *
 * Each item's statements are its own round trips, awaited one after another: a batch of
 * 50 single-INSERT items is about 52 round trips. When the batch's effects can be one
 * multi-row statement, {@link processBatchTogether} makes it about 4.
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
  options?: BatchOptions,
): Promise<OrderedBatchItemResult<T>[]>;
export async function processBatchOnce<T, Tx = SqlClient>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly BatchItem<T, Tx>[],
  options: BatchOptions = {},
): Promise<OrderedBatchItemResult<T>[]> {
  const { stopStarting } = options;
  return runBatchAttempts(store, consumer, items, {
    stopStarting,
    together: async (fresh, tx) => {
      const results: T[] = [];
      for (const { item, index } of fresh) {
        // The rest are not started: runBatch releases them.
        if (stopStarting?.aborted) break;
        try {
          results.push(await item.work(tx));
        } catch (error) {
          // The transaction itself is in trouble: let the whole batch fail (and retry).
          if (store.classifyError(error) !== 'other') throw error;
          throw new BatchItemFailed(index, error);
        }
      }
      return results;
    },
    alone: (item, tx) => item.work(tx),
  });
}

/**
 * The batch path with one handler for the whole batch: one transaction, one claim
 * statement, and `handleBatch(fresh, tx)` called once with the items that are new — not
 * duplicates of committed markers, not repeats of an ID earlier in the batch — in input
 * order. Their markers and everything the handler writes through `tx` commit together.
 * Results come back per input item, in input order, as from {@link processBatchOnce}.
 *
 * Use it when the batch's effects can be one multi-row statement
 * (`INSERT ... SELECT * FROM unnest($1::text[], $2::int[])`): a batch is then about four
 * round trips (BEGIN, claim, the statement, COMMIT) whatever its size, where
 * {@link processBatchOnce} pays one per item. It is the path that runs a batch of 50 at
 * 10× the per-message rate (bench/batch).
 *
 * If `handleBatch` throws an error the store classifies as `'other'`, the transaction
 * rolls back and the batch runs again in isolation: each new item alone,
 * `handleBatch([item], tx)`, under its own savepoint. A failing item is rolled back to
 * its savepoint and its marker removed (`failed`: its retry is not a duplicate); the
 * others commit together. So in that pass every item runs a second time: inside the
 * transaction that is invisible, but calls outside it (an HTTP request, a publish) must
 * carry an idempotency key, as for any retry. The handler must accept a batch of one.
 *
 * Ordering groups, repeats, fingerprints and transient or unavailable errors behave as in
 * {@link processBatchOnce}: items after a failed one in its group are `released` (claims
 * undone); a transient error retries the whole batch, an unavailable one is thrown and
 * nothing commits.
 *
 * @example
 * ```ts
 * const results = await processBatchTogether(
 *   store,
 *   'payments',
 *   events.map((e) => ({ messageId: e.id, orderId: e.orderId, amount: e.amount })),
 *   async (fresh, tx) => {
 *     await tx.query('INSERT INTO payments(order_id, amount) SELECT * FROM unnest($1::text[], $2::int[])', [
 *       fresh.map((e) => e.orderId),
 *       fresh.map((e) => e.amount),
 *     ]);
 *   },
 * );
 * ```
 */
export async function processBatchTogether<
  I extends BatchMessage & { orderingGroup?: undefined },
  Tx = SqlClient,
>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly I[],
  handleBatch: (fresh: readonly I[], tx: Tx) => Promise<void>,
): Promise<BatchItemResult<void>[]>;
export async function processBatchTogether<I extends BatchMessage, Tx = SqlClient>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly I[],
  handleBatch: (fresh: readonly I[], tx: Tx) => Promise<void>,
): Promise<OrderedBatchItemResult<void>[]>;
export async function processBatchTogether<I extends BatchMessage, Tx = SqlClient>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly I[],
  handleBatch: (fresh: readonly I[], tx: Tx) => Promise<void>,
): Promise<OrderedBatchItemResult<void>[]> {
  return runBatchAttempts(store, consumer, items, {
    // An error here is the batch's, not an item's: the isolation pass finds the item.
    together: async (fresh, tx) => {
      await handleBatch(
        fresh.map(({ item }) => item),
        tx,
      );
      return fresh.map(() => undefined);
    },
    alone: (item, tx) => handleBatch([item], tx),
  });
}

/** A new item of a batch and its position in the input. */
interface FreshItem<I> {
  item: I;
  index: number;
}

/**
 * How a batch runs its new items' work. The claims, repeats, ordering groups and results
 * are {@link runBatch}'s, the same for every API.
 */
interface BatchRunner<I, T, Tx> {
  /**
   * The savepoint-free attempt: every new item at once, in input order; one result per
   * item of a prefix of `fresh` (the items after it were not started: `stopStarting`). A
   * throw rolls the attempt back (a {@link BatchItemFailed} names the item).
   */
  together(fresh: readonly FreshItem<I>[], tx: Tx): Promise<T[]>;
  /** The isolation pass: one item (runBatch puts it under its own savepoint). */
  alone(item: I, tx: Tx): Promise<T>;
  /** {@link BatchOptions.stopStarting}: no item starts once it aborted. */
  stopStarting?: AbortSignal;
}

/**
 * The savepoint-free attempt first; when it fails for a reason of the batch's own, the
 * isolation pass.
 */
async function runBatchAttempts<I extends BatchMessage, T, Tx>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly I[],
  runner: BatchRunner<I, T, Tx>,
): Promise<OrderedBatchItemResult<T>[]> {
  if (items.length === 0) return [];
  if (items.some((item) => item.fingerprint !== undefined)) fingerprintStore(store);
  try {
    return await runBatch(store, consumer, items, runner, false);
  } catch (error) {
    // An item threw, or the transaction failed as a whole for a reason of its own (an item
    // caught a statement error and left it aborted, a deferred constraint at COMMIT):
    // savepoints show which item is at fault. Outages and transient conflicts are not
    // an item's doing and propagate.
    if (!(error instanceof BatchItemFailed) && store.classifyError(error) !== 'other') throw error;
    return runBatch(
      store,
      consumer,
      items,
      runner,
      true,
      error instanceof BatchItemFailed ? error : undefined,
    );
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

function runBatch<I extends BatchMessage, T, Tx>(
  store: IdempotencyStore<Tx>,
  consumer: string,
  items: readonly I[],
  runner: BatchRunner<I, T, Tx>,
  isolateItems: boolean,
  knownFailure?: BatchItemFailed,
): Promise<OrderedBatchItemResult<T>[]> {
  return retryTransient(store, () =>
    store.transaction(async (tx) => {
      const claimed = new Set(await claimAll(store, tx, consumer, items));
      const results = new Array<OrderedBatchItemResult<T>>(items.length);
      /** Where each ID this batch claimed first ran, for its repeats further on. */
      const firstRun = new Map<string, number>();
      const repeats: Array<[repeat: number, first: number]> = [];
      /** Ordering groups with a failed item: what follows it in the group is released. */
      const stalled = new Set<string>();
      const released: string[] = [];
      /** Without isolation, the new items run together once the walk has found them all. */
      const fresh: FreshItem<I>[] = [];
      for (const [index, item] of items.entries()) {
        if (item.orderingGroup !== undefined && stalled.has(item.orderingGroup)) {
          // Behind a failure in its group: committing it would overtake the failed item's retry.
          if (claimed.delete(item.messageId)) {
            firstRun.set(item.messageId, index);
            released.push(item.messageId);
          }
          results[index] = { status: 'released' };
          continue;
        }
        // Taking the ID out makes a second occurrence in the same batch a duplicate.
        if (!claimed.delete(item.messageId)) {
          const first = firstRun.get(item.messageId);
          if (first !== undefined) repeats.push([index, first]);
          results[index] = { status: 'duplicate' };
          continue;
        }
        firstRun.set(item.messageId, index);
        if (!isolateItems) {
          fresh.push({ item, index });
          continue;
        }
        if (knownFailure?.index !== index && runner.stopStarting?.aborted) {
          // Out of time: not started (again); nothing of it commits.
          released.push(item.messageId);
          results[index] = { status: 'released' };
          continue;
        }
        try {
          if (knownFailure?.index === index) throw knownFailure.error;
          results[index] = {
            status: 'processed',
            result: await store.savepoint(tx, () => runner.alone(item, tx)),
          };
        } catch (error) {
          // The transaction itself is in trouble: let the whole batch fail (and retry).
          if (store.classifyError(error) !== 'other') throw error;
          await store.unclaim(tx, consumer, [item.messageId]);
          results[index] = { status: 'failed', error };
          if (item.orderingGroup !== undefined) stalled.add(item.orderingGroup);
        }
      }
      if (fresh.length > 0) {
        const values = await runner.together(fresh, tx);
        for (const [i, { item, index }] of fresh.entries()) {
          if (i < values.length) {
            results[index] = { status: 'processed', result: values[i] as T };
          } else {
            released.push(item.messageId);
            results[index] = { status: 'released' };
          }
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
function claimAll<Tx>(
  store: IdempotencyStore<Tx>,
  tx: Tx,
  consumer: string,
  items: readonly BatchMessage[],
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
function repeatMismatch(first: BatchMessage, repeat: BatchMessage): { payloadMismatch?: PayloadMismatch } {
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
  items: readonly BatchMessage[],
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
