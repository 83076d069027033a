import type { Message as SqsMessage } from '@aws-sdk/client-sqs';
import {
  type DeadLetterReason,
  type Delivery,
  type Envelope,
  isOncelyError,
  LeaseLostError,
} from '@oncely/core';
import type { Settlement } from './GroupSequencer.js';
import { MAX_VISIBILITY_MS } from './sqsConfig.js';

/**
 * SQS caps the total visibility of one receipt at 12 hours from receipt (the adapter's
 * `lease.maxTotalMs`). Extensions keep a margin below it for clock skew and request
 * latency: asking past the cap is an error, not a clamp.
 *
 * @example
 * ```ts
 * if (handlerTimeoutMs > MAX_TOTAL_VISIBILITY_MS) throw new Error('cannot hold an SQS message that long');
 * ```
 */
export const MAX_TOTAL_VISIBILITY_MS = MAX_VISIBILITY_MS;
const CAP_MARGIN_MS = 5_000;

/** First pause before a failed visibility renewal is tried again; it doubles up to the maximum. */
const RENEW_RETRY_FIRST_MS = 100;
const RENEW_RETRY_MAX_MS = 2_000;
/** A renewal must reach SQS before the visibility runs out: retries stop this far ahead of it (at most). */
const RENEW_DEADLINE_MARGIN_MS = 1_000;

/** What a delivery needs from its adapter to settle. */
export interface DeliverySettler {
  changeVisibility(receiptHandle: string, seconds: number): Promise<void>;
  /** A heartbeat: may be batched with others. */
  renewVisibility(receiptHandle: string, seconds: number, signal?: AbortSignal): Promise<void>;
  delete(receiptHandle: string): Promise<void>;
  deadLetter(delivery: SqsDelivery, reason: DeadLetterReason, detail: string): Promise<void>;
}

/**
 * One receipt of one SQS message: the core settles it through these calls.
 *
 * - `ack` deletes it (batched with other acks of the next few ms);
 * - `retryLater(ms)` sets its visibility to the delay, so SQS hands it out again then;
 * - `release` sets its visibility to 0;
 * - `extendLease(ms)` sets its visibility to `ms` from now (ChangeMessageVisibility
 *   counts from the call, not from receipt), never past 12 hours from receipt. A renewal
 *   that fails (throttling, a network error) is retried soon, with a short backoff, for as
 *   long as the visibility left allows; only then is the lease reported lost;
 * - `deadLetter` sends it to the dead-letter queue with the reason, then deletes it.
 *
 * A stale receipt handle makes these reject with `LeaseLostError`; the core counts an
 * `ackFailed` and never turns it into a second effect.
 *
 * @example
 * ```ts
 * await runtime.dispatch(new SqsDelivery(message, envelope, settler, requestedAt, respondedAt, 30000));
 * ```
 */
export class SqsDelivery implements Delivery {
  private expiresAt: number;
  private settledAs: Settlement | undefined;
  private renewing: Promise<void> | undefined;

  constructor(
    readonly message: SqsMessage,
    readonly envelope: Envelope,
    private readonly settler: DeliverySettler,
    /**
     * When the ReceiveMessage call that returned it was sent: the earliest SQS could have
     * started its clock. The 12-hour cap counts from here (erring early is safe there).
     */
    readonly receivedAt: number,
    /**
     * When that call answered. SQS starts the visibility clock when it hands the message
     * out, which in a long poll can be many seconds after the call was sent: a message
     * that arrives late in a 20 s poll has its whole visibility left. Counting the first
     * expiry from the request would make one failed renewal look like a lost lease.
     */
    respondedAt: number,
    private readonly visibilityMs: number,
  ) {
    this.expiresAt = respondedAt + visibilityMs;
  }

  get receiptHandle(): string {
    return this.message.ReceiptHandle ?? '';
  }

  get leaseExpiresAt(): number {
    return this.expiresAt;
  }

  get orderingKey(): string | undefined {
    return this.envelope.orderingKey;
  }

  /** The settlement the core asked for, whether or not the call succeeded. */
  get settlement(): Settlement | undefined {
    return this.settledAs;
  }

  async ack(): Promise<void> {
    this.settledAs = 'ack';
    await this.settler.delete(this.receiptHandle);
  }

  async retryLater(delayMs: number): Promise<void> {
    this.settledAs = 'retry';
    const seconds = Math.max(0, Math.min(Math.ceil(delayMs / 1000), this.secondsLeftUnderCap()));
    await this.settler.changeVisibility(this.receiptHandle, seconds);
  }

  async deadLetter(reason: DeadLetterReason, detail: string): Promise<void> {
    this.settledAs = 'dead-letter';
    await this.settler.deadLetter(this, reason, detail);
  }

  async release(): Promise<void> {
    this.settledAs = 'release';
    await this.settler.changeVisibility(this.receiptHandle, 0);
  }

  /**
   * One renewal at a time: a heartbeat that finds one still retrying shares it.
   */
  extendLease(ms: number): Promise<void> {
    this.renewing ??= this.renew(ms).finally(() => {
      this.renewing = undefined;
    });
    return this.renewing;
  }

  private async renew(ms: number): Promise<void> {
    for (let retry = 0; ; retry++) {
      // Settled meanwhile (a retry waited): the settlement owns the visibility now.
      if (this.settledAs !== undefined) return;
      const left = this.secondsLeftUnderCap();
      if (left <= 0) {
        throw new LeaseLostError("SQS's 12-hour total visibility limit for this receipt is reached");
      }
      // At least the visibility timeout: with heartbeatIntervalMs the keeper asks for
      // twice the interval, which may be less.
      const seconds = Math.min(Math.ceil(Math.max(ms, this.visibilityMs) / 1000), left);
      const deadline = this.expiresAt - Math.min(RENEW_DEADLINE_MARGIN_MS, this.visibilityMs / 10);
      const calledAt = Date.now();
      try {
        // A call still unanswered when the visibility runs out is of no use: give up on it then.
        const signal = AbortSignal.timeout(Math.max(1, this.expiresAt - calledAt));
        await this.settler.renewVisibility(this.receiptHandle, seconds, signal);
        // Counted from the call: the server saw it no earlier than calledAt.
        this.expiresAt = calledAt + seconds * 1000;
        return;
      } catch (error) {
        if (isOncelyError(error, 'LEASE_LOST')) throw error;
        // Transient (RequestThrottled, a network error): try again soon, while the
        // visibility lasts. The core's keeper would only try again half a visibility later.
        const pause = Math.min(
          RENEW_RETRY_FIRST_MS * 2 ** retry,
          RENEW_RETRY_MAX_MS,
          (deadline - Date.now()) / 2,
        );
        if (pause < 10) {
          throw new LeaseLostError('visibility renewal kept failing until the visibility ran out', {
            cause: error,
          });
        }
        await new Promise((resolve) => setTimeout(resolve, pause));
      }
    }
  }

  /** Whole seconds of visibility still allowed under the 12-hour cap. */
  secondsLeftUnderCap(): number {
    return Math.floor((this.receivedAt + MAX_TOTAL_VISIBILITY_MS - CAP_MARGIN_MS - Date.now()) / 1000);
  }
}
