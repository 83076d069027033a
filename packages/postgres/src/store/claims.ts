import type { SqlClient } from '@oncely/core';
import type { StoreCore } from './StoreCore.js';

// Markers written in the caller's transaction: the dedup gate of transactional and batch modes.

/** PostgresStore.claim(): see its documentation. */
export async function claim(
  this: StoreCore,
  tx: SqlClient,
  consumer: string,
  messageIds: readonly string[],
): Promise<ReadonlySet<string>> {
  // One ID (every processOnce) needs neither de-duplication nor sorting.
  const ids = messageIds.length === 1 ? messageIds : [...new Set(messageIds)].sort();
  if (ids.length === 0) return new Set();
  // The one-message path is the hot one: a plain VALUES insert plans faster than unnest.
  const { rows } =
    ids.length === 1
      ? await tx.query<{ message_id: string }>(this.queries.claimOne, [consumer, ids[0]])
      : await tx.query<{ message_id: string }>(this.queries.claim, [consumer, ids]);
  return new Set(rows.map((row) => row.message_id));
}

/** PostgresStore.unclaim(): see its documentation. */
export async function unclaim(
  this: StoreCore,
  tx: SqlClient,
  consumer: string,
  messageIds: readonly string[],
): Promise<void> {
  if (messageIds.length === 0) return;
  await tx.query(this.queries.unclaim, [consumer, [...messageIds]]);
}

/** PostgresStore.savepoint(): see its documentation. */
export async function savepoint<T>(this: StoreCore, tx: SqlClient, work: () => Promise<T>): Promise<T> {
  const name = `oncely_sp_${++this.savepoints}`;
  await tx.query(`SAVEPOINT ${name}`);
  let result: T;
  try {
    result = await work();
  } catch (error) {
    // If this fails too the transaction is unusable and its COMMIT will fail; the
    // handler's error is the one worth reporting.
    await tx.query(`ROLLBACK TO SAVEPOINT ${name}`).catch(() => {});
    throw error;
  }
  try {
    // Fails (25P02) when `work` caught a statement error itself: the savepoint's part of
    // the transaction is aborted. Rolling back to it keeps the rest of the transaction
    // committable, and the throw makes this item a failure rather than a silent loss.
    await tx.query(`RELEASE SAVEPOINT ${name}`);
  } catch (error) {
    await tx.query(`ROLLBACK TO SAVEPOINT ${name}`).catch(() => {});
    throw error;
  }
  return result;
}
