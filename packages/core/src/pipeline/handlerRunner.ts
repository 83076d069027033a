/**
 * Runs the user's handler (or batch handler) for prepared deliveries: its `ctx`, the
 * handler clock of its lease keeper, and whether its work may commit.
 */
import { isOncelyError, LeaseLostError } from '../errors.js';
import type { LeaseKeeper } from '../LeaseKeeper.js';
import type { Message } from '../types.js';
import { MessageContext } from './messageContext.js';
import { isShutdown, type Pipeline, type Prepared, ReleaseRequested } from './shared.js';

export class HandlerRunner<TBody, Tx> {
  constructor(private readonly p: Pipeline<TBody, Tx>) {}

  async runHandler(
    message: Message<TBody>,
    tx: Tx | undefined,
    attempt: number,
    keeper: LeaseKeeper,
  ): Promise<unknown> {
    const { handler, batchHandler } = this.p.settings;
    // With batchHandler, a message that runs on its own (a batch's isolation pass, the
    // one-by-one fallback) is a batch of one.
    if (batchHandler) return this.runBatchHandler([{ message, attempt, keeper }], tx as Tx);
    // The stop deadline passed while this delivery was being prepared: the core already
    // gave it up, so its handler does not start (with its signal already aborted, a
    // handler waiting for the 'abort' event would never end).
    if (isShutdown(keeper)) throw new ReleaseRequested();
    const ctx = this.context(message, tx, attempt, keeper);
    keeper.startHandlerClock();
    let result: unknown;
    try {
      result = await handler!(message, ctx);
    } catch (error) {
      // Whatever the handler threw once the stop deadline aborted it (often the abort
      // itself), the message did not fail: the consumer is going away. Nor once its lease
      // was lost: the consumer lost the message (attempts count failures, not lost locks).
      if (isShutdown(keeper) || leaseLost(keeper)) throw new ReleaseRequested();
      throw error;
    } finally {
      keeper.stopHandlerClock();
    }
    mayCommit(keeper);
    return result;
  }

  /** `batchHandler` over `entries`, in one transaction: runHandler's rules for each of them. */
  async runBatchHandler(
    entries: ReadonlyArray<Pick<Prepared<TBody>, 'message' | 'attempt' | 'keeper'>>,
    tx: Tx,
  ): Promise<void> {
    // As in runHandler: nothing starts once the stop deadline has passed.
    if (entries.some(({ keeper }) => isShutdown(keeper))) throw new ReleaseRequested();
    const batch = entries.map(({ message, attempt, keeper }) => ({
      message,
      ctx: this.context(message, tx, attempt, keeper),
    }));
    for (const { keeper } of entries) keeper.startHandlerClock();
    try {
      await this.p.settings.batchHandler!(batch, tx);
    } catch (error) {
      if (entries.some(({ keeper }) => isShutdown(keeper))) throw new ReleaseRequested();
      // Only when every message of the call lost its lease: otherwise the isolation pass
      // runs each alone, and there the one that lost its lease is released.
      if (entries.every(({ keeper }) => leaseLost(keeper))) throw new ReleaseRequested();
      throw error;
    } finally {
      for (const { keeper } of entries) keeper.stopHandlerClock();
    }
    // One message that may not commit fails the joint call: the isolation pass then
    // commits the others and settles that one alone.
    for (const { keeper } of entries) mayCommit(keeper);
  }

  private context(message: Message<TBody>, tx: Tx | undefined, attempt: number, keeper: LeaseKeeper) {
    const { settings, store, log } = this.p;
    return new MessageContext(settings.name, message.id, tx, attempt, keeper, store, log);
  }
}

/**
 * The lease was lost while the handler ran (a renewal refused, the adapter reporting the
 * delivery lost, the broker's cap, a leased-mode claim taken over): `ctx.signal` aborted
 * with `LeaseLostError` before anything else aborted it. What the handler throws then is
 * most often that abort, and the run cannot be told from a failure: it is released, not
 * counted — the redelivery, perhaps already running elsewhere, is the message's next run.
 * A handler that outlives its handler timeout still fails (that reason comes first).
 */
function leaseLost(keeper: LeaseKeeper): boolean {
  return keeper.aborted && isOncelyError(keeper.reason, 'LEASE_LOST');
}

/**
 * Throws unless a finished handler's work may commit. A timed-out or shut-down handler
 * must not commit: it may have stopped half-way when it saw the signal. A lost lease
 * alone does not stop a finished handler from committing — the unique key settles the
 * race with whoever got the redelivery.
 */
function mayCommit(keeper: LeaseKeeper): void {
  if (isShutdown(keeper)) throw new ReleaseRequested();
  if (keeper.aborted && !(keeper.reason instanceof LeaseLostError)) throw keeper.reason;
}
