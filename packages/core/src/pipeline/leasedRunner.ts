/**
 * The `leased` runner: claim a lease in its own commit, run the handler outside any
 * transaction, complete the claim if still its owner, then the settlement.
 */
import { LeaseLostError } from '../errors.js';
import { fingerprintStore, retryTransient } from '../processOnce.js';
import type { Outcome, Pipeline, Prepared } from './shared.js';
import { ReleaseRequested } from './shared.js';
import { compareFingerprint } from './transactionalRunner.js';

export class LeasedRunner<TBody, Tx> {
  constructor(private readonly p: Pipeline<TBody, Tx>) {}

  /**
   * Each store step waits out an outage on its own, so an outage during the completion
   * retries the completion (same owner) instead of running the handler again.
   */
  async runLeased(prepared: Prepared<TBody>, setOwner: (owner: string | undefined) => void): Promise<void> {
    const { message, key, attempt, keeper, event, delivery } = prepared;
    const { store, settings, guard, log } = this.p;
    const started = Date.now();
    const finish = (outcome: Outcome) =>
      this.p.settlement.conclude(outcome, delivery, { ...event, durationMs: Date.now() - started });
    const acquired = await guard.withStore([prepared], event, () =>
      this.leasedStep(() => retryTransient(store, () => store.acquireLease(key, settings.leaseMs))),
    );
    if (acquired === undefined) return;
    if ('refused' in acquired) return finish(acquired.refused);
    const claim = acquired.value;
    if (claim.status === 'completed') {
      const { fingerprint } = prepared;
      if (fingerprint === undefined) return finish({ kind: 'duplicate' });
      const compared = await guard.withStore([prepared], event, () =>
        this.leasedStep(() => retryTransient(store, () => compareFingerprint(store, key, fingerprint))),
      );
      if (compared === undefined) return;
      return finish('refused' in compared ? compared.refused : compared.value);
    }
    if (claim.status === 'busy') {
      // Someone holds a live claim: do not ack; come back once it could have expired.
      return finish({ kind: 'busy', retryInMs: Math.max(100, claim.lockedUntil.getTime() - Date.now()) });
    }
    setOwner(claim.owner);
    try {
      if (claim.takeover) this.p.events.emit('takeover', event);
      const giveUp = () =>
        store
          .releaseLease(key, claim.owner)
          .catch((error) => log.warn('could not release leased claim', { ...event, error }));
      if (attempt > settings.maxAttempts) {
        await giveUp();
        return finish({ kind: 'exhausted' });
      }
      let result: unknown;
      try {
        result = await this.p.handlers.runHandler(message, undefined, attempt, keeper);
      } catch (error) {
        await giveUp();
        return finish(error instanceof ReleaseRequested ? { kind: 'release' } : { kind: 'failed', error });
      }
      const { fingerprint } = prepared;
      const completed = await guard.withStore([prepared], event, () =>
        this.leasedStep(() =>
          fingerprint === undefined
            ? store.completeLease(key, claim.owner, result ?? null)
            : fingerprintStore(store).completeLease(key, claim.owner, result ?? null, fingerprint),
        ),
      );
      if (completed === undefined) return;
      if ('refused' in completed) {
        // The store refused the completion itself (a result jsonb cannot hold): a failure
        // like any other, counted, so it ends in the dead-letter queue instead of a loop.
        await giveUp();
        return finish(completed.refused);
      }
      if (!completed.value) {
        // Our claim expired and another consumer took over: it owns the outcome now.
        this.p.events.emit('leaseLost', {
          ...event,
          error: new LeaseLostError('claim taken over before completion'),
        });
        return finish({ kind: 'duplicate' });
      }
      return finish({ kind: 'processed' });
    } finally {
      setOwner(undefined);
    }
  }

  /**
   * A leased-mode store step: an outage propagates (withStore waits it out); any other
   * store error becomes a `failed` outcome, so the delivery is settled and counted.
   */
  private async leasedStep<T>(step: () => Promise<T>): Promise<{ value: T } | { refused: Outcome }> {
    try {
      return { value: await step() };
    } catch (error) {
      if (this.p.store.classifyError(error) === 'unavailable') throw error;
      return { refused: { kind: 'failed', error } };
    }
  }
}
