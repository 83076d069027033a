/**
 * Settlement: the one path every run ends in. An outcome becomes its event and its
 * settlement on the broker: ack (then the attempt count is cleared), retry with backoff,
 * release without counting, or dead-letter.
 */
import { retryDelayMs } from '../backoff.js';
import { isOncelyError } from '../errors.js';
import type { ConsumerEvent, DeadLetterReason, Delivery } from '../types.js';
import {
  ABANDONED,
  errorText,
  LEASE_KEEPER,
  type Marked,
  type Outcome,
  type Pipeline,
  SETTLED,
  settledWithin,
} from './shared.js';

/** How long a release waits for its run's count to be taken back before giving the message back anyway. */
const UNCOUNT_WAIT_MS = 1000;

export class Settlement {
  constructor(private readonly p: Pipeline<unknown, unknown>) {}

  async conclude(outcome: Outcome, delivery: Delivery, event: ConsumerEvent): Promise<void> {
    const { events, ledger, settings } = this.p;
    this.p.telemetry.outcome(
      delivery,
      outcome.kind,
      event,
      outcome.kind === 'failed' ? outcome.error : undefined,
    );
    switch (outcome.kind) {
      case 'processed':
        events.emit('processed', event);
        await this.settle('ack', delivery, () => delivery.ack(), event);
        await ledger.clearCount(delivery, event);
        return;
      case 'duplicate':
        events.emit('duplicate', event);
        await this.settle('ack', delivery, () => delivery.ack(), event);
        await ledger.clearCount(delivery, event);
        return;
      case 'mismatch': {
        const mismatchEvent = { ...event, payloadMismatch: outcome.mismatch };
        events.emit('payloadMismatch', mismatchEvent);
        if (settings.onPayloadMismatch === 'dead-letter') {
          const detail =
            `message ID already processed with another payload (stored ${outcome.mismatch.storedFingerprint}, ` +
            `received ${outcome.mismatch.fingerprint})`;
          await this.deadLetter(delivery, 'payload-mismatch', detail, mismatchEvent);
          return;
        }
        // 'skip': the first payload's effect stands; this copy is acked as the duplicate it is.
        this.p.log.warn('duplicate message ID with a different payload: skipped', mismatchEvent);
        events.emit('duplicate', mismatchEvent);
        await this.settle('ack', delivery, () => delivery.ack(), mismatchEvent);
        await ledger.clearCount(delivery, mismatchEvent);
        return;
      }
      case 'busy':
        await ledger.uncount(delivery, event);
        await this.retry(delivery, outcome.retryInMs, event);
        return;
      case 'release':
        await this.release(delivery, event);
        return;
      case 'exhausted':
        await this.deadLetter(
          delivery,
          'max-attempts',
          `attempt ${event.attempt} exceeds maxAttempts ${settings.maxAttempts}: earlier runs failed or crashed the process`,
          event,
        );
        return;
      case 'failed': {
        events.emit('failed', { ...event, error: outcome.error });
        await ledger.countFailure(delivery, event);
        const attempt = event.attempt ?? 1;
        if (attempt >= settings.maxAttempts) {
          const detail = `failed ${attempt} times; last error: ${errorText(outcome.error)}`;
          await this.deadLetter(delivery, 'max-attempts', detail, event);
        } else {
          await this.retry(delivery, retryDelayMs(attempt, settings.backoff), event);
        }
        return;
      }
    }
  }

  /** Gives a delivery back without it counting as an attempt (stop, outage, safety net). */
  async release(delivery: Delivery, event: ConsumerEvent): Promise<void> {
    // The count first: a message given back can be redelivered at once, and a run counted
    // before the take-back landed would see one attempt too many (at the limit, dead-lettered
    // a run early). Bounded: a release often happens because the store is down or
    // partitioned, and giving the message back must not wait for it. A count that cannot be
    // taken back costs the message one attempt, logged.
    const takeBack = this.p.ledger.uncount(delivery, event);
    // A release of stop()'s (its deadline, or a prefetched delivery) is part of the stop:
    // stop() waits for its take-back too. One from before (a store outage) is not: that
    // store may not answer for a long time, and the count costs one attempt at most.
    const { lifecycle } = this.p;
    if (lifecycle.state === 'stopping') {
      lifecycle.takeBacks.add(takeBack);
      void takeBack.finally(() => lifecycle.takeBacks.delete(takeBack));
    }
    await settledWithin(takeBack, UNCOUNT_WAIT_MS);
    if (await this.settle('release', delivery, () => this.giveBack(delivery, event), event))
      this.p.events.emit('released', event);
  }

  /**
   * `delivery.release()`, where a lease already lost counts as given back: the broker
   * has the message back (or has handed it on), which is what the release was for. A run
   * released because it lost its lease would otherwise always end in an `ackFailed`.
   */
  private async giveBack(delivery: Delivery, event: ConsumerEvent): Promise<void> {
    try {
      await delivery.release();
    } catch (error) {
      if (!isOncelyError(error, 'LEASE_LOST')) throw error;
      this.p.log.debug('release found the lease already lost: the broker has the message back', {
        ...event,
        error,
      });
    }
  }

  private async retry(delivery: Delivery, delayMs: number, event: ConsumerEvent): Promise<void> {
    if (
      await this.settle(
        'retry',
        delivery,
        () => delivery.retryLater(delayMs, { attempt: event.attempt }),
        event,
      )
    ) {
      this.p.events.emit('retried', { ...event, delayMs });
    }
  }

  async deadLetter(
    delivery: Delivery,
    reason: DeadLetterReason,
    detail: string,
    event: ConsumerEvent,
  ): Promise<void> {
    this.p.log.warn('dead-lettering message', { ...event, reason, detail });
    if (
      await this.settle(
        'dead-letter',
        delivery,
        () => delivery.deadLetter(reason, detail, { attempt: event.attempt }),
        { ...event, reason },
      )
    ) {
      this.p.events.emit('deadLettered', { ...event, reason });
    }
  }

  /**
   * Runs one settlement. A failure after the commit is logged and counted (`ackFailed`),
   * never retried into a second effect: the redelivery it causes meets the marker.
   */
  private async settle(
    what: string,
    delivery: Delivery,
    action: () => Promise<void>,
    event: ConsumerEvent,
  ): Promise<boolean> {
    // Recorded before the call: a settlement that fails is logged and counted, and the
    // broker redelivers; releasing it on top would only add noise.
    (delivery as Marked)[SETTLED] = true;
    // stop() gave up on it and closed the adapter: logged and counted then.
    if ((delivery as Marked)[ABANDONED]) return false;
    // No renewal from here on, and none still on its way when the settlement goes out:
    // a late renewal would undo a hand-back (LeaseKeeper.handOver).
    await (delivery as Marked)[LEASE_KEEPER]?.handOver();
    try {
      await action();
      this.p.telemetry.settled(delivery, what, event);
      return true;
    } catch (error) {
      this.p.telemetry.settled(delivery, what, event, error);
      // Sent before stop() gave up on it, failed after: counted once, then.
      if ((delivery as Marked)[ABANDONED]) return false;
      this.p.log.warn(`${what} failed`, { ...event, error });
      this.p.events.emit('ackFailed', { ...event, error });
      return false;
    }
  }
}
