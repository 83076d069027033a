/**
 * The batch runner (`batch` option, `batchHandler`, and a Kafka partition's ordered
 * records): one transaction and one claim for the whole batch, each handler under its
 * own savepoint, every delivery settled after the one commit; a batch that fails as a
 * whole runs again one message at a time.
 */
import { Gathering } from '../Batcher.js';
import {
  type BatchItemResult,
  type BatchMessage,
  type OrderedBatchItemResult,
  processBatchOnce,
  processBatchTogether,
} from '../processOnce.js';
import type { Delivery } from '../types.js';
import {
  AttemptsExhausted,
  type Outcome,
  orderingGroupOf,
  type Pipeline,
  type Prepared,
  ReleaseRequested,
  type Slot,
} from './shared.js';

export class BatchRunner<TBody, Tx> {
  constructor(private readonly p: Pipeline<TBody, Tx>) {}

  /**
   * Deliveries that must take effect in order (one Kafka partition's records) as one
   * batch, in their order whatever order they finish preparing in: one transaction, and
   * what follows a failed one in its ordering group is released (processBatchOnce).
   * `dispatch` prepares each one and adds it to its slot.
   */
  async inOrder(
    deliveries: readonly Delivery[],
    dispatch: (delivery: Delivery, slot: Slot<TBody>) => Promise<void>,
  ): Promise<void> {
    const gathering = new Gathering<Prepared<TBody>>(
      deliveries.length,
      async (batch, heldBack) => {
        // Behind one that comes again: given back, not run ahead of it (nor counted).
        for (const entry of heldBack) await this.p.settlement.release(entry.delivery, entry.event);
        if (batch.length > 0) await this.runBatch(batch);
      },
      (error) => this.p.log.error('unexpected batch pipeline error', { error }),
    );
    await Promise.all(
      deliveries.map((delivery, index) => {
        const slot: Slot<TBody> = { gathering, index, notDone: false };
        return dispatch(notingNotDone(delivery, slot), slot);
      }),
    );
  }

  /** The batch's one transaction (claim → handlers → commit), then each delivery's settlement. */
  async runBatch(batch: readonly Prepared<TBody>[]): Promise<void> {
    const started = Date.now();
    let outcomes: Outcome[] | undefined;
    try {
      outcomes = await this.p.guard.withStore(batch, { consumer: this.p.settings.name }, () =>
        this.batchOutcomes(batch),
      );
    } catch (error) {
      // The batch failed as a whole, not one item in it: its COMMIT was refused (a deferred
      // constraint), transient conflicts outlasted their retries, an unclaim failed. Nothing
      // committed. Each message then runs in a transaction of its own, so only the one at
      // fault fails and its healthy neighbours are neither stranded nor dead-lettered.
      this.p.log.warn('batch transaction failed as a whole: running its messages one by one', { error });
      await this.runOneByOne(batch);
      return;
    }
    if (outcomes === undefined) return;
    const durationMs = Date.now() - started;
    await Promise.all(
      batch.map((entry, i) =>
        this.p.settlement.conclude(outcomes[i]!, entry.delivery, { ...entry.event, durationMs }),
      ),
    );
  }

  /**
   * A batch's messages, each in its own transaction, in order. An ordered one behind a
   * message of its group that did not go through is released, as in one transaction.
   */
  private async runOneByOne(batch: readonly Prepared<TBody>[]): Promise<void> {
    const stalled = new Set<string>();
    for (const entry of batch) {
      const group = orderingGroupOf(entry.delivery.envelope);
      if (group !== undefined && stalled.has(group)) {
        await this.p.settlement.release(entry.delivery, entry.event);
        continue;
      }
      const outcome = await this.p.transactional.runOne(entry);
      const wentThrough = outcome !== undefined && !['failed', 'release', 'busy'].includes(outcome.kind);
      if (group !== undefined && !wentThrough) stalled.add(group);
    }
  }

  private async batchOutcomes(batch: readonly Prepared<TBody>[]): Promise<Outcome[]> {
    const { settings, store, telemetry, handlers } = this.p;
    const results: ReadonlyArray<BatchItemResult<unknown> | OrderedBatchItemResult<unknown>> =
      settings.batchHandler
        ? await this.runTogether(batch)
        : await processBatchOnce(
            store,
            settings.name,
            batch.map((entry) => ({
              ...batchMessage(entry),
              work: (tx: Tx) =>
                // The batch runs in whichever delivery's context filled it: each handler gets its own span.
                telemetry.within(entry.delivery, async () => {
                  if (entry.attempt > settings.maxAttempts) throw new AttemptsExhausted();
                  await handlers.runHandler(entry.message, tx, entry.attempt, entry.keeper);
                }),
            })),
          );
    return results.map((result): Outcome => {
      if (result.status === 'duplicate' && result.payloadMismatch)
        return { kind: 'mismatch', mismatch: result.payloadMismatch };
      // Behind a failure in its ordering group: given back, not counted as an attempt.
      if (result.status === 'released') return { kind: 'release' };
      if (result.status !== 'failed') return { kind: result.status };
      if (result.error instanceof AttemptsExhausted) return { kind: 'exhausted' };
      if (result.error instanceof ReleaseRequested) return { kind: 'release' };
      return { kind: 'failed', error: result.error };
    });
  }

  /**
   * `batchHandler`: one call for the batch's new messages. A message whose attempts are
   * used up fails the joint call before it runs; the isolation pass then finds it alone
   * (`exhausted`), exactly as on the per-message path, and commits the others.
   */
  private runTogether(batch: readonly Prepared<TBody>[]): Promise<OrderedBatchItemResult<void>[]> {
    const { settings, store, telemetry, handlers } = this.p;
    return processBatchTogether(
      store,
      settings.name,
      batch.map((entry) => ({ ...batchMessage(entry), entry })),
      async (fresh, tx) => {
        const entries = fresh.map((item) => item.entry);
        if (entries.some((entry) => entry.attempt > settings.maxAttempts)) throw new AttemptsExhausted();
        // One message alone runs in its own span; a joint call in whichever delivery's
        // context filled the batch.
        if (entries.length === 1) {
          await telemetry.within(entries[0]!.delivery, () => handlers.runBatchHandler(entries, tx));
        } else {
          await handlers.runBatchHandler(entries, tx);
        }
      },
    );
  }
}

/** What a batch needs of a prepared delivery: its ID, fingerprint and ordering group. */
function batchMessage(entry: Prepared<unknown>): BatchMessage {
  return {
    messageId: entry.key.messageId,
    fingerprint: entry.fingerprint,
    orderingGroup: orderingGroupOf(entry.delivery.envelope),
  };
}

/**
 * The delivery with its retry and release noting on `slot` that it is not done, so an
 * ordered batch it never joined stops before it (inOrder).
 */
function notingNotDone<TBody>(delivery: Delivery, slot: Slot<TBody>): Delivery {
  return {
    ...delivery,
    retryLater: (delayMs, info) => {
      slot.notDone = true;
      return delivery.retryLater(delayMs, info);
    },
    release: () => {
      slot.notDone = true;
      return delivery.release();
    },
  };
}
