import type { Message as PubSubMessage } from '@google-cloud/pubsub';
import type { DeadLetterReason, Delivery, Envelope } from '@oncely/core';
import { MAX_ACK_DEADLINE_SECONDS } from './pubsubConfig.js';

/** What a delivery needs from its adapter to settle. */
export interface DeliverySettler {
  ack(delivery: PubSubDelivery): Promise<void>;
  modAck(delivery: PubSubDelivery, seconds: number): Promise<void>;
  /** A failed attempt: the subscription's retry policy, else a delayed modAck. */
  retry(delivery: PubSubDelivery, delayMs: number): Promise<void>;
  deadLetter(delivery: PubSubDelivery, reason: DeadLetterReason, detail: string): Promise<void>;
  /** It waits in a batch that may need more messages to fill (see `Delivery.awaitingBatch`). */
  awaitingBatch(delivery: PubSubDelivery): void;
}

/**
 * One delivery of one Pub/Sub message (one ack ID): the core settles it through these.
 *
 * - `ack` acknowledges it and resolves once the service answered (with exactly-once, a
 *   stale ack ID rejects with `LeaseLostError`);
 * - `retryLater(ms)` nacks it where the subscription has a retry policy (the service's
 *   backoff applies), else sets its ack deadline to the delay so the service hands it out
 *   again then;
 * - `release` nacks it (ModifyAckDeadline 0);
 * - `extendLease(ms)` sets its ack deadline to `ms` from now (ModifyAckDeadline counts
 *   from the call), at most 600 s;
 * - `deadLetter` publishes a copy with the reason to the dead-letter topic, then acks it.
 *
 * @example
 * ```ts
 * await runtime.dispatch(new PubSubDelivery(message, envelope, settler, Date.now(), 10_000));
 * ```
 */
export class PubSubDelivery implements Delivery {
  private expiresAt: number;
  /** The last renewal asked for, settled either way (see renewalsStopped()). */
  private renewal: Promise<unknown> = Promise.resolve();
  private renewing = true;

  /**
   * @param receipt resolves once the client's receipt modAck of this message was
   *   answered: a deadline change of ours sent before it would be overwritten by it.
   */
  constructor(
    readonly message: PubSubMessage,
    readonly envelope: Envelope,
    private readonly settler: DeliverySettler,
    arrivedAt: number,
    leaseMs: number,
    private readonly receipt: Promise<void> = Promise.resolve(),
  ) {
    // No `receivedAt` (Delivery's): the lease keeper's cap (maxExtensionMs) counts from
    // dispatch, not from the time a message waited in the adapter for a slot.
    this.expiresAt = arrivedAt + leaseMs;
  }

  /**
   * Resolves once the client's receipt modAck was answered, or once the lease is over
   * (nothing of ours can be overwritten then), whichever comes first.
   */
  async receiptAnswered(): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const leaseOver = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, Math.max(0, this.expiresAt - Date.now()));
    });
    try {
      await Promise.race([this.receipt, leaseOver]);
    } finally {
      clearTimeout(timer);
    }
  }

  get ackId(): string {
    return this.message.ackId;
  }

  get orderingKey(): string | undefined {
    return this.envelope.orderingKey;
  }

  get leaseExpiresAt(): number {
    return this.expiresAt;
  }

  ack(): Promise<void> {
    return this.settler.ack(this);
  }

  retryLater(delayMs: number): Promise<void> {
    return this.settler.retry(this, delayMs);
  }

  deadLetter(reason: DeadLetterReason, detail: string): Promise<void> {
    return this.settler.deadLetter(this, reason, detail);
  }

  release(): Promise<void> {
    return this.settler.modAck(this, 0);
  }

  awaitingBatch(): void {
    this.settler.awaitingBatch(this);
  }

  async extendLease(ms: number): Promise<void> {
    // Handed back (see renewalsStopped()): a renewal now would undo that.
    if (!this.renewing) return;
    const seconds = Math.min(MAX_ACK_DEADLINE_SECONDS, Math.max(1, Math.ceil(ms / 1000)));
    const calledAt = Date.now();
    const call = this.settler.modAck(this, seconds);
    this.renewal = call.catch(() => {});
    await call;
    // Counted from the call: the service saw it no earlier than calledAt.
    this.expiresAt = calledAt + seconds * 1000;
  }

  /**
   * Stops renewing (the lease keeper goes on until the settlement is confirmed) and
   * resolves once the last renewal asked for was answered: a deadline change of ours
   * (a delayed retry, a park, a nack) must land after it. A renewal still being retried
   * through a transient failure landed after a park and set the deadline back to one
   * lease.
   */
  renewalsStopped(): Promise<unknown> {
    this.renewing = false;
    return this.renewal;
  }
}
