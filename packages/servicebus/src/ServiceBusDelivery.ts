import type { ServiceBusReceivedMessage } from '@azure/service-bus';
import type { DeadLetterReason, Delivery, Envelope, SettlementInfo } from '@oncely/core';

/** What a delivery needs from its adapter to settle and renew. */
export interface DeliveryHost {
  complete(delivery: ServiceBusDelivery): Promise<void>;
  abandon(delivery: ServiceBusDelivery): Promise<void>;
  retry(delivery: ServiceBusDelivery, delayMs: number, info?: SettlementInfo): Promise<void>;
  deadLetter(delivery: ServiceBusDelivery, reason: DeadLetterReason, detail: string): Promise<void>;
  /** Renews the message lock (or the session lock); resolves with the new expiry. */
  renew(delivery: ServiceBusDelivery): Promise<number>;
}

/**
 * One peek-locked Service Bus message; the core settles it through these calls:
 *
 * - `ack` completes it;
 * - `retryLater(ms)` makes it come back after the delay (a scheduled copy, or the lock
 *   held for the delay and then an abandon; see `retryStrategy`);
 * - `deadLetter` moves it to the entity's `$DeadLetterQueue` with the reason and detail;
 * - `release` abandons it at once (Service Bus counts that as a delivery);
 * - `extendLease` renews the lock per lock token (the session lock on sessions). The
 *   service renews by the entity's LockDuration, whatever `ms` asks.
 *
 * A lost lock makes these reject with `LeaseLostError`; the core counts an `ackFailed`
 * and never turns it into a second effect.
 *
 * @example
 * ```ts
 * await runtime.dispatch(new ServiceBusDelivery(message, envelope, host, Date.now()));
 * ```
 */
export class ServiceBusDelivery implements Delivery {
  private expiresAt: number | undefined;

  constructor(
    readonly message: ServiceBusReceivedMessage,
    readonly envelope: Envelope,
    private readonly host: DeliveryHost,
    readonly receivedAt: number,
    /** Session lock expiry for session messages (their lock is the session's). */
    lockedUntil?: number,
  ) {
    this.expiresAt = lockedUntil ?? message.lockedUntilUtc?.getTime();
  }

  get leaseExpiresAt(): number | undefined {
    return this.expiresAt;
  }

  get sessionId(): string | undefined {
    return this.message.sessionId;
  }

  ack(): Promise<void> {
    return this.host.complete(this);
  }

  retryLater(delayMs: number, info?: SettlementInfo): Promise<void> {
    return this.host.retry(this, delayMs, info);
  }

  deadLetter(reason: DeadLetterReason, detail: string): Promise<void> {
    return this.host.deadLetter(this, reason, detail);
  }

  release(): Promise<void> {
    return this.host.abandon(this);
  }

  async extendLease(_ms: number): Promise<void> {
    this.expiresAt = await this.host.renew(this);
  }
}
