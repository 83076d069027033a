import type { Message as SqsMessage } from '@aws-sdk/client-sqs';
import { type DeadLetterReason, type Delivery, type Envelope, LeaseLostError } from '@oncely/core';
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

/** What a delivery needs from its adapter to settle. */
export interface DeliverySettler {
  changeVisibility(receiptHandle: string, seconds: number): Promise<void>;
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
 *   counts from the call, not from receipt), never past 12 hours from receipt;
 * - `deadLetter` sends it to the dead-letter queue with the reason, then deletes it.
 *
 * A stale receipt handle makes these reject with `LeaseLostError`; the core counts an
 * `ackFailed` and never turns it into a second effect.
 *
 * @example
 * ```ts
 * await runtime.dispatch(new SqsDelivery(message, envelope, settler, receivedAt, 30000));
 * ```
 */
export class SqsDelivery implements Delivery {
  private expiresAt: number;
  private settledAs: Settlement | undefined;

  constructor(
    readonly message: SqsMessage,
    readonly envelope: Envelope,
    private readonly settler: DeliverySettler,
    /** When the ReceiveMessage call that returned it was sent: the earliest SQS could have counted from. */
    readonly receivedAt: number,
    visibilityMs: number,
  ) {
    this.expiresAt = receivedAt + visibilityMs;
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

  async extendLease(ms: number): Promise<void> {
    const left = this.secondsLeftUnderCap();
    if (left <= 0) {
      throw new LeaseLostError("SQS's 12-hour total visibility limit for this receipt is reached");
    }
    const seconds = Math.min(Math.ceil(ms / 1000), left);
    const calledAt = Date.now();
    await this.settler.changeVisibility(this.receiptHandle, seconds);
    // Counted from the call: the server saw it no earlier than calledAt.
    this.expiresAt = calledAt + seconds * 1000;
  }

  /** Whole seconds of visibility still allowed under the 12-hour cap. */
  private secondsLeftUnderCap(): number {
    return Math.floor((this.receivedAt + MAX_TOTAL_VISIBILITY_MS - CAP_MARGIN_MS - Date.now()) / 1000);
  }
}
