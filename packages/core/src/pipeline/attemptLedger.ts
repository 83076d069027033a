/**
 * The attempt ledger: which attempt a run is, counted up front for a possible
 * redelivery (so a message that crashes the process still reaches `maxAttempts`),
 * counted at settlement for a first delivery that failed, taken back when a counted run
 * is released, and cleared once the message is done.
 */
import { randomUUID } from 'node:crypto';
import { retryTransient } from '../processOnce.js';
import type { ConsumerEvent, Delivery, MessageKey } from '../types.js';
import type { Pipeline } from './shared.js';

/** A run counted up front: its message and the token the store knows it by. */
interface CountedRun {
  key: MessageKey;
  run: string;
}

export class AttemptLedger {
  /**
   * Deliveries whose run was counted before it started (a possible redelivery, so a
   * crash must still count), with the run's token (see attemptNumber()): a release takes
   * the count back.
   */
  private readonly countedRuns = new WeakMap<Delivery, CountedRun>();

  constructor(private readonly p: Pipeline<unknown, unknown>) {}

  /**
   * The attempt this run is: failed runs so far (and runs that crashed the process) plus
   * one. Attempts count failures, not deliveries: a broker's delivery count also counts
   * releases (stop, outage, a prefetched or held-back delivery that never ran), so it only
   * tells whether this may be a redelivery.
   *
   * - A first delivery writes nothing (the happy path pays for the marker alone). If it
   *   fails, the failure is counted when it is settled; if it crashes the process, the
   *   crash is not counted (the next delivery's count starts there).
   * - A possible redelivery counts its run up front, in its own commit, so that a message
   *   that crashes the process every time still reaches `maxAttempts`. If the run ends in
   *   a release instead, the count is taken back.
   */
  async attemptNumber(delivery: Delivery, key: MessageKey): Promise<number> {
    if (isFirstDelivery(delivery.envelope)) return 1;
    // One token per run, on record before the count is sent: when the count's answer is
    // lost and this runs again after the outage, the store counts the run once; when the
    // run is released instead (the outage outlasted its hold), the take-back removes this
    // run's count only if it landed.
    let counted = this.countedRuns.get(delivery);
    if (!counted) {
      counted = { key, run: randomUUID() };
      this.countedRuns.set(delivery, counted);
    }
    return this.countRun(counted);
  }

  /** One more run on record (its own short commit); returns the new count. */
  private countRun({ key, run }: CountedRun): Promise<number> {
    const { store } = this.p;
    return retryTransient(store, () => store.recordAttempt(key, run));
  }

  /** A failed run of a first delivery: counted now (a redelivery's run was counted up front). */
  async countFailure(delivery: Delivery, event: ConsumerEvent): Promise<void> {
    if (this.countedRuns.has(delivery) || event.messageId === undefined) return;
    const key = { consumer: event.consumer, messageId: event.messageId };
    await this.countRun({ key, run: randomUUID() }).catch((error) =>
      this.p.log.warn('could not count a failed attempt', { ...event, error }),
    );
  }

  /** A counted run that did not fail (released, or backed off from a busy claim): uncount it. */
  async uncount(delivery: Delivery, event: ConsumerEvent): Promise<void> {
    const counted = this.countedRuns.get(delivery);
    if (!counted) return;
    this.countedRuns.delete(delivery);
    try {
      await this.p.store.forgetAttempt(counted.key, counted.run);
    } catch (error) {
      this.p.log.warn('could not take back the count of a released run', { ...event, error });
    }
  }

  /**
   * A counted run whose message is done (its marker committed, by this run or an earlier
   * one): the counter row has no further use, and keeping it would leave a row behind for
   * every redelivery that succeeded (on Kafka, the first record of each partition after
   * every rebalance). After the ack, so it never delays a settlement; a row this cannot
   * delete stays until retention prunes it.
   */
  async clearCount(delivery: Delivery, event: ConsumerEvent): Promise<void> {
    const counted = this.countedRuns.get(delivery);
    const { store } = this.p;
    if (!counted || !store.clearAttempts) return;
    this.countedRuns.delete(delivery);
    try {
      await store.clearAttempts(counted.key);
    } catch (error) {
      this.p.log.debug('could not delete the attempt count of a processed message', { ...event, error });
    }
  }
}

/**
 * True when the broker says this is the message's first delivery: a delivery count of 1,
 * or a `redelivered` flag that is false. A broker that tells neither may be redelivering.
 */
function isFirstDelivery(envelope: Delivery['envelope']): boolean {
  if (envelope.redelivered === true) return false;
  if (envelope.deliveryCount !== undefined) return envelope.deliveryCount <= 1;
  return envelope.redelivered === false;
}
